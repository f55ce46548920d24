"""The regular join as a Spark `transformWithState` processor, keyed by the join key.

Per key and micro-batch it makes two state calls, whatever the number of rows: one read and at
most one write of a single value holding both sides' views (see `state.views`); a key whose
views did not change is not written back. Retention adds one timer registration.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from ops.worker_gc import settle_worker
from state.condition import compile_matcher, parse_condition, split_condition
from state.regular_join import LEFT, Matcher, RegularJoin, SemiAntiJoin
from state.views import View, dump_views, load_views, new_view, struct_values

# Both sides' views of a key in one value, with the time of its last write (for retention).
KEY_STATE = StructType([StructField("views", BinaryType()), StructField("touched_ms", LongType())])


class Counter(Protocol):
    """Where expired rows are counted: a Spark accumulator, read by the driver's metrics."""

    def add(self, amount: int) -> None: ...


@dataclass(frozen=True)
class SideSpec:
    """One input's columns, in order, and its unique key (empty: none)."""

    fields: tuple[str, ...]
    unique_key: tuple[str, ...] = ()


@dataclass(frozen=True)
class RegularJoinSpec:
    """Everything the processor needs, small and picklable: it travels to the executors."""

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    state_ttl_ms: int = 0  # idle state retention; 0 keeps state forever

    @property
    def time_mode(self) -> str:
        """Retention needs processing-time timers; without it the join needs no clock."""
        return "ProcessingTime" if self.state_ttl_ms > 0 else "None"

    @cached_property
    def equi_keys(self) -> tuple[tuple[str, str], ...]:
        """Parsed once per spec: fresh views are made for every new key."""
        return split_condition(parse_condition(self.on)).equi

    @property
    def projects_right(self) -> bool:
        """SEMI and ANTI joins output left rows only."""
        return self.kind not in ("semi", "anti")

    def matcher(self) -> Matcher:
        """Whether a left and a right row of one key match (see `compile_matcher`)."""
        condition = split_condition(parse_condition(self.on))
        return compile_matcher(condition, self.left.fields, self.right.fields)

    def operator(self) -> RegularJoin | SemiAntiJoin:
        if self.kind in ("semi", "anti"):
            return SemiAntiJoin(self.kind, self.matcher())
        return RegularJoin(self.kind, self.matcher())

    def new_views(self) -> tuple[View, View]:
        left_keys = [a for a, _ in self.equi_keys]
        right_keys = [b for _, b in self.equi_keys]
        return (
            new_view(left_keys, self.left.fields, self.left.unique_key),
            new_view(right_keys, self.right.fields, self.right.unique_key),
        )


class RegularJoinProcessor(StatefulProcessor):
    """Input rows: `side` (0 left, 1 right), `op`, `seq` (order), `left` / `right` structs."""

    def __init__(
        self, spec: RegularJoinSpec, output_names: list[str], expired_rows: Counter | None = None
    ) -> None:
        self.spec = spec
        self.output_names = output_names
        self.expired_rows = expired_rows

    def init(self, handle: StatefulProcessorHandle) -> None:
        settle_worker()
        self.handle = handle
        self.state = handle.getValueState("join", KEY_STATE)
        self.join = self.spec.operator()
        self.out = Row(*self.output_names)
        self.null_left = (None,) * len(self.spec.left.fields)
        self.null_right = (None,) * len(self.spec.right.fields) if self.spec.projects_right else ()

    def _load(self) -> tuple[tuple[bytes, int] | None, tuple[View, View]]:
        stored = self.state.get()
        return stored, (load_views(stored[0]) if stored is not None else self.spec.new_views())

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        stored, views = self._load()
        output = []
        for row in sorted(rows, key=lambda r: r.seq):
            values = struct_values(row.left if row.side == LEFT else row.right)
            for change in self.join.process(row.side, row.op, values, views):
                left = change.left if change.left is not None else self.null_left
                right = change.right if change.right is not None else self.null_right
                output.append(self.out(change.op, *left, *right))
        if not any(len(view) for view in views):
            if stored is not None:
                self.state.clear()
            return iter(output)
        blob = dump_views(views)
        if self.spec.state_ttl_ms:
            now = timerValues.getCurrentProcessingTimeInMs()
            self.state.update((blob, now))
            self.handle.registerTimer(now + self.spec.state_ttl_ms)
        elif stored is None or stored[0] != blob:
            self.state.update((blob, 0))
        return iter(output)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        """Drop the key's state once it has been idle for the retention time.

        Every write registers a timer instead of moving the previous one (that would cost two
        more state calls per key); a timer that finds a newer write since does nothing.
        """
        stored, views = self._load()
        now = timerValues.getCurrentProcessingTimeInMs()
        if stored is None or now - stored[1] < self.spec.state_ttl_ms:
            return iter(())
        if self.expired_rows is not None:
            self.expired_rows.add(sum(len(view) for view in views))
        self.state.clear()
        return iter(())

    def close(self) -> None:
        """No resources beyond the state handles, which Spark closes."""
