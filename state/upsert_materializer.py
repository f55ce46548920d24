"""Flink's `SinkUpsertMaterializer`: an upsert output's changes put in order per output key.

Spark runs a join by its join key, so when a row's join key changes (an order moving to another
product) one task retracts the old row and another adds the new one. With an upsert output
keyed by something else (`OUTPUT_KEY=order_id`) both changes carry the same record key, reach
Kafka in either order, and the topic can end on the retraction's tombstone, or on the old row.
Flink keys such a sink by its primary key and keeps, per key, the rows currently in the result,
in the order they were added; each change is applied to that list and what the key's record
becomes is emitted:

| change     | the key's rows before      | rows after       | emitted                      |
|------------|----------------------------|------------------|------------------------------|
| +I/+U `r`  | none                       | `r`              | +I `r`                       |
| +I/+U `r`  | `a .. z`                   | `a .. z, r`      | +U `r`                       |
| -U/-D `r`  | `r` only                   | none             | -D `r` (a tombstone)         |
| -U/-D `r`  | `.. y, r` (`r` last)       | `.. y`           | +U `y`                       |
| -U/-D `r`  | `r` not last               | without it       | nothing (the record stands)  |
| -U/-D `r`  | not there (expired state)  | unchanged        | nothing, as Flink logs it    |

A retraction removes the first equal row, so the rows left do not depend on how the changes
of different join keys interleave, only on each join key's own order, which its task keeps
(`seq`); and the last record emitted for a key is always the last of its rows. That is what
makes the result right whatever order the tasks' changes arrive in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from ops.worker_gc import settle_worker
from state.bucketed_processor import (
    HeldRows,
    KeyedEntries,
    pandas_column,
    python_values,
    report_held,
)
from state.keyed_state import as_is, held_by_expiry, never
from state.regular_join import ACCUMULATE

Row = tuple[Any, ...]


def materialize(rows: list[Row], changes: Iterable[tuple[str, Row]]) -> list[tuple[str, Row]]:
    """Apply one output key's changes, in order, to its current `rows` (changed in place);
    return the records to emit (`+I`, `+U` or `-D`, and the row)."""
    emitted: list[tuple[str, Row]] = []
    for op, row in changes:
        if op in ACCUMULATE:
            emitted.append(("+U" if rows else "+I", row))
            rows.append(row)
            continue
        try:
            index = rows.index(row)
        except ValueError:
            continue
        last = len(rows) - 1
        del rows[index]
        if not rows:
            emitted.append(("-D", row))
        elif index == last:
            emitted.append(("+U", rows[-1]))
    return emitted


def _size(rows: list[Row]) -> tuple[int, int]:
    return len(rows), 0


class UpsertMaterializer(StatefulProcessor):
    """`materialize` per record key, on `transformWithStateInPandas` grouped by a bucket of keys.

    Columns in: `op`, `seq` (each join task's order of emission), the record key `key`, then
    the output row `c0..cN`; out: `op`, `key`, `c0..cN`, with no `-U` (the record a key ends
    on is all an upsert topic keeps). Each key's rows are an entry of their own in its bucket
    (`state.keyed_state`), so a batch reads and writes the keys it touches, as the joins do.
    """

    def __init__(self, width: int, kinds: dict[str, str], ttl_ms: int = 0,
                 held_rows: HeldRows | None = None) -> None:  # fmt: skip
        """`kinds`: `integral` or `timestamp` for the columns pandas carries as float / NaT;
        `ttl_ms`: a key's rows are dropped when not written for that long (the join's
        `STATE_TTL`), 0 keeps them; `held_rows` takes how many rows each bucket holds."""
        self.columns = [f"c{i}" for i in range(width)]
        self.kinds = kinds
        self.ttl_ms = ttl_ms
        self.held_rows = held_rows

    def init(self, handle: StatefulProcessorHandle) -> None:
        settle_worker()
        self.store = KeyedEntries(handle, as_is, as_is, never, _size, self.ttl_ms or None)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        ops, keys = frame["op"].tolist(), frame["key"].tolist()
        values = list(zip(*(python_values(frame[c], self.kinds.get(c, "")) for c in self.columns),
                          strict=True))  # fmt: skip
        by_key: dict[bytes, list[tuple[str, Row]]] = {}
        for i in np.argsort(frame["seq"].to_numpy(), kind="stable").tolist():
            by_key.setdefault(keys[i], []).append((ops[i], values[i]))
        now = timerValues.getCurrentProcessingTimeInMs() if self.ttl_ms else 0
        bucket, before = self.store.read(now)
        stored = bucket.keys
        stored.prefetch(by_key)
        output: list[tuple[bytes, str, Row]] = []
        for record_key, changes in by_key.items():
            current = list(stored.get(record_key, ()))
            output += [(record_key, op, row) for op, row in materialize(current, changes)]
            if current:
                stored[record_key] = current
            else:
                stored.pop(record_key)
        self.store.flush(bucket)
        self.store.write(bucket, before)
        if self.held_rows is not None:
            report_held(self.held_rows, "upsert", key[0],
                        {"output": held_by_expiry(stored.ledger, 0)})  # fmt: skip
        if output:
            yield self._frame(output)

    def _frame(self, output: list[tuple[bytes, str, Row]]) -> pd.DataFrame:
        columns: dict[str, Any] = {"op": [o[1] for o in output], "key": [o[0] for o in output]}
        for i, name in enumerate(self.columns):
            columns[name] = pandas_column([o[2][i] for o in output], self.kinds.get(name, ""))
        return pd.DataFrame(columns)

    def close(self) -> None:
        """Nothing to release."""
