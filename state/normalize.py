"""Changelog normalization, as Flink's `ChangelogNormalize`, per primary key.

Upsert topics carry only the new row (or a tombstone), and Debezium with REPLICA IDENTITY DEFAULT
sends updates without their `before` image and deletes whose `before` holds only the key. The
joins need the real old row to retract, so the last row of every key is kept and the changelog
rebuilt from it (Flink's `processLastRowOnChangelog`):

- +I/+U of a new key -> +I; of a known key -> -U(old row) +U(new row); the same row: nothing;
- -U/-D of a known key -> -D(old row), the state is cleared; of an unknown key -> nothing.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from state.views import struct_values

LAST_ROW_STATE = StructType([StructField("row", BinaryType())])

Change = tuple[str, tuple[Any, ...]]


def normalize(last: tuple | None, op: str, row: tuple) -> tuple[list[Change], tuple | None]:
    """The changes to emit for one input change, and the key's new last row."""
    if op in ("+I", "+U"):
        if last is None:
            return [("+I", row)], row
        if last == row:
            return [], row
        return [("-U", last), ("+U", row)], row
    return ([("-D", last)] if last is not None else []), None


class NormalizeProcessor(StatefulProcessor):
    """Keyed by the primary key; rows `op`, `seq`, `ts`, `row` in and out.

    Every change an input row causes carries that row's `ts`: an update's `-U` and `+U` both
    happen at the time of the update, as with Debezium's `source.ts_ms`."""

    def __init__(self, row_names: list[str]) -> None:
        self.row_names = row_names

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("last", LAST_ROW_STATE)
        self.out = Row("op", "seq", "ts", "row")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        stored = self.state.get()
        last = pickle.loads(stored[0]) if stored is not None else None
        output = []
        for row in sorted(rows, key=lambda r: r.seq):
            changes, last = normalize(last, row.op, struct_values(row.row))
            output += [
                self.out(op, row.seq, row.ts, dict(zip(self.row_names, values, strict=True)))
                for op, values in changes
            ]
        if last is None:
            if stored is not None:
                self.state.clear()
        else:
            blob = pickle.dumps(last, protocol=pickle.HIGHEST_PROTOCOL)
            if stored is None or stored[0] != blob:
                self.state.update((blob,))
        return iter(output)

    def close(self) -> None:
        """Nothing to release."""
