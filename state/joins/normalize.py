"""Changelog normalization, as Flink's `ChangelogNormalize`, per primary key.

Upsert topics carry only the new row (or a tombstone), and Debezium with REPLICA IDENTITY DEFAULT
sends updates without their `before` image and deletes whose `before` holds only the key. The
joins need the real old row to retract, so the last row of every key (and its event time) is
kept and the changelog rebuilt from it (Flink's `processLastRowOnChangelog`):

| input change                | key unknown | key known, last row `old`             |
|-----------------------------|-------------|---------------------------------------|
| +I / +U `new`               | +I `new`    | -U `old`, +U `new` (nothing if equal, |
|                             |             | unless under a state TTL)             |
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

Under a state TTL (`state.store.retention`) a key's last row expires as the join's rows do, counted
from its last write, and an update equal to the last row is still passed on: as in Flink, whose
normalizer does so that the operators after it refresh their copy of the row and forget it at
the same time, not before.
"""

from __future__ import annotations

from collections.abc import Sequence

from state.changes import Change, Row, RowKind, opens_update

# (kind, seq, ts, row) of one input change
Input = tuple[str, int, int | None, Row]
Last = tuple[Row, int | None]  # the key's last row and its event time


def normalize(
    last: Last | None, changes: Sequence[Input], refresh: bool = False
) -> tuple[list[Change], Last | None]:
    """The changes to emit for one key's input changes (in order), and the key's last row;
    `refresh` passes an update equal to the last row on (under a state TTL)."""
    out: list[Change] = []
    before: tuple[Row, int | None] | None = None  # a -U the next +U completes
    for i, (op, seq, ts, row) in enumerate(changes):
        if opens_update(changes, i):
            before = (row, ts)
            continue
        if op in RowKind.ACCUMULATE:
            if last is None:
                out.append(Change(RowKind.INSERT, row, ts=ts, seq=seq * 2))
            elif last[0] != row or before is not None or refresh:
                old_row, old_time = before or last
                out += [
                    Change(RowKind.UPDATE_BEFORE, old_row, ts=old_time, seq=seq * 2),
                    Change(RowKind.UPDATE_AFTER, row, ts=ts, seq=seq * 2 + 1),
                ]
            last = (row, ts)
        elif last is not None:
            out.append(
                Change(RowKind.DELETE, last[0], ts=ts if ts is not None else last[1], seq=seq * 2)
            )
            last = None
        before = None
    return out, last
