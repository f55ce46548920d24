"""The lookup join's semantics, with no database and no Spark: caches, the split of the
condition into what the table's query filters and what is evaluated after, and the join of a
batch of left rows with the rows found for their keys.

Flink's lookup join (`LookupJoinRunner`, `AsyncLookupJoinRunner`) joins each left row with the
table rows matching its equi-keys *when it is processed*; the table is not versioned, and a
later change of the table changes nothing already emitted (the output is append-only):

| left row | rows found (after the residual) | INNER                | LEFT                 |
|----------|---------------------------------|----------------------|----------------------|
| +I       | none                            | nothing              | +I (left, NULLs)     |
| +I       | r1 … rn                         | +I (left, ri), n     | +I (left, ri), n     |

Caches as Flink's `lookup.cache` option: NONE; PARTIAL (`DefaultLookupCache`: keys evicted
least recently used beyond `max-rows` keys, expired after write and/or after access, missing
keys cached unless `cache-missing-key` is false); FULL (the whole table, reloaded every
`reload-interval`; a key it lacks has no rows, without a query).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from state.changes import Row
from state.expr.condition import (
    ConditionError,
    Evaluator,
    Widths,
    compile_predicate,
    compile_value,
    parse_condition,
    split_condition,
)
from state.joins.specs import SideSpec

Key = tuple[Any, ...]

TimeSource = Callable[[], float]

CACHES = ("NONE", "PARTIAL", "FULL")


@dataclass(frozen=True)
class CacheSettings:
    """Flink's `lookup.cache` and `lookup.partial-cache.*` / `lookup.full-cache.*` options."""

    kind: str = "NONE"
    max_rows: int | None = None
    expire_after_write_s: float | None = None
    expire_after_access_s: float | None = None
    cache_missing_key: bool = True
    reload_interval_s: float = 3600.0


@dataclass
class _Entry:
    rows: list[Row]
    written: float
    accessed: float


class PartialCache:
    """Rows by key, least recently used first; `get` answers None for a key not cached."""

    def __init__(self, settings: CacheSettings, clock: TimeSource = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()

    def get(self, key: Key) -> list[Row] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        now, settings = self.clock(), self.settings
        written_out = settings.expire_after_write_s is not None and (
            now - entry.written >= settings.expire_after_write_s
        )
        accessed_out = settings.expire_after_access_s is not None and (
            now - entry.accessed >= settings.expire_after_access_s
        )
        if written_out or accessed_out:
            del self._entries[key]
            return None
        entry.accessed = now
        self._entries.move_to_end(key)
        return entry.rows

    def put(self, key: Key, rows: list[Row]) -> None:
        if not rows and not self.settings.cache_missing_key:
            return
        now = self.clock()
        self._entries[key] = _Entry(rows, now, now)
        self._entries.move_to_end(key)
        limit = self.settings.max_rows
        while limit is not None and len(self._entries) > limit:
            self._entries.popitem(last=False)


class FullCache:
    """The whole table by key, loaded by `load` (all rows, keyed) when first used and again
    once `reload_interval_s` has passed."""

    def __init__(
        self,
        settings: CacheSettings,
        load: Callable[[], dict[Key, list[Row]]],
        clock: TimeSource = time.monotonic,
    ) -> None:
        self.settings = settings
        self.load = load
        self.clock = clock
        self._rows: dict[Key, list[Row]] | None = None
        self._loaded = 0.0

    def get(self, key: Key) -> list[Row]:
        now = self.clock()
        if self._rows is None or now - self._loaded >= self.settings.reload_interval_s:
            self._rows, self._loaded = self.load(), now
        return self._rows.get(key, [])

    def put(self, key: Key, rows: list[Row]) -> None:
        """Nothing to add: the full cache only changes when it reloads."""


class NoCache:
    def get(self, key: Key) -> list[Row] | None:
        return None

    def put(self, key: Key, rows: list[Row]) -> None:
        """Nothing is kept (`lookup.cache` = NONE)."""


Cache = PartialCache | FullCache | NoCache

# Conjuncts on R alone that the table's query can filter: a column compared with literals.
_PUSHED_COMPARISONS = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}


@dataclass(frozen=True)
class PushedFilter:
    """`column op $n` (or IS [NOT] NULL, IN, BETWEEN): SQL text with numbered placeholders
    starting at `$first`, and the parameters they take, in order. Never a literal in the text."""

    column: str
    operator: str
    values: tuple[Any, ...] = ()

    def sql(self, first: int, quote: Callable[[str], str]) -> str:
        name = quote(self.column)
        if self.operator in ("IS NULL", "IS NOT NULL"):
            return f"{name} {self.operator}"
        marks = [f"${first + i}" for i in range(len(self.values))]
        if self.operator == "IN":
            return f"{name} IN ({', '.join(marks)})"
        if self.operator == "BETWEEN":
            return f"{name} BETWEEN {marks[0]} AND {marks[1]}"
        return f"{name} {self.operator} {marks[0]}"


def _literal(node: exp.Expression) -> tuple[bool, Any]:
    if isinstance(node, exp.Literal):
        text = node.this
        return True, text if node.is_string else (float(text) if "." in text else int(text))
    if isinstance(node, exp.Boolean):
        return True, node.this
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        ok, value = _literal(node.this)
        return ok, -value
    return False, None


def _right_column(node: exp.Expression) -> str | None:
    return node.name if isinstance(node, exp.Column) and node.table.upper() == "R" else None


def pushed_filter(node: exp.Expression) -> PushedFilter | None:
    """The filter the table's query can apply for this conjunct, or None."""
    if type(node) in _PUSHED_COMPARISONS:
        column, (ok, value) = _right_column(node.this), _literal(node.expression)
        operator = _PUSHED_COMPARISONS[type(node)]
        if column is None:  # literal op R.col
            flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(operator, operator)
            column, (ok, value), operator = (
                _right_column(node.expression),
                _literal(node.this),
                flipped,
            )
        return PushedFilter(column, operator, (value,)) if column and ok else None
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        column = _right_column(node.this)
        return PushedFilter(column, "IS NULL") if column else None
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Is):
        inner = pushed_filter(node.this)
        return PushedFilter(inner.column, "IS NOT NULL") if inner else None
    if isinstance(node, exp.In) and not node.args.get("query"):
        literals = [_literal(v) for v in node.expressions]
        column = _right_column(node.this)
        if column and literals and all(ok for ok, _ in literals):
            return PushedFilter(column, "IN", tuple(v for _, v in literals))
        return None
    if isinstance(node, exp.Between):
        (low_ok, low), (high_ok, high) = _literal(node.args["low"]), _literal(node.args["high"])
        column = _right_column(node.this)
        return (
            PushedFilter(column, "BETWEEN", (low, high)) if column and low_ok and high_ok else None
        )
    return None


@dataclass(frozen=True)
class SplitResidual:
    """The residual condition as the table's query filters (`pushed`) and the rest, evaluated
    on each (left row, table row) pair after the lookup (`after`)."""

    pushed: tuple[PushedFilter, ...] = ()
    after: exp.Expression | None = None


def _conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    if condition is None:
        return []
    nodes = condition.flatten() if isinstance(condition, exp.And) else [condition]
    return [node.unnest() for node in nodes]


def split_residual(residual: exp.Expression | None) -> SplitResidual:
    pushed: list[PushedFilter] = []
    after: list[exp.Expression] = []
    for node in _conjuncts(residual):
        filtered = pushed_filter(node)
        (pushed.append(filtered) if filtered else after.append(node))
    return SplitResidual(tuple(pushed), exp.and_(*after) if after else None)


# a lookup key: the left's value (a column, or an expression of its columns), the table's column
LookupKey = tuple[exp.Expression, str]


def _computed_key(node: exp.Expression) -> LookupKey | None:
    """`<an expression of L's columns alone> = R.b` as a lookup key, or None."""
    if not isinstance(node, exp.EQ):
        return None
    for value, column in ((node.this, node.expression), (node.expression, node.this)):
        sides = {c.table.upper() for c in value.find_all(exp.Column)}
        if _right_column(column.unnest()) and sides == {"L"}:
            return value.unnest(), column.unnest().name
    return None


def lookup_condition(on: str) -> tuple[tuple[LookupKey, ...], exp.Expression | None]:
    """The lookup keys, from `L.a = R.b` and from `<an expression of L's columns> = R.b` (a key
    Flink computes from the left row before its lookup, as `o.code + 1 = c.id`), and the rest
    of the condition."""
    condition = split_condition(parse_condition(on))
    keys: list[LookupKey] = [(exp.column(a, "L"), b) for a, b in condition.equi]
    rest = []
    for node in _conjuncts(condition.residual):
        key = _computed_key(node)
        (keys.append(key) if key else rest.append(node))
    return tuple(keys), exp.and_(*rest) if rest else None


@dataclass(frozen=True)
class LookupJoinSpec:
    """The lookup join as the plan sees it (the other joins' spec interface): the left input,
    the table's columns as the right side, the condition over L and R."""

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    projects_right = True

    @property
    def equi_keys(self) -> tuple[tuple[str, str], ...]:
        """The keys that are a column of each side (the other joins' interface)."""
        return split_condition(parse_condition(self.on)).equi

    @property
    def keys(self) -> tuple[LookupKey, ...]:
        """Every lookup key, a computed one's value an expression of the left's columns."""
        return lookup_condition(self.on)[0]

    @property
    def residual(self) -> SplitResidual:
        return split_residual(lookup_condition(self.on)[1])

    def operator(self) -> LookupJoin:
        """The join of a batch; raises ConditionError for a column neither side has."""
        values = [value for value, _ in self.keys]
        names = [
            (c.name, self.left.fields, "L", "left input") for v in values for c in key_columns(v)
        ]
        names += [(b, self.right.fields, "R", "table") for _, b in self.keys]
        names += [(f.column, self.right.fields, "R", "table") for f in self.residual.pushed]
        for name, fields, alias, what in names:
            if name not in fields:
                raise ConditionError(f"'{alias}.{name}': the {what} has no column {name!r}")
        bare = all(isinstance(value, exp.Column) for value in values)
        return LookupJoin(
            self.kind,
            tuple(value.name for value in values) if bare else (),
            self.left.fields,
            self.right.fields,
            self.residual.after,
            (self.left.widths, self.right.widths),
            computed=() if bare else tuple(values),
        )


def key_columns(value: exp.Expression) -> list[exp.Column]:
    """The left's columns a lookup key's value reads."""
    return list(value.find_all(exp.Column))


@dataclass
class LookupJoin:
    """Joins left rows with the table rows found for their keys: `kind` inner or left, the left
    row's key columns named by `key_fields`, `after` evaluated on each pair (over columns of
    the `widths` given, `state.expr.condition.Widths`)."""

    kind: str
    key_fields: tuple[str, ...]
    left_fields: Sequence[str]
    right_fields: Sequence[str]
    after: exp.Expression | None = None
    widths: tuple[Widths, Widths] = ((), ())
    # the keys' values computed from each left row (`L.code + 1 = R.id`), where `key_fields`
    # is empty
    computed: tuple[exp.Expression, ...] = ()
    _predicate: Evaluator | None = field(init=False, default=None)
    _key_values: list[Evaluator] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.after is not None:
            self._predicate = compile_predicate(
                self.after, self.left_fields, self.right_fields, self.widths
            )
        self._key_values = [
            compile_value(value, self.left_fields, (), (self.widths[0], ()))
            for value in self.computed
        ]

    @property
    def needs_rows(self) -> bool:
        """Whether the left rows are needed whole (a computed key, or a condition after the
        lookup, reads them); without, the key columns are all a batch's rows are read for."""
        return self._predicate is not None or bool(self.computed)

    def keys(self, columns: Sequence[Sequence[Any]]) -> list[Key | None]:
        """Each row's lookup key from the key columns' values (in `key_fields`' order);
        None where a part is NULL (it matches no table row)."""
        if len(columns) == 1:
            return [None if value is None else (value,) for value in columns[0]]
        return [None if any(p is None for p in key) else key for key in zip(*columns, strict=True)]

    def computed_keys(self, lefts: Sequence[Row]) -> list[Key | None]:
        """Each left row's lookup key computed from the row, as Flink computes it; None where a
        part is NULL."""
        keys: list[Key | None] = []
        for left in lefts:
            key = tuple(value(left, ()) for value in self._key_values)
            keys.append(None if any(p is None for p in key) else key)
        return keys

    def matches(
        self,
        keys: Sequence[Key | None],
        found: dict[Key, list[Row]],
        lefts: Sequence[Row] | None = None,
    ) -> tuple[list[int], list[Row | None]]:
        """Each left row (by index; `keys` its keys, `lefts` the rows if `needs_rows`) with
        each matching table row, an unmatched one padded with None (LEFT) or dropped (INNER):
        the output's left indices, and its table rows."""
        indices: list[int] = []
        rights: list[Row | None] = []
        left_kind, predicate = self.kind == "left", self._predicate
        for at, key in enumerate(keys):
            rows = found.get(key, ()) if key is not None else ()
            if predicate is not None:
                assert lefts is not None
                rows = [r for r in rows if predicate(lefts[at], r) is True]
            if rows:
                indices.extend([at] * len(rows))
                rights.extend(rows)
            elif left_kind:
                indices.append(at)
                rights.append(None)
        return indices, rights
