"""The upsert materializer on the frame: `state.joins.materialize` per output record key.

In: the record key as `k0`, the output row as the first side's columns, each join task's
order of emission as `seq`; out: `op`, `k0` and the row, with no `-U` (the record a key ends on
is all an upsert topic keeps). Each key's rows are an entry of their own in its bucket
(`KeyedEntries`), so a batch reads and writes the keys it touches, as the joins do; a key's
rows are dropped when not written for the job's `STATE_TTL`, as Flink's `SinkUpsertMaterializer`
keeps its state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from state.changes import Change, Row
from state.joins.materialize import materialize
from state.joins.specs import Clock
from state.spark.frame import Held, InputRows, KeyHeld
from state.spark.layouts import KeyedEntries, entry_state
from state.store.encoding import load
from state.store.keyed_state import KeyedBucket, as_is, held_by_expiry, never


def _size(rows: list[Row]) -> tuple[int, int]:
    return len(rows), 0


class UpsertMaterializeOperator:
    """`materialize` per record key; `ttl_ms`: the job's state retention (0: none)."""

    name = "upsert"

    def __init__(self, ttl_ms: int = 0) -> None:
        self.ttl_ms = ttl_ms

    @property
    def clock(self) -> Clock:
        return "processing" if self.ttl_ms > 0 else "none"

    @property
    def store_ttl_ms(self) -> int | None:
        return self.ttl_ms or None

    def store(self, handle: StatefulProcessorHandle) -> KeyedEntries:
        return KeyedEntries(handle, as_is, as_is, never, _size, self.store_ttl_ms)

    def held(self, bucket: KeyedBucket) -> dict[str, Held]:
        return {"output": held_by_expiry(bucket.keys.ledger, 0)}

    variables = ("bucket", "keys")

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """A record key's entry: the output rows it may still end on."""
        rows = entry_state(value, now) if variable == "keys" else None
        if rows and name is not None:
            yield KeyHeld("output", (load(name),), len(rows), rows=list(rows))

    def fire_due(self, bucket: Any, now: int) -> list[Change]:
        """The materializer waits for no time."""
        return []

    def apply(self, bucket: KeyedBucket, rows: InputRows, now: int) -> list[Change]:
        # an entry is keyed by the record key itself, not the 1-tuple of the key columns
        by_key = {key: positions for (key,), positions in rows.by_key().items()}
        stored = bucket.keys
        stored.prefetch(by_key)
        changes: list[Change] = []
        for key, positions in by_key.items():
            current = list(stored.get(key, ()))
            applied = materialize(current, ((rows.ops[i], rows.lefts[i]) for i in positions))
            changes += [Change(op, row, key=key) for op, row in applied]
            if current:
                stored[key] = current
            else:
                stored.pop(key)
        return changes
