"""The window join on the frame: Flink's window join per key, whole buckets.

The join's semantics, per key and window, are those of `state.joins.window_join`. A bucket's
state is its windows that have not fired yet, bounded by the window size; a batch mostly touches
it, so a bucket is one value, read and written whole (`WholeBuckets`). Event time only: the
operator time is Spark's watermark, the minimum of both inputs'.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.changes import SIDES, Change, RowKind
from state.joins.specs import Clock, WindowJoinSpec
from state.joins.window_join import Bucket, bucket_from_plain, bucket_to_plain, held_rows
from state.spark.frame import Held, InputRows, KeyHeld
from state.spark.layouts import WholeBuckets
from state.store.encoding import load


class WindowJoinOperator:
    """`WindowJoin` per key, over buckets of keys."""

    name = "join"
    store_ttl_ms = None  # bounded by time, not by retention
    variables = ("bucket",)

    def __init__(self, spec: WindowJoinSpec) -> None:
        self.spec = spec
        self.join = spec.operator()

    @property
    def clock(self) -> Clock:
        return "event"

    def store(self, handle: StatefulProcessorHandle) -> WholeBuckets:
        return WholeBuckets(handle, Bucket, bucket_to_plain, self._bucket_from_plain)

    def _bucket_from_plain(self, plain: tuple) -> Bucket:
        return bucket_from_plain(plain, (self.spec.left.widening, self.spec.right.widening))

    def held(self, bucket: Bucket) -> dict[str, Held]:
        """The rows each side's windows hold."""
        return {side: held_rows(bucket, n) for n, side in enumerate(SIDES)}

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """A bucket's value: each key's rows of each side, over its windows."""
        for key, windows in self._bucket_from_plain(load(value)).keys.items():
            for n, side in enumerate(SIDES):
                rows = [row for held in windows.values() for row in held[n]]
                if rows:
                    yield KeyHeld(side, key, len(rows), None, rows)

    def late(self, rows: InputRows, watermark: int) -> list[int]:
        """The rows whose window has fired: late, dropped (Flink's window join's lateness)."""
        return [
            i
            for i, side in enumerate(rows.sides)
            if self.join.fired(self.join.window_end(side, rows.row(i)), watermark)
        ]

    def fire_due(self, bucket: Bucket, now: int) -> list[Change]:
        return self.join.fire_due(bucket, now)

    def apply(self, bucket: Bucket, rows: InputRows, now: int) -> list[Change]:
        if any(op != RowKind.INSERT for op in rows.ops):
            raise ValueError("a window join takes insert-only inputs, got an update or delete")
        for i in rows.order():
            side, row = rows.sides[i], rows.row(i)
            if not self.join.fired(self.join.window_end(side, row), now):
                self.join.add(bucket, rows.keys[i], side, row)
        return []
