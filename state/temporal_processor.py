"""The temporal table joins as bucketed `transformWithStateInPandas` processors.

See `state.temporal_join` for the semantics and `state.bucketed_processor` for the wiring. The
probe (left) input may be a changelog (each change joins as of its own time and keeps its
kind); the build (right) input is a changelog with a primary key (a versioned table) or, for the
temporal table function form, an append-only history whose declared primary key makes each row a
new version of its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.bucketed_processor import (
    BucketedJoinProcessor,
    BucketedJoinSpec,
    Emitted,
    InputRows,
    KeyedEntries,
    SideSpec,
)
from state.condition import (
    ConditionError,
    JoinCondition,
    parse_condition,
    split_condition,
)
from state.keyed_state import KeyedBucket, as_is, never
from state.temporal_join import (
    EventTimeTemporalJoin,
    ProcessingTimeTemporalJoin,
    key_from_plain,
    key_size,
    key_timer,
    key_to_plain,
)


def latest_row(_row: Any) -> tuple[int, int]:
    """What a key holds in the processing-time join: the table's latest row (right side)."""
    return 0, 1


@dataclass(frozen=True)
class TemporalJoinSpec(BucketedJoinSpec):
    """`L [LEFT] JOIN R FOR SYSTEM_TIME AS OF L.<left_time> ON ...`, small and picklable.

    `left_time` is `proctime` for the processing-time join (the latest version).
    """

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    left_time: str
    buckets: int = 128

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
        if self.proctime:
            return ProcessingTimeTemporalJoin(self.kind, self.matcher())
        return EventTimeTemporalJoin(self.kind, self.matcher())


class TemporalJoinProcessor(BucketedJoinProcessor):
    """Event time: probe rows wait for the watermark; processing time: the latest version."""

    def layout(self, handle: StatefulProcessorHandle) -> KeyedEntries:
        """Each key its own entry: a versioned table is state far larger than what a batch
        touches. Processing time keeps each key's latest row, and never waits for time."""
        if self.spec.proctime:
            return KeyedEntries(handle, as_is, as_is, never, latest_row)
        return KeyedEntries(handle, key_to_plain, key_from_plain, key_timer, key_size)

    def held(self, bucket: KeyedBucket) -> tuple[int, int]:
        """Probe rows waiting for the watermark; the table's versions (or latest rows)."""
        return sum(map(len, bucket.waiting.values())), bucket.keys.held[1]

    def fire_due(self, bucket: Any, now: int) -> list[Emitted]:
        if isinstance(self.join, ProcessingTimeTemporalJoin):
            return []
        bucket.keys.prefetch(bucket.due(now))
        return self.join.fire_due(bucket, now)

    def apply(self, bucket: Any, rows: InputRows, now: int) -> list[Emitted]:
        """Versions are applied at once and processing-time probe rows join at once: their keys
        are read now; event-time probe rows wait, their keys read when due (`fire_due`)."""
        pairs: list[Emitted] = []
        join = self.join
        reads_now = isinstance(join, ProcessingTimeTemporalJoin)
        bucket.keys.prefetch(k for k, side in zip(rows.keys, rows.sides, strict=True)
                             if reads_now or side == 1)  # fmt: skip
        for i in rows.order():
            key, row, probe = rows.keys[i], rows.row(i), rows.sides[i] == 0
            if isinstance(join, ProcessingTimeTemporalJoin):
                if probe:
                    pairs += join.probe(bucket.keys, key, row, rows.ops[i])
                else:
                    join.version(bucket.keys, key, rows.ops[i], row)
            elif probe:
                join.probe(bucket, key, rows.seqs[i], rows.times[i], row, rows.ops[i])
            else:
                join.version(bucket, key, rows.ops[i], rows.times[i], row)
        return pairs
