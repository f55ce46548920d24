"""A bucket's keys kept one store entry each: read when a key is first used, written if changed.

A join that keeps one value per bucket rewrites every key of a bucket whenever one changes, so
a micro-batch costs the whole state once it touches every bucket (a temporal join over a
1,000,000-row table: 1,250 rows/s, its batches growing from 13 s to 21 s). Here each key is its
own entry (a `MapState` entry of its bucket in Spark): a micro-batch reads the keys its rows
and due timers name, and writes back those whose bytes changed. Each entry costs a state call
(~100 µs here, 19 µs of it in Python: see `docs/design.md`), so this layout suits state much
larger than what a batch touches; the interval join, whose state the interval bounds and a
batch mostly touches, keeps whole buckets.

What a bucket needs across its keys is one small value of its own: the keys with a pending
timer and when, and the rows that wait there for time (a temporal join's probe rows, bounded by
the watermark delay: not worth an entry call each). Only what waits for time is in it, not
every key with state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from state.encoding import dump, dump_key, load


def as_is(value: Any) -> Any:
    """The plain form of a state that is plain data already (a row and its time)."""
    return value


def never(_state: Any) -> None:
    """The timer of a state that never waits for time."""


def unsized(_state: Any) -> tuple[int, int]:
    """The size of a state whose rows nobody counts (per side: none)."""
    return 0, 0


Waiting = dict[Any, list[tuple]]  # key -> rows waiting for time, each (seq, time, ...)


def next_time(timers: dict[Any, int], waiting: Waiting) -> int | None:
    """The earliest of the keys' timers and the waiting rows' times."""
    times = [*timers.values(), *(row[1] for rows in waiting.values() for row in rows)]
    return min(times, default=None)


def due_keys(timers: dict[Any, int], waiting: Waiting, now: int) -> list[Any]:
    """The keys with a timer or a waiting row at or before `now`, earliest first."""
    due = {k: t for k, t in timers.items() if t <= now}
    for key, rows in waiting.items():
        time = min(row[1] for row in rows)
        if time <= now:
            due[key] = min(time, due.get(key, time))
    return sorted(due, key=due.__getitem__)


# A batch reads every entry of its bucket in one pass, instead of its keys one call each, when
# the bucket holds at most this many entries per key the batch touches. Spark streams a
# `MapState`'s entries to Python, but not cheaply: 112-166 µs an entry against 230-289 µs a
# `getValue` (25,000-50,000 entries in 16 buckets, 2 tasks on 2 cores), so only a pass over
# few more entries than the batch wants pays; into an empty bucket it saves every call.
DENSE = 1.5


class EntryStore(Protocol):
    """Where a bucket's entries live: a `MapState` of bytes -> bytes in Spark."""

    def get(self, key: bytes) -> bytes | None: ...

    def items(self) -> Iterator[tuple[bytes, bytes]]: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def remove(self, key: bytes) -> None: ...


class StoredKeys:
    """A mapping key -> state over an `EntryStore`, for one micro-batch of one bucket.

    `to_plain` / `from_plain` convert a key's state to plain data (`state.encoding`);
    `timer_of` says when a key's state next needs time to pass (None: never). `timers` holds
    that for every stored key that has one, `stored` how many entries the store holds, and
    `held` what the entries hold, per side, as `size_of` counts a state (rows, versions; both at
    most: Spark's TTL drops entries unseen); `flush` keeps them current.
    """

    def __init__(
        self,
        store: EntryStore,
        timers: dict[Any, int],
        to_plain: Callable[[Any], Any],
        from_plain: Callable[[Any], Any],
        timer_of: Callable[[Any], int | None],
        stored: int = 0,
        held: tuple[int, int] = (0, 0),
        size_of: Callable[[Any], tuple[int, int]] = unsized,
    ) -> None:
        self.store = store
        self.timers = timers
        self.stored = stored
        self.held = list(held)
        self.size_of = size_of
        self.sizes: dict[Any, tuple[int, int]] = {}  # key -> its size when read
        self.to_plain, self.from_plain, self.timer_of = to_plain, from_plain, timer_of
        self.read: dict[Any, tuple[bytes, bytes | None]] = {}  # key -> (key bytes, entry read)
        self.live: dict[Any, Any] = {}

    def _fetch(self, key: Any) -> None:
        if key not in self.read:
            name = dump_key(key)
            blob = self.store.get(name)
            self.read[key] = (name, blob)
            if blob is not None:
                self.live[key] = state = self.from_plain(load(blob))
                self.sizes[key] = self.size_of(state)

    def prefetch(self, keys: Iterable[Any]) -> None:
        """Read the keys a batch is about to use in one pass over the store's entries, if they
        are many for what it holds (`DENSE`); else each is read when first used."""
        wanted = {dump_key(key): key for key in set(keys) if key not in self.read}
        if not wanted or self.stored > DENSE * len(wanted):
            return
        for name, blob in self.store.items():
            key = wanted.pop(name, None)
            if key is not None:
                self.read[key] = (name, blob)
                self.live[key] = state = self.from_plain(load(blob))
                self.sizes[key] = self.size_of(state)
        for name, key in wanted.items():
            self.read[key] = (name, None)

    def get(self, key: Any, default: Any = None) -> Any:
        self._fetch(key)
        return self.live.get(key, default)

    def __setitem__(self, key: Any, state: Any) -> None:
        self._fetch(key)
        self.live[key] = state

    def __delitem__(self, key: Any) -> None:
        self._fetch(key)
        del self.live[key]

    def pop(self, key: Any, default: Any = None) -> Any:
        self._fetch(key)
        return self.live.pop(key, default)

    def flush(self) -> None:
        """Write back the keys whose state changed, remove the emptied ones, update `timers`."""
        for key, (name, before) in self.read.items():
            state = self.live.get(key)
            size = (0, 0) if state is None else self.size_of(state)
            was = self.sizes.get(key, (0, 0))
            self.held = [h + now - then for h, now, then in zip(self.held, size, was, strict=True)]
            timer = None if state is None else self.timer_of(state)
            if timer is None:
                self.timers.pop(key, None)
            else:
                self.timers[key] = timer
            if state is None:
                if before is not None:
                    self.store.remove(name)
                    self.stored = max(0, self.stored - 1)
                continue
            blob = dump(self.to_plain(state))
            if blob != before:
                self.store.put(name, blob)
                self.stored += before is None
        self.read.clear()
        self.live.clear()
        self.sizes.clear()


@dataclass
class KeyedBucket:
    """A bucket whose keys are entries of their own (`StoredKeys`), the rows that wait in the
    bucket's own value (a temporal join's probe rows: few, bounded by the watermark delay, and
    not worth an entry call each), and its engine timer."""

    keys: StoredKeys
    waiting: Waiting
    spark_timer: int | None = None

    def next_timer(self) -> int | None:
        return next_time(self.keys.timers, self.waiting)

    def due(self, now: int) -> list[Any]:
        return due_keys(self.keys.timers, self.waiting, now)
