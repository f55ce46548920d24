"""A bucket's waiting rows parked in entries of their own, a visit's rows at a time.

The rows that wait in a bucket for time (a temporal join's probe rows, until the watermark
passes them) live in the bucket's own value, which every visit reads and writes whole. A
catch-up that leaves two micro-batches' rows waiting behind its watermark decoded, encoded and
moved them through the state server at each visit until they were due. Parked, a visit's rows
are encoded once into an entry of the bucket's `MapState`, beside its keys' entries, and read
once, at the first visit at which one of them is due; the bucket's own value keeps each parked
entry's name, earliest time and row count, which is all its timer and its counts need.

Only where Spark keeps an entry until it is removed (no state TTL: it would drop a parked entry
unseen, and its rows with it), and only a visit's rows from `PARK_FROM_ROWS` on: fewer stay in
the bucket's value, where they cost no call of their own.
"""

from __future__ import annotations

import os
from typing import Protocol

from state.store.encoding import StateFormatError, dump_packed, load

Waiting = dict[object, list[tuple]]  # key -> rows waiting for time, each (seq, time, ...)
Parked = tuple[bytes, int, int]  # (entry name, its rows' earliest time, its rows)

# A key's entry name starts with the format byte (`state.store.encoding.dump_key`), never 0.
PARKED_NAME = b"\x00parked:"

# Fewer rows waiting after a visit stay in the bucket's own value.
PARK_FROM_ROWS = 256


class Entries(Protocol):
    """The `EntryStore` calls parking uses."""

    def recall(self, keys: list[bytes]) -> dict[bytes, bytes | None]: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...


def is_parked(name: bytes) -> bool:
    """Whether a bucket's entry holds parked rows, not a key's state."""
    return name.startswith(PARKED_NAME)


def parked_rows(value: bytes) -> Waiting:
    """The rows a parked entry holds, by key."""
    return load(value)


def earliest(parked: list[Parked]) -> int | None:
    return min((time for _name, time, _rows in parked), default=None)


def park(waiting: Waiting) -> tuple[Parked, bytes] | None:
    """`waiting` as a parked entry and its bytes, if it holds enough rows to be worth one."""
    rows = sum(map(len, waiting.values()))
    if rows < PARK_FROM_ROWS:
        return None
    first = min(row[1] for held in waiting.values() for row in held)
    return (PARKED_NAME + os.urandom(8), first, rows), dump_packed(waiting)


def unpark_due(store: Entries, parked: list[Parked], waiting: Waiting, now: int) -> list[bytes]:
    """Take the parked entries holding a row due at `now` out of `parked`, their rows into
    `waiting`; the names taken, for the visit to remove."""
    names = [name for name, time, _rows in parked if time <= now]
    if not names:
        return []
    found = store.recall(names)
    unknown = [name for name in names if name not in found]
    if unknown:
        found.update(zip(unknown, store.get_many(unknown), strict=True))
    for name in names:
        blob = found[name]
        if blob is None:
            raise StateFormatError(f"parked rows {name!r} named by their bucket are not stored")
        for key, rows in parked_rows(blob).items():
            waiting.setdefault(key, []).extend(rows)
    taken = set(names)
    parked[:] = [entry for entry in parked if entry[0] not in taken]
    return names
