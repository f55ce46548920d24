"""What a join is, as the plan builds it and the stateful operators read it: small, picklable
dataclasses (they travel to the executors), no Spark.

Every join spec follows `JoinSpec`; each builds the Spark-free operator of its join's semantics
(`operator()`), which the Spark adapters in `state.spark` drive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, Protocol

from sqlglot import exp

from state.changes import Row
from state.columns import Widening, chained_column
from state.expr.condition import (
    ConditionError,
    JoinCondition,
    compile_matcher,
    parse_condition,
    split_condition,
)
from state.expr.interval_bounds import IntervalCondition, split_interval
from state.joins.interval_join import MIN_TIME, IntervalJoin
from state.joins.multi_join import MultiJoin
from state.joins.regular_join import RegularJoin, SemiAntiJoin
from state.joins.temporal_join import EventTimeTemporalJoin, ProcessingTimeTemporalJoin
from state.joins.views import View, new_view
from state.joins.window_join import WindowJoin
from state.store.retention import FOREVER, Retention

PROCTIME = "proctime"  # the time attribute of processing time
# The columns a windowing table function adds to each row, in order (Flink's)
WINDOW_COLUMNS = ("window_start", "window_end", "window_time")
# Key buckets of a join whose plan gives none (`streamjoin replay`, the tests): the service's
# own default depends on its state partitions (`app.run.checkpoint.state_buckets`).
STATE_BUCKETS = 128
# The clock a stateful operator runs on: the watermark, the wall clock, or none
Clock = Literal["event", "processing", "none"]
# The event clock's time before the first watermark: Flink's `Long.MIN_VALUE`, behind which no
# row is late and no timer due. Spark's watermark starts at 0 instead, which would fire the
# timers of rows at or before 1970-01-01 before any watermark was seen (`state.spark.frame`).
NO_WATERMARK = MIN_TIME


@dataclass(frozen=True)
class SideSpec:
    """One input's columns, in order, its unique key (empty: none), how the rows its state
    held before columns were added widen (None: none were), and the columns' widths in bits
    where they are whole numbers (`state.expr.condition.Widths`; empty: not known), at which a
    condition's arithmetic on them wraps as Flink's does."""

    fields: tuple[str, ...]
    unique_key: tuple[str, ...] = ()
    widening: Widening | None = None
    widths: tuple[int | None, ...] = ()


class JoinSpec(Protocol):
    """What every join gives the stateful frame and the plan: its kind, both inputs' columns,
    the condition, the number of buckets its join keys hash into, its clock. Outputs carry both
    sides' columns unless `projects_right` says otherwise."""

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    buckets: int

    @property
    def join_condition(self) -> JoinCondition: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def equi_keys(self) -> tuple[tuple[str, str], ...]:
        return self.join_condition.equi

    @property
    def projects_right(self) -> bool:
        return True

    def matcher(self) -> Callable[[Row, Row], bool]:
        widths = self.left.widths, self.right.widths
        return compile_matcher(self.join_condition, self.left.fields, self.right.fields, widths)


@dataclass(frozen=True)
class RegularJoinSpec(JoinSpec):
    """`L [INNER|LEFT|RIGHT|FULL|SEMI|ANTI] JOIN R ON ...` over changelogs."""

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    state_ttl_ms: int = 0  # idle state retention; 0 keeps state forever
    buckets: int = STATE_BUCKETS
    mini_batch: bool = False  # a key's changes in a micro-batch folded first (`mini_batch`)
    # an input's own retention (Flink's STATE_TTL hint; 0: for ever), None: `state_ttl_ms`
    input_ttls_ms: tuple[int | None, int | None] = (None, None)
    hot_key_rows: int = 0  # a key holding more rows of one input is logged (`fanout`); 0: never

    @property
    def retention_ms(self) -> tuple[int, ...]:
        """Each input's row retention (0: for ever)."""
        return tuple(self.state_ttl_ms if ttl is None else ttl for ttl in self.input_ttls_ms)

    @property
    def clock(self) -> Clock:
        """Retention is a processing-time TTL; without one the join needs no clock."""
        return "processing" if any(self.retention_ms) else "none"

    @cached_property
    def join_condition(self) -> JoinCondition:
        return split_condition(parse_condition(self.on))

    @property
    def projects_right(self) -> bool:
        """SEMI and ANTI joins output left rows only."""
        return self.kind not in ("semi", "anti")

    def operator(self) -> RegularJoin | SemiAntiJoin:
        if self.kind in ("semi", "anti"):
            return SemiAntiJoin(self.kind, self.matcher())
        return RegularJoin(self.kind, self.matcher())

    def new_views(self, retentions: Sequence[Retention] = ()) -> tuple[View, View]:
        """A key's empty views, each under its input's retention (none: for ever)."""
        left, right = retentions or (FOREVER, FOREVER)
        left_keys = [a for a, _ in self.equi_keys]
        right_keys = [b for _, b in self.equi_keys]
        return (
            new_view(left_keys, self.left.fields, self.left.unique_key, left),
            new_view(right_keys, self.right.fields, self.right.unique_key, right),
        )


@dataclass(frozen=True)
class MultiJoinSpec:
    """A chain of INNER and LEFT regular joins whose inputs share one key, as one operator
    (`state.joins.multi_join`): `joins[j]` joins the result of the joins before it (its left:
    the earlier inputs' columns, `chained_column`-named past the first join) with input `j + 1`
    (its right); `keys[i]` is input `i`'s column of the shared key."""

    joins: tuple[RegularJoinSpec, ...]
    keys: tuple[str, ...]

    @classmethod
    def of_chain(cls, joins: Sequence[RegularJoinSpec]) -> MultiJoinSpec | None:
        """The chain's joins as one operator where Flink would build one: INNER and LEFT joins
        whose inputs all share one join key (each join's equality with a column of that key
        before it); else None."""
        if any(join.kind not in ("inner", "left") for join in joins):
            return None
        for a, b in joins[0].equi_keys:
            keys = [a, b]
            for join in joins[1:]:
                shared = {chained_column(i, key) for i, key in enumerate(keys)}
                right = next((r for left, r in join.equi_keys if left in shared), None)
                if right is None:
                    break
                keys.append(right)
            else:
                return cls(tuple(joins), tuple(keys))
        return None

    @property
    def inputs(self) -> tuple[SideSpec, ...]:
        return (self.joins[0].left, *(join.right for join in self.joins))

    @property
    def state_ttl_ms(self) -> int:
        return self.joins[0].state_ttl_ms

    @property
    def retention_ms(self) -> tuple[int, ...]:
        """Each input's row retention (0: for ever): the first join's two, then each next
        join's right."""
        return (*self.joins[0].retention_ms, *(join.retention_ms[1] for join in self.joins[1:]))

    @property
    def buckets(self) -> int:
        return self.joins[0].buckets

    @property
    def hot_key_rows(self) -> int:
        return self.joins[0].hot_key_rows

    @property
    def mini_batch(self) -> bool:
        return self.joins[0].mini_batch

    @property
    def clock(self) -> Clock:
        return "processing" if any(self.retention_ms) else "none"

    def operator(self) -> MultiJoin:
        return MultiJoin(
            [join.kind for join in self.joins],
            [self._matcher(number) for number in range(len(self.joins))],
            [len(side.fields) for side in self.inputs],
        )

    def _matcher(self, number: int) -> Callable[[Row, Row], bool]:
        """Join `number`'s condition as the operator's rows meet it. They share the one key
        of every input, not the join's other equalities (`L.k = R.k AND L.s = R.s` keyed by
        `k`): those are tested as conditions, where a join of two finds them in its key."""
        join = self.joins[number]
        condition = join.join_condition
        shared = (
            {chained_column(i, key) for i, key in enumerate(self.keys[: number + 1])}
            if number
            else {self.keys[0]}
        )
        keyed = next(
            i
            for i, (left, right) in enumerate(condition.equi)
            if left in shared and right == self.keys[number + 1]
        )
        tested = [
            (exp.NullSafeEQ if i in condition.null_safe else exp.EQ)(
                this=exp.column(left, table="L"), expression=exp.column(right, table="R")
            )
            for i, (left, right) in enumerate(condition.equi)
            if i != keyed
        ]
        if condition.residual is not None:
            tested.append(condition.residual)
        as_met = JoinCondition(
            (condition.equi[keyed],),
            exp.and_(*tested) if tested else None,
            frozenset({0}) if keyed in condition.null_safe else frozenset(),
        )
        widths = join.left.widths, join.right.widths
        return compile_matcher(as_met, join.left.fields, join.right.fields, widths)

    def new_views(self, retentions: Sequence[Retention] = ()) -> tuple[View, ...]:
        """A key's empty views, each under its input's retention (none: for ever)."""
        return tuple(
            new_view([key], side.fields, side.unique_key, retentions[i] if retentions else FOREVER)
            for i, (key, side) in enumerate(zip(self.keys, self.inputs, strict=True))
        )


@dataclass(frozen=True)
class IntervalJoinSpec(JoinSpec):
    """`L JOIN R ON ... AND L.t BETWEEN R.t - ... AND R.t + ...` over insert-only inputs.

    `left_time` / `right_time` name each input's time attribute as the condition refers to it;
    `proctime` for processing time (then both must be).
    """

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    left_time: str
    right_time: str
    buckets: int = STATE_BUCKETS
    early_fire_ms: int | None = None  # an outer row padded this long after its time, if unmatched

    @property
    def clock(self) -> Clock:
        return "processing" if self.left_time == PROCTIME else "event"

    @property
    def produces_updates(self) -> bool:
        """An outer join that fires early corrects its padded rows (-U/+U)."""
        return self.early_fire_ms is not None and self.kind != "inner"

    @cached_property
    def condition(self) -> IntervalCondition:
        return split_interval(parse_condition(self.on), self.left_time, self.right_time)

    @property
    def join_condition(self) -> JoinCondition:
        return self.condition.condition

    def operator(self) -> IntervalJoin:
        bounds = self.condition
        return IntervalJoin(
            self.kind,
            bounds.lower_ms,
            bounds.upper_ms,
            self.matcher(),
            early_fire_ms=self.early_fire_ms,
        )


@dataclass(frozen=True)
class TemporalJoinSpec(JoinSpec):
    """`L [LEFT] JOIN R FOR SYSTEM_TIME AS OF L.<left_time> ON ...`.

    `left_time` is `proctime` for the processing-time join (the latest version);
    `versions_normalized`: the versioned table comes through a changelog normalizer, as it did
    in checkpoints made before the join kept what a delete needs (`temporal_join`).
    """

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    left_time: str
    buckets: int = STATE_BUCKETS
    versions_normalized: bool = False

    @property
    def clock(self) -> Clock:
        return "processing" if self.left_time == PROCTIME else "event"

    @cached_property
    def join_condition(self) -> JoinCondition:
        found = split_condition(parse_condition(self.on))
        keyed = {b for _, b in found.equi}
        missing = [c for c in self.right.unique_key if c not in keyed]
        if not self.right.unique_key or missing:
            raise ConditionError(
                "a temporal join's key must contain the versioned table's primary key ("
                + (", ".join(f"R.{c}" for c in missing) or "none is declared")
                + " missing from the equalities)"
            )
        return found

    def operator(self) -> EventTimeTemporalJoin | ProcessingTimeTemporalJoin:
        if self.clock == "processing":
            return ProcessingTimeTemporalJoin(self.kind, self.matcher())
        return EventTimeTemporalJoin(self.kind, self.matcher(), self.versions_normalized)


@dataclass(frozen=True)
class WindowJoinSpec(JoinSpec):
    """`TABLE(TUMBLE|HOP|CUMULATE(TABLE l, ...)) L [kind] JOIN TABLE(...) R ON L.window_start =
    R.window_start AND L.window_end = R.window_end AND ...` over insert-only inputs: each side's
    `fields` end with the window's columns (`WINDOW_COLUMNS`)."""

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    buckets: int = STATE_BUCKETS
    # each side's grouping columns where it is a window aggregate first (None: its rows)
    distinct: tuple[tuple[str, ...] | None, tuple[str, ...] | None] = (None, None)

    @property
    def clock(self) -> Clock:
        return "event"

    @property
    def projects_right(self) -> bool:
        """SEMI and ANTI joins output left rows only."""
        return self.kind not in ("semi", "anti")

    @cached_property
    def join_condition(self) -> JoinCondition:
        found = split_condition(parse_condition(self.on))
        missing = [c for c in WINDOW_COLUMNS[:2] if (c, c) not in found.equi]
        if missing:
            raise ConditionError(
                "a window join equates both sides' window bounds: "
                + " AND ".join(f"L.{c} = R.{c}" for c in missing)
                + " missing"
            )
        return found

    def operator(self) -> WindowJoin:
        sides = (self.left, self.right)
        ends = tuple(side.fields.index("window_end") for side in sides)
        distinct = tuple(
            None if columns is None else tuple(map(side.fields.index, (*columns, "window_end")))
            for side, columns in zip(sides, self.distinct, strict=True)
        )
        return WindowJoin(self.kind, self.matcher(), ends, distinct)  # type: ignore[arg-type]
