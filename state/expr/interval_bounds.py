"""The time bounds of an interval join, read from its condition as Flink's planner reads them.

`L.t BETWEEN R.t - INTERVAL '4' HOUR AND R.t` (or the same with `>=`, `>`, `<=`, `<`, either
side first) bounds `L.t - R.t` to `[lower, upper]` in milliseconds; a strict comparison moves its
bound by one millisecond, as in Flink; an equality (`L.t = R.t`, `L.t = R.t + INTERVAL ...`) is
an interval of width zero. Only comparisons between the two inputs' time attributes
count; every other conjunct stays in the residual predicate, evaluated per candidate pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from state.expr.condition import ConditionError, JoinCondition, interval_ms, split_condition

_FLIPPED: dict[type[exp.Expression], type[exp.Expression]] = {
    exp.GT: exp.LT,
    exp.GTE: exp.LTE,
    exp.LT: exp.GT,
    exp.LTE: exp.GTE,
    exp.EQ: exp.EQ,
}


@dataclass(frozen=True)
class IntervalCondition:
    """Equi-keys, `lower <= L.t - R.t <= upper` (ms), and what remains of the condition."""

    condition: JoinCondition
    lower_ms: int
    upper_ms: int


def _time_offset(node: exp.Expression, times: dict[str, str]) -> tuple[str, int] | None:
    """`X.t [+|- INTERVAL ...]*` as (alias of X, offset ms), if X.t is X's time attribute."""
    node = node.unnest()
    if isinstance(node, exp.Column):
        alias = node.table.upper()
        return (alias, 0) if times.get(alias) == node.name else None
    if isinstance(node, exp.Add | exp.Sub) and isinstance(node.expression, exp.Interval):
        inner = _time_offset(node.this, times)
        if inner is None:
            return None
        step = interval_ms(node.expression)
        return inner[0], inner[1] + (step if isinstance(node, exp.Add) else -step)
    return None


def _comparisons(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Between):
        return [
            exp.GTE(this=node.this, expression=node.args["low"]),
            exp.LTE(this=node.this, expression=node.args["high"]),
        ]
    return [node]


def split_interval(tree: exp.Expression, left_time: str, right_time: str) -> IntervalCondition:
    """Separate the time bounds between `L.<left_time>` and `R.<right_time>` from the rest."""
    plain = split_condition(tree)
    times = {"L": left_time, "R": right_time}
    lower: int | None = None
    upper: int | None = None
    keys = [i for i, pair in enumerate(plain.equi) if pair != (left_time, right_time)]
    if len(keys) < len(plain.equi):  # L.t = R.t was read as a join key: it is a zero interval
        lower, upper = 0, 0
    rest: list[exp.Expression] = []
    residual = plain.residual
    conjuncts = residual.flatten() if isinstance(residual, exp.And) else [residual]
    for conjunct in filter(None, conjuncts):
        for node in _comparisons(conjunct.unnest()):
            kind = type(node)
            a = _time_offset(node.this, times) if kind in _FLIPPED else None
            b = _time_offset(node.expression, times) if a is not None else None
            if a is None or b is None or a[0] == b[0]:
                rest.append(node)
                continue
            if a[0] == "R":  # R.t + x op L.t + y  ->  L.t + y flipped-op R.t + x
                a, b, kind = b, a, _FLIPPED[kind]
            bound = b[1] - a[1]  # L.t - R.t op bound
            if kind is exp.EQ:
                lower = bound if lower is None else max(lower, bound)
                upper = bound if upper is None else min(upper, bound)
            elif kind in (exp.GT, exp.GTE):
                bound += 1 if kind is exp.GT else 0
                lower = bound if lower is None else max(lower, bound)
            else:
                bound -= 1 if kind is exp.LT else 0
                upper = bound if upper is None else min(upper, bound)
    if lower is None or upper is None:
        raise ConditionError(
            f"an interval join needs a lower and an upper bound on L.{left_time} - "
            f"R.{right_time}, like L.{left_time} BETWEEN R.{right_time} - INTERVAL '1' HOUR "
            f"AND R.{right_time}"
        )
    residual = exp.and_(*rest) if rest else None
    equi = tuple(plain.equi[i] for i in keys)
    null_safe = frozenset(n for n, i in enumerate(keys) if i in plain.null_safe)
    return IntervalCondition(JoinCondition(equi, residual, null_safe), lower, upper)
