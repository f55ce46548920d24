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

from collections.abc import Iterable

from state.changes import Row, RowKind


def materialize(rows: list[Row], changes: Iterable[tuple[str, Row]]) -> list[tuple[str, Row]]:
    """Apply one output key's changes, in order, to its current `rows` (changed in place);
    return the records to emit (`+I`, `+U` or `-D`, and the row)."""
    emitted: list[tuple[str, Row]] = []
    for op, row in changes:
        if op in RowKind.ACCUMULATE:
            emitted.append((RowKind.UPDATE_AFTER if rows else RowKind.INSERT, row))
            rows.append(row)
            continue
        try:
            index = rows.index(row)
        except ValueError:
            continue
        last = len(rows) - 1
        del rows[index]
        if not rows:
            emitted.append((RowKind.DELETE, row))
        elif index == last:
            emitted.append((RowKind.UPDATE_AFTER, rows[-1]))
    return emitted
