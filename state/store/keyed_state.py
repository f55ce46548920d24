"""A bucket's keys kept one store entry each: read when a key is first used, written if changed.

A join that keeps one value per bucket rewrites every key of a bucket whenever one changes, so
a micro-batch costs the whole state once it touches every bucket (a temporal join over a large
table slowed with every batch). Here each key is its own entry (a `MapState` entry of its bucket
in Spark): a micro-batch reads the keys its rows and due timers name, and writes back those
whose bytes changed. Each entry costs a state call, a socket round trip to the JVM, so this
layout suits state much larger than what a batch touches; the interval join, whose state the
interval bounds and a batch mostly touches, keeps whole buckets (`docs/performance.md` has the
measures).

What a bucket needs across its keys is one small value of its own: the keys with a pending
timer and when, and the rows that wait there for time (a temporal join's probe rows, bounded by
the watermark delay: not worth an entry call each; many of them parked in an entry of their
own, `state.store.parked`). Only what waits for time is in it, not every key with state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from state.store.encoding import dump, dump_entry, dump_key, load_entry
from state.store.key_filter import KeyFilter
from state.store.parked import Parked, Waiting, earliest, unpark_due


def as_is(value: Any) -> Any:
    """The plain form of a state that is plain data already (a row and its time)."""
    return value


def never(_state: Any) -> None:
    """The timer of a state that never waits for time."""


def unsized(_state: Any) -> tuple[int, int]:
    """The size of a state whose rows nobody counts (per side: none)."""
    return 0, 0


def next_time(timers: dict[Any, int], waiting: Waiting) -> int | None:
    """The earliest of the keys' timers and the waiting rows' times."""
    times = [*timers.values(), *(row[1] for rows in waiting.values() for row in rows)]
    return min(times, default=None)


def due_keys(timers: dict[Any, int], waiting: Waiting, now: int) -> list[Any]:
    """The keys with a timer or a waiting row at or before `now`, earliest first."""
    due = {k: t for k, t in timers.items() if t <= now}
    # a scan of every waiting key, several times a visit: most keys wait with one row
    for key, rows in waiting.items():
        time = rows[0][1] if len(rows) == 1 else min([row[1] for row in rows])
        if time <= now:
            was = due.get(key)
            due[key] = time if was is None or time < was else was
    return sorted(due, key=due.__getitem__)


# A batch reads every entry of its bucket in one pass, instead of its keys one call each, when
# the bucket holds at most this many entries per key the batch touches. Spark streams a
# `MapState`'s entries to Python, but not cheaply: an entry streamed costs about half a
# `getValue` (`docs/performance.md`), so only a pass over few more entries than the batch wants
# pays; into an empty bucket it saves every call.
DENSE = 1.5


class EntryStore(Protocol):
    """Where a bucket's entries live: a `MapState` of bytes -> bytes in Spark. `get_many` and
    `write_many` cost one round trip for many entries, where `get`, `put` and `remove` cost
    one each."""

    def get(self, key: bytes) -> bytes | None: ...

    def recall(self, keys: list[bytes]) -> dict[bytes, bytes | None]:
        """Those of `keys` known without a call (a warm copy's, `state.store.warm`)."""
        ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def write_many(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None: ...

    def items(self) -> Iterator[tuple[bytes, bytes]]: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def remove(self, key: bytes) -> None: ...


Ledger = dict[Any, list[int]]  # expiry (ms, None: never) -> [entries, left rows, right rows]


def ledger_slot(expires_ms: int, ttl_ms: int) -> int:
    """An entry's expiry rounded up to a 64th of the TTL (at least a second): a bucket's ledger
    keeps a few dozen counts, not one per entry."""
    width = max(1000, ttl_ms // 64)
    return -(-expires_ms // width) * width


def held_by_expiry(ledger: Ledger, side: int) -> tuple[tuple[int | None, int], ...]:
    """One side's rows in a ledger, by when Spark drops the entries holding them."""
    return tuple(
        (expires, c[side + 1]) for expires, c in ledger.items() if side + 1 < len(c) and c[side + 1]
    )


class StoredKeys:
    """A mapping key -> state over an `EntryStore`, for one micro-batch of one bucket.

    `to_plain` / `from_plain` convert a key's state to plain data (`state.store.encoding`);
    `timer_of` says when a key's state next needs time to pass (None: never). `timers` holds
    that for every stored key that has one; `flush` keeps it current.

    With `ttl_ms`, Spark drops an entry not written for that long (`state.store.retention`), without
    telling anyone: so each entry is stored with the time it goes, and the `ledger` counts the
    entries, and what they hold per side as `size_of` counts a state (rows, versions), by that
    time. What the store holds at any moment is then the ledger's counts still ahead of it
    (`stored`, `held`), with no scan of the entries.

    `known`, when given, holds every name the store was written under since it was empty
    (`state.store.key_filter`): a key it says was never written is absent without a call, and
    `flush` adds the names it writes; it is dropped (None) once full.

    `scannable` False: the store holds entries other than the keys' that a pass over it would
    stream too, large ones (parked rows, `state.store.parked`): keys are read by name only.
    """

    def __init__(
        self,
        store: EntryStore,
        timers: dict[Any, int],
        to_plain: Callable[[Any], Any],
        from_plain: Callable[[Any], Any],
        timer_of: Callable[[Any], int | None],
        ledger: Ledger | None = None,
        size_of: Callable[[Any], tuple[int, ...]] = unsized,
        ttl_ms: int | None = None,
        now: int = 0,
        known: KeyFilter | None = None,
        scannable: bool = True,
    ) -> None:
        self.store = store
        self.known = known
        self.scannable = scannable
        self.timers = timers
        self.ttl_ms, self.now = ttl_ms, now
        self.ledger = {e: c for e, c in (ledger or {}).items() if e is None or e > now}
        self.size_of = size_of
        self.to_plain, self.from_plain, self.timer_of = to_plain, from_plain, timer_of
        # key -> (key bytes, its state's bytes as read, its expiry, its size)
        self.read: dict[Any, tuple[bytes, bytes | None, int | None, tuple[int, ...]]] = {}
        self.live: dict[Any, Any] = {}
        # keys set, removed or handed out to change (`get`): `flush` compares only their bytes
        self.changed: set[Any] = set()

    @property
    def stored(self) -> int:
        """The entries the store holds."""
        return sum(counts[0] for counts in self.ledger.values())

    @property
    def held(self) -> tuple[int, ...]:
        """What the entries hold, per side (two, or as many as `size_of` counts)."""
        width = max((len(c) for c in self.ledger.values()), default=3)
        return tuple(sum(c[i] for c in self.ledger.values() if i < len(c)) for i in range(1, width))

    def _count(self, expires: int | None, size: tuple[int, ...], sign: int) -> None:
        counts = self.ledger.setdefault(expires, [0, 0, 0])
        counts.extend([0] * (1 + len(size) - len(counts)))
        counts[0] += sign
        for side, rows in enumerate(size, start=1):
            counts[side] += sign * rows
        if not any(counts):
            del self.ledger[expires]

    def _found(self, key: Any, name: bytes, blob: bytes | None) -> None:
        """Take in an entry as read; one whose time has come is gone, whatever the store said."""
        if blob is not None:
            expires, plain, body = load_entry(blob)
            if expires is None or expires > self.now:
                self.live[key] = state = self.from_plain(plain)
                # what `flush` compares the state's bytes with: an entry from before states
                # were nested, whole, never equal to them (its first write nests it)
                stored = blob if body is None else body
                self.read[key] = (name, stored, expires, self.size_of(state))
                return
        self.read[key] = (name, None, None, (0, 0))

    def _absent(self, name: bytes) -> bool:
        """The store certainly has no entry `name` (`known` says it was never written)."""
        return self.known is not None and not self.known.might_hold(name)

    def _fetch(self, key: Any) -> None:
        if key not in self.read:
            name = dump_key(key)
            self._found(key, name, None if self._absent(name) else self.store.get(name))

    def prefetch(self, keys: Iterable[Any]) -> None:
        """Read the keys a batch is about to use: in one pass over the store's entries if they
        are many for what it holds (`DENSE`), else all at once (`get_many`)."""
        wanted = {dump_key(key): key for key in set(keys) if key not in self.read}
        if self.known is not None:
            names = list(wanted)
            for name, held in zip(names, self.known.might_hold_each(names), strict=True):
                if not held:
                    self._found(wanted.pop(name), name, None)
        for name, blob in self.store.recall(list(wanted)).items():
            self._found(wanted.pop(name), name, blob)
        if not wanted:
            return
        if not self.scannable or self.stored > DENSE * len(wanted):
            names = list(wanted)
            for name, blob in zip(names, self.store.get_many(names), strict=True):
                self._found(wanted[name], name, blob)
            return
        for name, blob in self.store.items():
            key = wanted.pop(name, None)
            if key is not None:
                self._found(key, name, blob)
        for name, key in wanted.items():
            self._found(key, name, None)

    def get(self, key: Any, default: Any = None) -> Any:
        """A key's state, which the caller may change in place: `flush` writes it back if its
        bytes changed."""
        self._fetch(key)
        self.changed.add(key)
        return self.live.get(key, default)

    def peek(self, key: Any, default: Any = None) -> Any:
        """A key's state to read only: `flush` writes it back only if it is set again. A visit
        reads many keys it leaves as they were (a temporal join's versions, as of its due rows),
        each of which `flush` would otherwise encode again to find it unchanged."""
        self._fetch(key)
        return self.live.get(key, default)

    def __setitem__(self, key: Any, state: Any) -> None:
        self._fetch(key)
        self.changed.add(key)
        self.live[key] = state

    def __delitem__(self, key: Any) -> None:
        self._fetch(key)
        self.changed.add(key)
        del self.live[key]

    def pop(self, key: Any, default: Any = None) -> Any:
        self._fetch(key)
        self.changed.add(key)
        return self.live.pop(key, default)

    def flush(
        self, puts: list[tuple[bytes, bytes]] | None = None, removes: list[bytes] | None = None
    ) -> None:
        """Write back the keys whose state changed, remove the emptied ones, update `timers` and
        the ledger; with them, in the same call, the bucket's other entries `puts` and
        `removes` (parked rows, `state.store.parked`)."""
        expires = None if self.ttl_ms is None else ledger_slot(self.now + self.ttl_ms, self.ttl_ms)
        puts = list(puts or [])
        removes = list(removes or [])
        new_names: list[bytes] = []
        changed = self.changed
        for key, (name, before, was_expiring, was) in self.read.items():
            if key not in changed:
                continue  # read only: as stored, its timer as it was
            state = self.live.get(key)
            timer = None if state is None else self.timer_of(state)
            if timer is None:
                self.timers.pop(key, None)
            else:
                self.timers[key] = timer
            if state is None:
                if before is not None:
                    removes.append(name)
                    self._count(was_expiring, was, -1)
                continue
            body = dump(self.to_plain(state))
            if body == before:
                continue  # unchanged: not written, so its expiry stays as it was
            puts.append((name, dump_entry(expires, body)))
            if before is not None:
                self._count(was_expiring, was, -1)
            else:
                new_names.append(name)
            self._count(expires, self.size_of(state), 1)
        if self.known is not None and not self.known.add_all(new_names):
            self.known = None
        if puts or removes:
            self.store.write_many(puts, removes)
        self.read.clear()
        self.live.clear()
        changed.clear()


@dataclass
class KeyedBucket:
    """A bucket whose keys are entries of their own (`StoredKeys`), the rows that wait for time
    (a temporal join's probe rows, bounded by the watermark delay, not worth an entry call
    each): in the bucket's own value (`waiting`) or parked a visit's at a time in entries of
    their own (`parked`, `state.store.parked`), and its engine timer; `token` the one its
    entries were last written with (`state.store.warm`)."""

    keys: StoredKeys
    waiting: Waiting
    spark_timer: int | None = None
    token: bytes | None = None
    parked: list[Parked] = field(default_factory=list)
    unparked: list[bytes] = field(default_factory=list)  # parked entries taken, to remove
    pages: EntryStore | None = None  # where its keys' pages are (`state.joins.pages`), if any

    @property
    def rows_waiting(self) -> int:
        return sum(map(len, self.waiting.values())) + sum(rows for *_, rows in self.parked)

    def next_timer(self) -> int | None:
        times = (next_time(self.keys.timers, self.waiting), earliest(self.parked))
        return min((time for time in times if time is not None), default=None)

    def due(self, now: int) -> list[Any]:
        """The keys due at `now`, earliest first, the parked rows due among `waiting` now."""
        if self.parked:
            self.unparked += unpark_due(self.keys.store, self.parked, self.waiting, now)
        return due_keys(self.keys.timers, self.waiting, now)
