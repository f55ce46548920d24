"""The changelog normalizer on the frame: `state.joins.normalize` per primary key.

Each key's last row, its event time and when it was written are an entry of their own in the
key's bucket (`KeyedEntries`): a micro-batch reads and writes the keys it touches. Under a state
TTL (`state.store.retention`) a key's last row expires as the join's rows do, counted from its
last write.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.changes import Change, Row
from state.columns import Widening
from state.joins.normalize import Last, normalize
from state.joins.specs import Clock
from state.spark.frame import Held, InputRows, KeyHeld
from state.spark.layouts import KeyedEntries, entry_state
from state.store.encoding import load
from state.store.keyed_state import KeyedBucket, as_is, held_by_expiry, never
from state.store.retention import Retention

Stored = tuple[Row, int | None, int]  # a key's last row, its event time, when it was written


def _one_row(_stored: Stored) -> tuple[int, int]:
    """A key holds one row."""
    return 1, 0


class NormalizeOperator:
    """Rebuilds one input's changelog (`side`: which input, for the state-rows report) under
    the job's state retention `ttl_ms` (0: none)."""

    name = "normalizer"

    def __init__(self, side: str, ttl_ms: int = 0, widening: Widening | None = None) -> None:
        """`widening`: how the rows kept before the input's columns grew read (None: none)."""
        self.side = side
        self.retention = Retention(ttl_ms)
        self.widening = widening

    @property
    def clock(self) -> Clock:
        return "processing" if self.retention.ttl_ms > 0 else "none"

    @property
    def store_ttl_ms(self) -> int | None:
        return self.retention.store_ttl_ms

    def store(self, handle: StatefulProcessorHandle) -> KeyedEntries:
        return KeyedEntries(handle, as_is, self._stored, never, _one_row, self.store_ttl_ms)

    def _stored(self, stored: Stored) -> Stored:
        """A key's entry as read: its row in the input's columns now."""
        if self.widening is None:
            return stored
        row, *rest = stored
        return (self.widening(row), *rest)

    def held(self, bucket: KeyedBucket) -> dict[str, Held]:
        return {self.side: held_by_expiry(bucket.keys.ledger, 0)}

    variables = ("bucket", "keys")

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """A key's entry: its last row, at its event time."""
        self.retention.at(now)
        stored = entry_state(value, now) if variable == "keys" else None
        if name is not None and stored is not None and self._last(stored) is not None:
            row, time, _written = self._stored(stored)
            yield KeyHeld(self.side, load(name), 1, time, [row])

    def _last(self, stored: Stored | None) -> Last | None:
        """A key's last row, unless it expired."""
        if stored is None or not self.retention.alive(stored[2]):
            return None
        return stored[0], stored[1]

    def fire_due(self, bucket: Any, now: int) -> list[Change]:
        """The normalizer waits for no time."""
        return []

    def apply(self, bucket: KeyedBucket, rows: InputRows, now: int) -> list[Change]:
        written = self.retention.at(now)
        refresh = self.retention.ttl_ms > 0
        by_key = rows.by_key()
        last_rows = bucket.keys
        last_rows.prefetch(by_key)
        changes: list[Change] = []
        for key, positions in by_key.items():
            inputs = [(rows.ops[i], rows.seqs[i], rows.times[i], rows.lefts[i]) for i in positions]
            emitted, last = normalize(self._last(last_rows.get(key)), inputs, refresh)
            if last is None:
                last_rows.pop(key)
            else:
                last_rows[key] = (*last, written)
            changes += emitted
        return changes
