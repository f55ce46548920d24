"""The interval join on the frame: Flink's interval join per key, whole buckets.

The join's semantics, per key, are those of `state.joins.interval_join`. Its state is bounded
by the interval, so a bucket is one value, read and written whole (`WholeBuckets`), in which
each key's state is decoded only when a visit touches it (`state.joins.interval_join.Keys`).
Event time: the operator time is Spark's watermark, the minimum of both inputs'; late rows
reach the join, which decides what they still meet, as Flink's does.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.changes import Change, RowKind
from state.joins.interval_join import Bucket, bucket_from_plain, bucket_to_plain, cached_rows
from state.joins.specs import Clock, IntervalJoinSpec
from state.spark.frame import Held, InputRows, KeyHeld
from state.spark.layouts import WholeBuckets
from state.store.encoding import load


class IntervalJoinOperator:
    """`IntervalJoin` per key, over buckets of keys."""

    name = "join"
    store_ttl_ms = None  # bounded by time, not by retention

    def __init__(self, spec: IntervalJoinSpec, chained: bool = False) -> None:
        """`chained`: the left input is the result of an interval or temporal join before
        this one, whose rows of a batch come before the batch's watermark (in Flink, before
        the watermark that released them reaches this join): none of them is late here."""
        self.spec = spec
        self.join = spec.operator()
        self.chained = chained

    @property
    def clock(self) -> Clock:
        return self.spec.clock

    def store(self, handle: StatefulProcessorHandle) -> WholeBuckets:
        return WholeBuckets(handle, Bucket, bucket_to_plain, self._bucket_from_plain)

    def _bucket_from_plain(self, plain: tuple) -> Bucket:
        return bucket_from_plain(plain, (self.spec.left.widening, self.spec.right.widening))

    def held(self, bucket: Bucket) -> dict[str, Held]:
        """The rows each side's caches hold."""
        return {"left": cached_rows(bucket, left=True), "right": cached_rows(bucket, left=False)}

    variables = ("bucket",)

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """A bucket's value: each key's cached rows of each side, by their times."""
        for key, state in self._bucket_from_plain(load(value)).keys.items():
            for side, cache in (("left", state.left), ("right", state.right)):
                rows = [entry[0] for entries in cache.values() for entry in entries]
                if rows:
                    yield KeyHeld(side, key, len(rows), min(cache), rows)

    def fire_due(self, bucket: Bucket, now: int) -> list[Change]:
        return self.join.fire_due(bucket, now)

    def apply(self, bucket: Bucket, rows: InputRows, now: int) -> list[Change]:
        if any(op != RowKind.INSERT for op in rows.ops):
            raise ValueError("an interval join takes insert-only inputs, got an update or delete")
        changes: list[Change] = []
        proctime = self.clock == "processing"
        for i in rows.order():
            time = now if proctime else rows.times[i]
            side = rows.sides[i]
            # Flink's operator time: the watermark, or 0 while it is not past 0
            # (`RowTimeIntervalJoin.updateOperatorTime`)
            operator_time = 0 if self.chained and side == 0 else max(now, 0)
            changes += self.join.process(
                bucket, rows.keys[i], side, rows.row(i), time, operator_time
            )
        return changes
