"""Join conditions written the way Flink users write them, over the aliases `L` and `R`.

The text is parsed with sqlglot (a real SQL parser), so an error can point at the part of the
condition it could not use. The condition is split like Flink's planner splits it: equalities
between a left and a right column become the join key (rows are partitioned by it), everything
else is a residual predicate evaluated on each candidate pair, with SQL's three-valued logic.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

ALIASES = ("L", "R")

# A compiled expression: (left row, right row) -> value; None is SQL's NULL / UNKNOWN.
Evaluator = Callable[[Sequence[Any], Sequence[Any]], Any]

_COMPARISONS: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
}
_ARITHMETIC: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.Add: operator.add,
    exp.Sub: operator.sub,
    exp.Mul: operator.mul,
    exp.Mod: operator.mod,
}


class ConditionError(ValueError):
    """A join condition that cannot be used; the message quotes the offending part."""


def parse_condition(text: str) -> exp.Expression:
    """Parse a boolean condition whose every column is qualified by `L.` or `R.`."""
    try:
        tree = sqlglot.parse_one(text)
    except ParseError as err:
        first = err.errors[0]
        raise ConditionError(
            f"{first['description']} at column {first['col']}: "
            f"...{first['start_context']}>>{first['highlight']}<<{first['end_context']}..."
        ) from None
    for column in tree.find_all(exp.Column):
        if column.table.upper() not in ALIASES:
            raise ConditionError(
                f"column {column.sql()!r} must be qualified by L. (left) or R. (right)"
            )
    return tree


@dataclass(frozen=True)
class JoinCondition:
    """Equi-join key pairs `(left column, right column)` and the residual predicate, if any."""

    equi: tuple[tuple[str, str], ...]
    residual: exp.Expression | None


def _side(node: exp.Expression) -> str | None:
    return node.table.upper() if isinstance(node, exp.Column) else None


def split_condition(tree: exp.Expression) -> JoinCondition:
    """Separate `L.a = R.b` conjuncts (the join key) from the rest (the residual)."""
    equi: list[tuple[str, str]] = []
    rest: list[exp.Expression] = []
    for conjunct in tree.flatten() if isinstance(tree, exp.And) else [tree]:
        node = conjunct.unnest()
        sides = (_side(node.this), _side(node.expression)) if isinstance(node, exp.EQ) else ()
        if sides == ("L", "R"):
            equi.append((node.this.name, node.expression.name))
        elif sides == ("R", "L"):
            equi.append((node.expression.name, node.this.name))
        else:
            rest.append(node)
    residual = exp.and_(*rest) if rest else None
    return JoinCondition(tuple(equi), residual)


def _literal(node: exp.Literal) -> Any:
    if node.is_string:
        return node.this
    return int(node.this) if node.this.lstrip("-").isdigit() else Decimal(node.this)


def _null_safe(fn: Callable[[Any, Any], Any], a: Evaluator, b: Evaluator) -> Evaluator:
    def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
        x, y = a(left, right), b(left, right)
        return None if x is None or y is None else fn(x, y)

    return evaluate


def _connective(a: Evaluator, b: Evaluator, decisive: bool) -> Evaluator:
    """AND (`decisive` False) or OR (`decisive` True), with SQL's three-valued logic."""

    def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
        x = a(left, right)
        if x is decisive:
            return decisive
        y = b(left, right)
        if y is decisive:
            return decisive
        return None if x is None or y is None else not decisive

    return evaluate


def _divide(x: Any, y: Any) -> Any:
    if y == 0:
        return None
    return x // y if isinstance(x, int) and isinstance(y, int) else x / y


class _Compiler:
    """Turns a sqlglot expression into nested closures over (left row, right row)."""

    def __init__(self, left_fields: Sequence[str], right_fields: Sequence[str]) -> None:
        self.fields = {"L": list(left_fields), "R": list(right_fields)}

    def column(self, node: exp.Column) -> Evaluator:
        alias = node.table.upper()
        names = self.fields[alias]
        if node.name not in names:
            side = "left" if alias == "L" else "right"
            raise ConditionError(f"{node.sql()!r}: the {side} input has no column {node.name!r}")
        i = names.index(node.name)
        return (lambda left, _right: left[i]) if alias == "L" else (lambda _left, right: right[i])

    def compile(self, node: exp.Expression) -> Evaluator:
        node = node.unnest()
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Literal | exp.Null | exp.Boolean):
            value = (
                _literal(node)
                if isinstance(node, exp.Literal)
                else node.this
                if isinstance(node, exp.Boolean)
                else None
            )
            return lambda _left, _right: value
        kind = type(node)
        if kind in _COMPARISONS or kind in _ARITHMETIC or kind is exp.Div:
            fn = _COMPARISONS.get(kind) or _ARITHMETIC.get(kind) or _divide
            return _null_safe(fn, self.compile(node.this), self.compile(node.expression))
        if kind is exp.And or kind is exp.Or:
            both = self.compile(node.this), self.compile(node.expression)
            return _connective(*both, decisive=kind is exp.Or)
        if kind is exp.Not:
            inner = self.compile(node.this)
            return lambda left, right: None if (v := inner(left, right)) is None else not v
        if kind is exp.Neg:
            inner = self.compile(node.this)
            return lambda left, right: None if (v := inner(left, right)) is None else -v
        if kind is exp.Is and isinstance(node.expression, exp.Null):
            inner = self.compile(node.this)
            return lambda left, right: inner(left, right) is None
        if kind is exp.Between:
            value = self.compile(node.this)
            low = _null_safe(operator.le, self.compile(node.args["low"]), value)
            high = _null_safe(operator.le, value, self.compile(node.args["high"]))
            return _connective(low, high, decisive=False)
        raise ConditionError(f"cannot evaluate {node.sql()!r} in a join condition")


def compile_predicate(
    expression: exp.Expression, left_fields: Sequence[str], right_fields: Sequence[str]
) -> Evaluator:
    """A function (left row, right row) -> True / False / None (unknown) for `expression`."""
    return _Compiler(left_fields, right_fields).compile(expression)


def _position(fields: Sequence[str], name: str, alias: str) -> int:
    if name not in fields:
        side = "left" if alias == "L" else "right"
        raise ConditionError(f"'{alias}.{name}': the {side} input has no column {name!r}")
    return list(fields).index(name)


def compile_matcher(
    condition: JoinCondition, left_fields: Sequence[str], right_fields: Sequence[str]
) -> Callable[[Sequence[Any], Sequence[Any]], bool]:
    """Rows match when no equi-key column is NULL and the residual is TRUE.

    Rows reach the same key only if their key values are equal, so equality itself need not be
    tested again; NULL keys are grouped together but, as in SQL, never match.
    """
    left_keys = [_position(left_fields, a, "L") for a, _ in condition.equi]
    right_keys = [_position(right_fields, b, "R") for _, b in condition.equi]
    residual = (
        compile_predicate(condition.residual, left_fields, right_fields)
        if condition.residual is not None
        else None
    )

    if len(left_keys) == 1 and residual is None:  # the common case, on every candidate pair
        i, j = left_keys[0], right_keys[0]
        return lambda left, right: left[i] is not None and right[j] is not None

    def matches(left: Sequence[Any], right: Sequence[Any]) -> bool:
        if any(left[i] is None for i in left_keys) or any(right[j] is None for j in right_keys):
            return False
        return residual is None or residual(left, right) is True

    return matches
