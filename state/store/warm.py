"""A bucket's entries kept beside the state store between micro-batches, used only while
provably current.

Every entry a micro-batch reads from Spark's state store costs a call to the JVM (a socket
round trip, pipelined or not). What a bucket's last visit read and wrote can answer its next
one, if nothing has written the bucket since: no visit whose copy was not kept, no retried
task, no restart.

That is proved by a token: each visit that writes a bucket writes a fresh random token into
the bucket's own value (`state.spark.layouts.KeyedEntries`), which the store commits with the
entries, and hands the same token with what it read and wrote to the copies (`settle`). A
visit reads the bucket's own value anyway: the copy answers (`recall`) only if it carries the
token the store holds.

- A visit whose copy was kept elsewhere (another executor, a worker without the keeper): the
  store holds that visit's token, not the copy's.
- A task that failed after a visit, and its retry: the visit's token was never committed, or was
  rolled back; the copy's differs from the store's.
- A task that fails within a visit: nothing reaches the copies before the visit's end.
- A restart, a rescale: new processes hold no copies; a copy of a bucket that moved away stops
  matching once the bucket is written elsewhere.

Under a state TTL Spark drops entries by itself, unseen: so only entries written by a visit
(whose write time is known) are kept, each used only until its TTL comes near.

Copies are plain bytes (a visit decodes them as it would the store's), bounded in bytes, least
recently settled bucket out first. They live in one process per executor that all its Python
workers share (`state.store.keeper`), so a bucket's next visit finds them whichever worker Spark
hands it to; without it, in the worker's own memory (`WarmStore`).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

# What an entry costs beyond its bytes: the dict slot, the tuple, the bytes objects' headers.
ENTRY_OVERHEAD = 150

# A copy of an entry under a TTL is used until this long before Spark could drop the entry.
TTL_MARGIN_MS = 1_000

Owner = tuple[str, Any]  # (the operator's name in the query, the bucket's grouping key)
Token = bytes | None
Kept = tuple[bytes | None, int | None]  # (the entry's bytes, None: none; when written, if known)
Seen = dict[bytes, Kept]  # what a visit read and wrote, by name


class Entries(Protocol):
    """The `EntryStore` calls a copy stands in front of."""

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def items(self) -> Iterator[tuple[bytes, bytes]]: ...

    def write_many(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None: ...


class Copies(Protocol):
    """Where copies are kept: `recall` what a copy current at `token` holds of `names`;
    `settle` a visit that started at `token` and left the bucket at `new`, with what it
    read and wrote (`kept`), within `budget` bytes."""

    def recall(self, owner: Owner, token: Token, names: list[bytes]) -> Seen: ...

    def settle(self, owner: Owner, token: Token, new: Token, kept: Seen, budget: int) -> None: ...


def new_token() -> bytes:
    return os.urandom(8)


@dataclass
class WarmBucket:
    """A copy of one bucket's entries, current at `token`."""

    token: bytes | None = None
    entries: dict[bytes, Kept] = field(default_factory=dict)
    size: int = 0

    def keep(self, name: bytes, kept: Kept) -> None:
        was = self.entries.get(name)
        if was is not None:
            self.size -= len(name) + len(was[0] or b"") + ENTRY_OVERHEAD
        self.entries[name] = kept
        self.size += len(name) + len(kept[0] or b"") + ENTRY_OVERHEAD


class WarmStore:
    """Copies of buckets in one process, within the budget of the last `settle`."""

    def __init__(self) -> None:
        self.buckets: OrderedDict[Owner, WarmBucket] = OrderedDict()
        self.used = 0

    def recall(self, owner: Owner, token: Token, names: list[bytes]) -> Seen:
        copy = self.buckets.get(owner)
        if copy is None or token is None or copy.token != token:
            return {}
        entries = copy.entries
        return {name: entries[name] for name in names if name in entries}

    def settle(self, owner: Owner, token: Token, new: Token, kept: Seen, budget: int) -> None:
        copy = self.buckets.pop(owner, None)
        if copy is not None:
            self.used -= copy.size
            if token is None or copy.token != token:
                copy = None  # not what the visit started from: only what it saw is current
        if new is None:
            return
        copy = copy or WarmBucket()
        for name, entry in kept.items():
            copy.keep(name, entry)
        copy.token = new
        self.buckets[owner] = copy
        self.used += copy.size
        while self.used > budget and self.buckets:
            _owner, dropped = self.buckets.popitem(last=False)
            self.used -= dropped.size


@dataclass
class ReadCounts:
    """Entries answered from copies (`hits`) and read from the store (`misses`)."""

    hits: int = 0
    misses: int = 0

    def take(self) -> tuple[int, int]:
        """The counts since the last call."""
        counted = self.hits, self.misses
        self.hits = self.misses = 0
        return counted


class WarmVisit:
    """One visit of a bucket: the copies current at the `token` it read, asked first by each of
    its stores (`WarmEntries`), and handed what they read and wrote at `settle`. `now`: the
    visit's processing time, by which entries under `ttl_ms` age."""

    def __init__(
        self,
        copies: Copies,
        owner: Owner,
        token: bytes | None,
        counts: ReadCounts,
        now: int,
        ttl_ms: int | None,
    ) -> None:
        self.copies, self.owner, self.token = copies, owner, token
        self.counts, self.now, self.ttl_ms = counts, now, ttl_ms
        self.kept: dict[bytes, Kept] = {}
        self.written = False

    def fresh(self, kept: Kept) -> bool:
        """Whether a copy's entry is surely what the store holds: under a TTL, one written by
        a visit, until its TTL comes near."""
        blob, written = kept
        if blob is None or self.ttl_ms is None:
            return True
        return written is not None and self.now < written + self.ttl_ms - TTL_MARGIN_MS

    def settle(self, new: Token, budget: int) -> None:
        """The visit left the bucket at `new` (None: the bucket is empty, or unknown)."""
        self.copies.settle(self.owner, self.token, new, self.kept, budget)


class WarmEntries:
    """An `EntryStore` for one visit of a bucket (`WarmVisit`) that asks the visit's copies
    first. A bucket's other stores (a regular join's pages) share the visit, their names kept
    under a `prefix` of their own, so that one token proves them all and one message settles
    them."""

    def __init__(self, store: Entries, visit: WarmVisit, prefix: bytes = b"") -> None:
        self.store, self.visit, self.prefix = store, visit, prefix

    def recall(self, keys: list[bytes]) -> dict[bytes, bytes | None]:
        """The entries among `keys` the copies hold, current."""
        visit = self.visit
        if visit.token is None:
            return {}
        prefix = self.prefix
        names = [prefix + name for name in keys] if prefix else keys
        found = {
            name[len(prefix) :]: kept[0]
            for name, kept in visit.copies.recall(visit.owner, visit.token, names).items()
            if visit.fresh(kept)
        }
        visit.counts.hits += len(found)
        return found

    def _read(self, name: bytes, blob: bytes | None) -> None:
        """Keep an entry as read from the store: under a TTL only an absent one (when a
        present one was written, and so when Spark drops it, is not known here)."""
        visit = self.visit
        visit.counts.misses += 1
        if blob is None or visit.ttl_ms is None:
            visit.kept.setdefault(self.prefix + name, (blob, None))

    def get(self, key: bytes) -> bytes | None:
        blob = self.store.get(key)
        self._read(key, blob)
        return blob

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        blobs = self.store.get_many(keys)
        for name, blob in zip(keys, blobs, strict=True):
            self._read(name, blob)
        return blobs

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for name, blob in self.store.items():
            self._read(name, blob)
            yield name, blob

    def put(self, key: bytes, value: bytes) -> None:
        self.write_many([(key, value)], [])

    def remove(self, key: bytes) -> None:
        self.write_many([], [key])

    def write_many(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None:
        self.store.write_many(puts, removes)
        visit, prefix = self.visit, self.prefix
        visit.written = True
        for name, blob in puts:
            visit.kept[prefix + name] = (blob, visit.now)
        for name in removes:
            visit.kept[prefix + name] = (None, visit.now)
