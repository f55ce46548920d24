"""The temporal table joins on the frame, as two operators, as in Flink: event time and
processing time. Each key of the versioned table is an entry of its own (`KeyedEntries`): a
versioned table is state far larger than what a batch touches.

See `state.joins.temporal_join` for the semantics. The probe (left) input may be a changelog
(each change joins as of its own time and keeps its kind); the build (right) input is a
changelog with a primary key (a versioned table) or, for the temporal table function form, an
append-only history whose declared primary key makes each row a new version of its key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.changes import Change
from state.joins.specs import Clock, TemporalJoinSpec
from state.joins.temporal_join import (
    EventTimeTemporalJoin,
    ProcessingTimeTemporalJoin,
    VersionedKey,
    key_from_plain,
    key_size,
    key_timer,
    key_to_plain,
    widen_waiting,
)
from state.spark.frame import Held, InputRows, KeyHeld
from state.spark.layouts import KeyedEntries, entry_state, waiting_rows
from state.store.encoding import load
from state.store.keyed_state import KeyedBucket, as_is, never
from state.store.parked import Waiting, is_parked, parked_rows

PROBE, BUILD = 0, 1  # the sides: the probe input, the versioned table


class EventTimeTemporalJoinOperator:
    """Probe rows wait in their bucket for the watermark; their keys' versions are read when
    they are due, so a batch reads the keys of the versions it writes and of the rows due."""

    name = "join"
    clock: Clock = "event"
    store_ttl_ms = None  # bounded by the table's versions and the watermark

    def __init__(self, spec: TemporalJoinSpec) -> None:
        self.join: EventTimeTemporalJoin = spec.operator()
        self.widenings = (spec.left.widening, spec.right.widening)

    def store(self, handle: StatefulProcessorHandle) -> KeyedEntries:
        return KeyedEntries(handle, key_to_plain, self._key_from_plain, key_timer, key_size)

    def _key_from_plain(self, plain: tuple) -> VersionedKey:
        return key_from_plain(plain, self.widenings[BUILD])

    def held(self, bucket: KeyedBucket) -> dict[str, Held]:
        """Probe rows waiting for the watermark; the table's versions."""
        return {"left": bucket.rows_waiting, "right": bucket.keys.held[1]}

    variables = ("bucket", "keys")

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """A key's entry: the table's versions (right); the bucket's own value and its parked
        entries: the probe rows waiting for the watermark (left)."""
        if variable == "keys" and name is not None and is_parked(name):
            yield from self._waiting_held(parked_rows(value))
        elif variable == "keys" and name is not None:
            plain = entry_state(value, now)
            if plain is not None and plain[0]:
                versions = self._key_from_plain(plain).versions
                yield KeyHeld(
                    "right",
                    load(name),
                    len(versions),
                    min(versions),
                    [row for _op, row in versions.values()],
                )
        elif variable == "bucket":
            yield from self._waiting_held(waiting_rows(value))

    def _waiting_held(self, waiting: Waiting) -> Iterator[KeyHeld]:
        if self.widenings[PROBE] is not None:
            widen_waiting(waiting, self.widenings[PROBE])
        for key, rows in waiting.items():
            yield KeyHeld("left", key, len(rows), min(r[1] for r in rows), [r[2] for r in rows])

    def fire_due(self, bucket: KeyedBucket, now: int) -> list[Change]:
        due = bucket.due(now)
        bucket.keys.prefetch(due)
        if self.widenings[PROBE] is not None:  # rows that waited since before columns grew
            widen_waiting(bucket.waiting, self.widenings[PROBE])
        return self.join.fire_due(bucket, now, due)

    def apply(self, bucket: KeyedBucket, rows: InputRows, now: int) -> list[Change]:
        join = self.join
        bucket.keys.prefetch(
            k for k, side in zip(rows.keys, rows.sides, strict=True) if side == BUILD
        )
        for i in rows.order():
            key, row, op = rows.keys[i], rows.row(i), rows.ops[i]
            if rows.sides[i] == PROBE:
                join.probe(bucket, key, rows.seqs[i], rows.times[i], row, op)
            else:
                join.version(bucket, key, op, rows.times[i], row)
        return []


class ProcessingTimeTemporalJoinOperator:
    """Each key keeps the table's latest row; probe rows join it at once, never waiting."""

    name = "join"
    clock: Clock = "processing"
    store_ttl_ms = None  # a key's latest row, kept until the table deletes it

    def __init__(self, spec: TemporalJoinSpec) -> None:
        self.join: ProcessingTimeTemporalJoin = spec.operator()
        self.widen = spec.right.widening or as_is  # the latest rows, as the table is now

    def store(self, handle: StatefulProcessorHandle) -> KeyedEntries:
        return KeyedEntries(handle, as_is, self.widen, never, _latest_row)

    def held(self, bucket: KeyedBucket) -> dict[str, Held]:
        """The table's latest rows."""
        return {"left": 0, "right": bucket.keys.held[1]}

    variables = ("bucket", "keys")

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """A key's entry: the table's latest row (right)."""
        row = entry_state(value, now) if variable == "keys" else None
        if row is not None and name is not None:
            yield KeyHeld("right", load(name), 1, rows=[self.widen(row)])

    def fire_due(self, bucket: Any, now: int) -> list[Change]:
        """Nothing waits for time."""
        return []

    def apply(self, bucket: KeyedBucket, rows: InputRows, now: int) -> list[Change]:
        changes: list[Change] = []
        latest = bucket.keys
        latest.prefetch(rows.keys)
        for i in rows.order():
            key, row, op = rows.keys[i], rows.row(i), rows.ops[i]
            if rows.sides[i] == PROBE:
                changes += self.join.probe(latest, key, row, op)
            else:
                self.join.version(latest, key, op, row)
        return changes


def _latest_row(_row: Any) -> tuple[int, int]:
    """What a key holds in the processing-time join: the table's latest row (right side)."""
    return 0, 1
