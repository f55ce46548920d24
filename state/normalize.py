"""Changelog normalization, as Flink's `ChangelogNormalize`, per primary key.

Upsert topics carry only the new row (or a tombstone), and Debezium with REPLICA IDENTITY DEFAULT
sends updates without their `before` image and deletes whose `before` holds only the key. The
joins need the real old row to retract, so the last row of every key (and its event time) is
kept and the changelog rebuilt from it (Flink's `processLastRowOnChangelog`):

| input change                | key unknown | key known, last row `old`             |
|-----------------------------|-------------|---------------------------------------|
| +I / +U `new`               | +I `new`    | -U `old`, +U `new` (nothing if equal) |
| -U `b` then +U `new`        | +I `new`    | -U `b`, +U `new` (the update, as is)  |
| -U alone, -D                | nothing     | -D `old`, the key is forgotten        |

An update that arrives whole (Debezium's `-U before` `+U after`, one record) stays an update,
its `before` image and time as they came, as Flink passes a Debezium source's updates on
without normalizing them: a versioned table drops
the `-U` and keeps the old version valid until the new one, and a probe input's `-U` retracts
what its old row joined. (Flink's normalizer alone would make it `-D old`, `+I new`.)

Event times (`ts`): each change keeps its input's, except the old row re-emitted for an update
that carried no `before` image (an upsert, REPLICA IDENTITY DEFAULT): it keeps the time it was
stored with, as Flink's normalizer re-emits the stored row whole. A delete without a time of its
own (an upsert tombstone has no columns but the key) takes the stored row's.
Every output change has its own `seq` (input seq * 2 + its index), so a key's changes stay in
order through later shuffles.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from ops.worker_gc import settle_worker
from state.encoding import dump, load
from state.views import struct_values

LAST_ROW_STATE = StructType([StructField("row", BinaryType())])

# (op, seq, ts, row) of one change
Change = tuple[str, int, int | None, tuple[Any, ...]]
Last = tuple[tuple[Any, ...], int | None]  # the key's last row and its event time


def normalize(last: Last | None, changes: Sequence[Change]) -> tuple[list[Change], Last | None]:
    """The changes to emit for one key's input changes (in order), and the key's last row."""
    out: list[Change] = []
    before: tuple[tuple[Any, ...], int | None] | None = None  # a -U the next +U completes
    for i, (op, seq, ts, row) in enumerate(changes):
        if op == "-U" and i + 1 < len(changes) and changes[i + 1][0] == "+U":
            before = (row, ts)
            continue
        if op in ("+I", "+U"):
            if last is None:
                out.append(("+I", seq * 2, ts, row))
            elif last[0] != row or before is not None:
                old_row, old_time = before or last
                out += [("-U", seq * 2, old_time, old_row), ("+U", seq * 2 + 1, ts, row)]
            last = (row, ts)
        elif last is not None:
            out.append(("-D", seq * 2, ts if ts is not None else last[1], last[0]))
            last = None
        before = None
    return out, last


def _stored(blob: bytes) -> Last:
    row, ts = load(blob)
    return row, ts


class NormalizeProcessor(StatefulProcessor):
    """Keyed by the primary key; rows `op`, `seq`, `ts`, `row` in and out."""

    def __init__(self, row_names: list[str]) -> None:
        self.row_names = row_names

    def init(self, handle: StatefulProcessorHandle) -> None:
        settle_worker()
        self.state = handle.getValueState("last", LAST_ROW_STATE)
        self.out = Row("op", "seq", "ts", "row")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        stored = self.state.get()
        last = _stored(stored[0]) if stored is not None else None
        ordered = sorted(rows, key=lambda r: r.seq)
        changes = [(r.op, r.seq, r.ts, struct_values(r.row)) for r in ordered]
        output, last = normalize(last, changes)
        if last is None:
            if stored is not None:
                self.state.clear()
        else:
            blob = dump(last)
            if stored is None or stored[0] != blob:
                self.state.update((blob,))
        names = self.row_names
        return iter(
            self.out(op, seq, ts, dict(zip(names, values, strict=True)))
            for op, seq, ts, values in output
        )

    def close(self) -> None:
        """Nothing to release."""
