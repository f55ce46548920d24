"""The interval join's spec and its bucketed `transformWithStateInPandas` processor.

The join's semantics, per key, are those of `state.interval_join`; why keys are grouped in
buckets and cross to Python as columns is in `state.bucketed_processor`. Event time: the
operator time is Spark's watermark, the minimum of both inputs'; late rows reach the join,
which decides what they still meet, as Flink's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.bucketed_processor import (
    BucketedJoinProcessor,
    BucketedJoinSpec,
    Emitted,
    InputRows,
    SideSpec,
    WholeBuckets,
)
from state.condition import JoinCondition, parse_condition
from state.interval_bounds import IntervalCondition, split_interval
from state.interval_join import (
    Bucket,
    IntervalJoin,
    Pair,
    bucket_from_plain,
    bucket_to_plain,
    cached_rows,
)


@dataclass(frozen=True)
class IntervalJoinSpec(BucketedJoinSpec):
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
    buckets: int = 128

    @cached_property
    def condition(self) -> IntervalCondition:
        return split_interval(parse_condition(self.on), self.left_time, self.right_time)

    @property
    def join_condition(self) -> JoinCondition:
        return self.condition.condition

    def operator(self) -> IntervalJoin:
        bounds = self.condition
        return IntervalJoin(self.kind, bounds.lower_ms, bounds.upper_ms, self.matcher())


class IntervalJoinProcessor(BucketedJoinProcessor):
    """Flink's interval join (`state.interval_join`) per key, over buckets of keys."""

    def layout(self, handle: StatefulProcessorHandle) -> WholeBuckets:
        return WholeBuckets(handle, Bucket, bucket_to_plain, bucket_from_plain)

    def held(self, bucket: Bucket) -> tuple[int, int]:
        """The rows each side's caches hold."""
        return cached_rows(bucket, left=True), cached_rows(bucket, left=False)

    def fire_due(self, bucket: Bucket, now: int) -> list[Emitted]:
        return _inserts(self.join.fire_due(bucket, now))

    def apply(self, bucket: Bucket, rows: InputRows, now: int) -> list[Emitted]:
        if any(op != "+I" for op in rows.ops):
            raise ValueError("an interval join takes insert-only inputs, got an update or delete")
        pairs: list[Pair] = []
        for i in rows.order():
            time = now if self.spec.proctime else rows.times[i]
            pairs += self.join.process(bucket, rows.keys[i], rows.sides[i], rows.row(i), time, now)
        return _inserts(pairs)


def _inserts(pairs: list[Pair]) -> list[Emitted]:
    """An interval join's output is append-only."""
    return [("+I", left, right) for left, right in pairs]
