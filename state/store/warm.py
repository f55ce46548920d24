"""A bucket's entries kept in the worker between micro-batches, used only while provably current.

Every entry a micro-batch reads from Spark's state store costs a call to the JVM (a socket
round trip, pipelined or not). A Python worker that runs a bucket's next visit too can answer
from what it read and wrote at the last one, if nothing has written the bucket since: no other
worker, no retried task, no restart.

That is proved by a token: each visit that writes a bucket writes a fresh random token into
the bucket's own value (`state.spark.layouts.KeyedEntries`), which the store commits with the
entries, and leaves the same token on its copy here. A visit reads the bucket's own value
anyway: the copy is used only if it carries the token the store holds.

- A bucket visited by another worker since: the store holds that worker's token, not ours.
- A task that failed after writing, and its retry: its token was never committed, the copy's
  differs from the store's.
- A task that fails while a bucket is visited: the copy is marked in flight (no token) from
  the read to the write, so it matches nothing.
- A restart, a rescale: a new process has no copies; a copy of a bucket that moved away stops
  matching once the bucket is written elsewhere.

Under a state TTL Spark drops entries by itself, unseen: a copy here is used only until the
entry it copies could have been dropped, so only entries written here (whose write time is
known) are kept, and each only until its TTL comes near.

Copies are bounded in bytes, least recently visited bucket out first.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

# What an entry costs beyond its bytes: the dict slot, the tuple, the bytes objects' headers.
ENTRY_OVERHEAD = 150

# A copy of an entry under a TTL is dropped this long before Spark could drop the entry itself.
TTL_MARGIN_MS = 1_000


class Entries(Protocol):
    """The `EntryStore` calls a copy stands in front of."""

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def items(self) -> Iterator[tuple[bytes, bytes]]: ...

    def write_many(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None: ...


def new_token() -> bytes:
    return os.urandom(8)


@dataclass
class WarmBucket:
    """A copy of one bucket's entries: name -> (bytes, None: no entry; when written here, or
    None where not known). `token`: the token the store held when the copy was current, None
    while a visit is in flight."""

    token: bytes | None = None
    entries: dict[bytes, tuple[bytes | None, int | None]] = field(default_factory=dict)
    size: int = 0

    def keep(self, name: bytes, blob: bytes | None, written: int | None) -> None:
        was = self.entries.get(name)
        if was is not None:
            self.size -= len(name) + len(was[0] or b"") + ENTRY_OVERHEAD
        self.entries[name] = (blob, written)
        self.size += len(name) + len(blob or b"") + ENTRY_OVERHEAD


class WarmStore:
    """The copies of one worker process, across operators and buckets, within `budget` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.buckets: OrderedDict[tuple[str, Any], WarmBucket] = OrderedDict()
        self.hits = self.misses = 0

    def take(self, owner: tuple[str, Any], token: bytes | None) -> WarmBucket:
        """The copy of `owner`'s bucket for a visit, if it is current at `token` (the store's),
        else an empty one; in flight until `settle`."""
        copy = self.buckets.pop(owner, None)
        if copy is None or token is None or copy.token != token:
            copy = WarmBucket()
        copy.token = None
        self.buckets[owner] = copy
        return copy

    def settle(self, owner: tuple[str, Any], copy: WarmBucket, token: bytes | None) -> None:
        """The visit wrote (or found) the bucket at `token`: the copy is current at it. Then
        the least recently visited copies go until all fit the budget."""
        copy.token = token
        used = sum(c.size for c in self.buckets.values())
        while used > self.budget and self.buckets:
            _owner, dropped = self.buckets.popitem(last=False)
            used -= dropped.size

    def counts(self) -> tuple[int, int]:
        """Entries answered here and read from the store since the last call."""
        counted = self.hits, self.misses
        self.hits = self.misses = 0
        return counted


_PROCESS_STORE: WarmStore | None = None


def process_store(budget: int) -> WarmStore:
    """This worker process's copies (made at the first call, resized to `budget` after)."""
    global _PROCESS_STORE
    if _PROCESS_STORE is None:
        _PROCESS_STORE = WarmStore(budget)
    _PROCESS_STORE.budget = budget
    return _PROCESS_STORE


class WarmEntries:
    """An `EntryStore` that answers from a bucket's copy what it can and keeps what it reads
    and writes there; `written` says whether this visit wrote any entry. `now`: the visit's
    processing time, by which copies under `ttl_ms` age."""

    def __init__(
        self,
        store: Entries,
        copy: WarmBucket,
        counts: WarmStore,
        now: int,
        ttl_ms: int | None,
    ) -> None:
        self.store, self.copy, self.counts = store, copy, counts
        self.now, self.ttl_ms = now, ttl_ms
        self.written = False

    def _fresh(self, written: int | None) -> bool:
        """Whether an entry written at `written` is surely still in the store: under a TTL,
        only one written here, until its TTL comes near."""
        if self.ttl_ms is None:
            return True
        return written is not None and self.now < written + self.ttl_ms - TTL_MARGIN_MS

    def recall(self, names: list[bytes]) -> dict[bytes, bytes | None]:
        """The entries among `names` the copy holds, current."""
        found: dict[bytes, bytes | None] = {}
        entries = self.copy.entries
        for name in names:
            kept = entries.get(name)
            if kept is None:
                continue
            blob, written = kept
            if blob is not None and not self._fresh(written):
                continue
            found[name] = blob
        self.counts.hits += len(found)
        return found

    def _read(self, name: bytes, blob: bytes | None) -> None:
        """Keep an entry as read from the store: under a TTL only an absent one (when a
        present one was written, and so when Spark drops it, is not known here)."""
        if blob is None or self.ttl_ms is None:
            self.copy.keep(name, blob, None)

    def get(self, key: bytes) -> bytes | None:
        recalled = self.recall([key])
        if key in recalled:
            return recalled[key]
        self.counts.misses += 1
        blob = self.store.get(key)
        self._read(key, blob)
        return blob

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        recalled = self.recall(keys)
        missing = [key for key in keys if key not in recalled]
        if missing:
            self.counts.misses += len(missing)
            for name, blob in zip(missing, self.store.get_many(missing), strict=True):
                self._read(name, blob)
                recalled[name] = blob
        return [recalled[key] for key in keys]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for name, blob in self.store.items():
            self.counts.misses += 1
            self._read(name, blob)
            yield name, blob

    def put(self, key: bytes, value: bytes) -> None:
        self.write_many([(key, value)], [])

    def remove(self, key: bytes) -> None:
        self.write_many([], [key])

    def write_many(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None:
        self.store.write_many(puts, removes)
        self.written = True
        for name, blob in puts:
            self.copy.keep(name, blob, self.now)
        for name in removes:
            self.copy.keep(name, None, self.now)
