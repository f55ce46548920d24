"""The interval join as a Spark `transformWithState` processor over state buckets.

Spark charges a socket round trip per key for every state call and for switching keys, which
with one or two rows per key and batch costs far more than the join itself. So the processor
is keyed by a bucket of join keys (a hash of the key modulo `buckets`): per bucket and
micro-batch it reads one value, writes one, and registers at most one timer, whatever the
number of keys and rows. The value holds the cached rows of its keys, whose size the interval
bounds; the join's semantics, per key, are those of `state.interval_join`.

Event time: the operator time is Spark's watermark, the minimum of both inputs' watermarks.
The rows' time column carries no watermark metadata, so Spark does not drop late rows before
they reach the processor: like Flink, the join decides what a late row still meets.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from state.condition import compile_matcher, parse_condition
from state.interval_bounds import IntervalCondition, split_interval
from state.interval_join import Bucket, IntervalJoin, Pair
from state.regular_processor import SideSpec
from state.views import struct_values

BUCKET_STATE = StructType([StructField("bucket", BinaryType())])
PROCTIME = "proctime"


@dataclass(frozen=True)
class IntervalJoinSpec:
    """Everything the processor needs, small and picklable: it travels to the executors.

    `left_time` / `right_time` name each input's time attribute as the condition refers to it;
    `proctime` for processing time (then both must be).
    """

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    left_time: str
    right_time: str
    buckets: int = 1024

    @cached_property
    def condition(self) -> IntervalCondition:
        return split_interval(parse_condition(self.on), self.left_time, self.right_time)

    @property
    def equi_keys(self) -> tuple[tuple[str, str], ...]:
        return self.condition.condition.equi

    @property
    def projects_right(self) -> bool:
        return True

    @property
    def proctime(self) -> bool:
        return self.left_time == PROCTIME

    @property
    def time_mode(self) -> str:
        return "ProcessingTime" if self.proctime else "EventTime"

    def operator(self) -> IntervalJoin:
        matcher = compile_matcher(self.condition.condition, self.left.fields, self.right.fields)
        return IntervalJoin(self.kind, self.condition.lower_ms, self.condition.upper_ms, matcher)


class IntervalJoinProcessor(StatefulProcessor):
    """Input rows: `side`, `seq` (order), `ts` (event time, ms), `left` / `right` structs and the
    join key `k0..kN`; the grouping key is the bucket. Output: `+I` rows, append-only."""

    def __init__(self, spec: IntervalJoinSpec, output_names: list[str]) -> None:
        self.spec = spec
        self.output_names = output_names

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("bucket", BUCKET_STATE)
        self.join = self.spec.operator()
        self.out = Row(*self.output_names)
        self.null_left = (None,) * len(self.spec.left.fields)
        self.null_right = (None,) * len(self.spec.right.fields)
        self.key_names = [f"k{i}" for i in range(max(1, len(self.spec.equi_keys)))]

    def _operator_time(self, timer_values: TimerValues) -> int:
        if self.spec.proctime:
            return timer_values.getCurrentProcessingTimeInMs()
        return max(timer_values.getCurrentWatermarkInMs(), 0)

    def _load(self) -> tuple[Bucket, bytes | None]:
        stored = self.state.get()
        if stored is None:
            return Bucket(), None
        return pickle.loads(stored[0]), stored[0]

    def _rows(self, pairs: list[Pair]) -> list[Row]:
        return [
            self.out("+I", *(left or self.null_left), *(right or self.null_right))
            for left, right in pairs
        ]

    def _save(self, bucket: Bucket, before: bytes | None, now: int) -> None:
        """Write the bucket back if it changed, and keep one engine timer at its next timer."""
        next_timer = bucket.next_timer()
        pending = bucket.spark_timer
        if next_timer is not None and (pending is None or pending <= now or next_timer < pending):
            self.handle.registerTimer(next_timer)
            bucket.spark_timer = next_timer
        elif next_timer is None:
            bucket.spark_timer = None
        if not bucket.keys:
            if before is not None:
                self.state.clear()
            return
        blob = pickle.dumps(bucket, protocol=pickle.HIGHEST_PROTOCOL)
        if blob != before:
            self.state.update((blob,))

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        bucket, before = self._load()
        now = self._operator_time(timerValues)
        pairs = self.join.fire_due(bucket, now)
        for row in sorted(rows, key=lambda r: r.seq):
            if row.op != "+I":
                raise ValueError(f"an interval join takes insert-only inputs, got {row.op!r}")
            values = struct_values(row.left if row.side == 0 else row.right)
            join_key = tuple(row[name] for name in self.key_names)
            time = now if self.spec.proctime else row.ts
            pairs += self.join.process(bucket, join_key, row.side, values, time, now)
        self._save(bucket, before, now)
        return iter(self._rows(pairs))

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        bucket, before = self._load()
        now = self._operator_time(timerValues)
        bucket.spark_timer = None
        pairs = self.join.fire_due(bucket, now)
        self._save(bucket, before, now)
        return iter(self._rows(pairs))

    def close(self) -> None:
        """No resources beyond the state handles, which Spark closes."""
