"""Flink's time-interval join (`TimeIntervalJoin`) in plain Python, one key at a time.

Each side caches its rows by time, each with a "joined" flag. An arriving row joins the other
side's cached rows within its bounds, expiring while it iterates the ones the operator time has
left behind (null-padded if outer and never joined), and is cached only while the other side can
still produce a match; otherwise, unmatched and outer, it is emitted padded at once. Late rows
are not dropped: they meet whatever is still cached. Per-key cleanup timers expire the rest.

Flink keeps the two "expiration times" in fields of the operator instance, shared by the keys of
a subtask; here they are shared by the keys of a state bucket (`Bucket`), which is the same
thing when a key is alone in its subtask and is deterministic across restarts. Flink's fields
start at 0 and fall below it at the subtask's first row; a bucket's start below every time, so
that rows at or before 1970-01-01 00:00:00 join as in a subtask that has seen a row.

Early fire (Flink's `EARLY_FIRE('delay' = …)` hint, FLIP-497, an outer join only): an outer row
still unmatched `delay` after its time (in the join's time) is emitted padded then, once, not
when its interval closes; a match that comes later within the interval retracts it:

| an outer row, cached   | a match comes               | its interval closes, unmatched |
|------------------------|-----------------------------|--------------------------------|
| unmatched, not fired   | +I (row, match)             | +I (row, NULLs)                |
| fired early (padded)   | -U (row, NULLs), +U (row, match) | nothing more               |
| matched                | +I (row, match)             | nothing                        |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from state.changes import Change, Row, RowKind
from state.columns import Widenings
from state.store.encoding import dump, load

Cache = dict[int, list[list[Any]]]  # time -> [[row, joined], ...]
MAX_TIME = 2**63 - 1
MIN_TIME = -(2**63)
# a cached row's `joined`: 0 (False) never matched, 1 (True) matched, FIRED padded early
FIRED = 2


@dataclass
class KeyState:
    """One key's caches and its two cleanup timers (None: no timer).

    As in Flink, `left_timer` is registered by right rows and cleans the right cache, and
    `right_timer` the other way round.
    """

    left: Cache = field(default_factory=dict)
    right: Cache = field(default_factory=dict)
    left_timer: int | None = None
    right_timer: int | None = None
    early_timer: int | None = None  # the next early fire of an unmatched outer row

    def timers(self) -> list[int]:
        timers = (self.left_timer, self.right_timer, self.early_timer)
        return sorted({t for t in timers if t is not None})


def _rows(cache: Cache) -> int:
    return sum(len(rows) for rows in cache.values())


def _key_plain(state: KeyState) -> tuple:
    timers = (state.early_timer,) if state.early_timer is not None else ()
    return (state.left, state.right, state.left_timer, state.right_timer, *timers)


def _key_state(plain: tuple, widenings: Widenings) -> KeyState:
    """A key's state from plain data, each side's cached rows widened to its columns now
    (`state.columns.Widening`; None: as stored)."""
    state = KeyState(*plain)
    for widen, cache in zip(widenings, (state.left, state.right), strict=True):
        for entries in cache.values() if widen else ():
            for entry in entries:
                entry[0] = widen(entry[0])
    return state


# A key as its bucket stores it: its state's bytes, then what a visit needs of it without
# decoding them: its earliest timer and its cached rows per side.
StoredKey = tuple[bytes, int | None, int, int]


def _earliest(state: KeyState) -> int | None:
    earliest = None
    for timer in (state.left_timer, state.right_timer, state.early_timer):
        if timer is not None and (earliest is None or timer < earliest):
            earliest = timer
    return earliest


class Keys(MutableMapping[Any, KeyState]):
    """The keys of a bucket, each stored as bytes of its own beside its earliest timer and its
    rows' counts, and decoded only when a visit touches it (`live`).

    Live, a bucket holds every key of the last interval and watermark delay, and a micro-batch
    touches a few of them: the rest wait for their cleanup timers. Decoding and encoding every
    key at every visit cost the size of the state; here a visit decodes and encodes the keys
    its rows and due timers name, and finds the next timer and the rows held from what is
    stored beside the others (`docs/performance.md`)."""

    def __init__(
        self, stored: dict[Any, StoredKey] | None = None, widenings: Widenings = (None, None)
    ) -> None:
        self.stored = {} if stored is None else stored
        self.live: dict[Any, KeyState] = {}
        self.widenings = widenings

    @classmethod
    def of(cls, states: Mapping[Any, KeyState]) -> Keys:
        """Keys whose states are all decoded: written whole at the next encoding."""
        keys = cls()
        keys.live.update(states)
        return keys

    def get(self, key: Any, default: Any = None) -> Any:
        state = self.live.get(key)
        if state is not None:
            return state
        stored = self.stored.get(key)
        if stored is None:
            return default
        state = self.live[key] = _key_state(load(stored[0]), self.widenings)
        return state

    def __getitem__(self, key: Any) -> KeyState:
        state = self.get(key)
        if state is None:
            raise KeyError(key)
        return state

    def __setitem__(self, key: Any, state: KeyState) -> None:
        self.live[key] = state

    def __delitem__(self, key: Any) -> None:
        found, stored = self.live.pop(key, None), self.stored.pop(key, None)
        if found is None and stored is None:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self.live or key in self.stored

    def __iter__(self) -> Iterator[Any]:
        yield from self.live
        yield from (key for key in self.stored if key not in self.live)

    def __len__(self) -> int:
        return len(self.live) + sum(1 for key in self.stored if key not in self.live)

    def __bool__(self) -> bool:
        return bool(self.live) or bool(self.stored)

    def next_timer(self) -> int | None:
        # Every visit asks, and live most keys wait for their cleanup: their earliest timers
        # as stored, compared in line (a decoded key's stored timer may be stale: skipped).
        earliest, live = None, self.live
        for key, (_blob, timer, _lefts, _rights) in self.stored.items():
            if timer is not None and (earliest is None or timer < earliest) and key not in live:
                earliest = timer
        for state in live.values():
            timer = _earliest(state)
            if timer is not None and (earliest is None or timer < earliest):
                earliest = timer
        return earliest

    def due(self, now: int) -> list[tuple[int, Any]]:
        """Every key's timers at or before `now`, earliest first, as Flink fires them: the keys
        they are due on decoded."""
        live = self.live
        for key in [
            key
            for key, (_blob, timer, _lefts, _rights) in self.stored.items()
            if timer is not None and timer <= now and key not in live
        ]:
            self.get(key)
        due = []
        for key, state in live.items():
            timer = _earliest(state)
            if timer is not None and timer <= now:
                due.extend((t, key) for t in state.timers() if t <= now)
        due.sort()
        return due

    def rows(self, left: bool) -> int:
        """The rows one side's caches hold, over the keys."""
        live, at = self.live, 2 if left else 3
        stored = sum(entry[at] for key, entry in self.stored.items() if key not in live)
        return stored + sum(_rows(s.left if left else s.right) for s in live.values())

    def to_plain(self) -> dict[Any, StoredKey]:
        """The keys as stored: those decoded encoded again, the others as they were read."""
        stored = dict(self.stored)
        for key, s in self.live.items():
            stored[key] = (dump(_key_plain(s)), _earliest(s), _rows(s.left), _rows(s.right))
        return stored


@dataclass
class Bucket:
    """The keys of one state value and the expiration times they share."""

    keys: Keys = field(default_factory=Keys)
    left_expiration: int = MIN_TIME
    right_expiration: int = MIN_TIME
    spark_timer: int | None = None  # the pending engine timer, if any

    def __post_init__(self) -> None:
        if not isinstance(self.keys, Keys):  # states given decoded
            self.keys = Keys.of(self.keys)

    def next_timer(self) -> int | None:
        return self.keys.next_timer()


def cached_rows(bucket: Bucket, left: bool) -> int:
    """The rows one side's caches hold, over the bucket's keys."""
    return bucket.keys.rows(left)


# The plain form's fifth field: each key's state stored apart (`Keys`). A bucket of four fields
# was written before, each key's state decoded in it.
KEYS_APART = 2


def bucket_to_plain(bucket: Bucket) -> tuple:
    """A bucket as plain data (`state.store.encoding`)."""
    keys = bucket.keys.to_plain()
    return keys, bucket.left_expiration, bucket.right_expiration, bucket.spark_timer, KEYS_APART


def bucket_from_plain(plain: tuple, widenings: Widenings = (None, None)) -> Bucket:
    """A bucket from plain data, each side's cached rows widened to its columns now
    (`state.columns.Widening`; None: as stored) as its keys are decoded."""
    if len(plain) == 4:  # each key's state in the bucket's own plain form, all decoded
        states, left_expiration, right_expiration, spark_timer = plain
        keys = Keys.of({k: _key_state(state, widenings) for k, state in states.items()})
    else:
        stored, left_expiration, right_expiration, spark_timer, _form = plain
        keys = Keys(stored, widenings)
    return Bucket(keys, left_expiration, right_expiration, spark_timer)


class IntervalJoin:
    """`lower <= L.t - R.t <= upper`, for INNER, LEFT, RIGHT and FULL joins."""

    def __init__(
        self,
        kind: str,
        lower_ms: int,
        upper_ms: int,
        matches: Callable[[Row, Row], bool],
        min_cleanup_ms: int = 0,
        allowed_lateness_ms: int = 0,
        early_fire_ms: int | None = None,
    ) -> None:
        """`min_cleanup_ms` is Flink's `table.exec.interval-join.min-cleanup-interval` (0);
        `early_fire_ms`, the `EARLY_FIRE` hint's delay (None: none)."""
        self.left_outer = kind in ("left", "full")
        self.right_outer = kind in ("right", "full")
        self.left_size = -lower_ms
        self.right_size = upper_ms
        self.empty = lower_ms > upper_ms
        self.early_fire = early_fire_ms if kind != "inner" and not self.empty else None
        self.min_cleanup = max(0, min_cleanup_ms)
        self.lateness = allowed_lateness_ms
        self.matches = matches

    def _expiration(self, operator_time: int, size: int) -> int:
        if operator_time >= MAX_TIME:
            return MAX_TIME
        return operator_time - size - self.lateness - 1

    def _cleanup_time(self, row_time: int, left_row: bool) -> int:
        size = self.left_size if left_row else self.right_size
        return row_time + size + self.min_cleanup + self.lateness + 1

    def process(
        self, bucket: Bucket, key: Any, side: int, row: Row, row_time: int, operator_time: int
    ) -> list[Change]:
        """One arriving row (`side` 0 left, 1 right); `operator_time` is the watermark (>= 0).

        Bounds that admit no pair (lower > upper) join nothing: as in Flink, outer rows are
        padded at once and nothing is cached.
        """
        if self.empty:
            outer = self.left_outer if side == 0 else self.right_outer
            return [self._padded(side == 0, row)] if outer else []
        state = bucket.keys.get(key)
        if state is None:
            state = bucket.keys[key] = KeyState()
        left = side == 0
        own, other = (state.left, state.right) if left else (state.right, state.left)
        size_other = self.right_size if left else self.left_size
        lower = row_time - size_other
        upper = row_time + (self.left_size if left else self.right_size)
        pad_other = self._outer(not left)
        out: list[Change] = []
        emitted = False
        expiration = bucket.right_expiration if left else bucket.left_expiration
        if expiration < upper:
            expiration = self._expiration(operator_time, size_other)
            if left:
                bucket.right_expiration = expiration
            else:
                bucket.left_expiration = expiration
            for time in list(other):
                cached = other[time]
                if lower <= time <= upper:
                    for entry in cached:
                        pair = (row, entry[0]) if left else (entry[0], row)
                        if self.matches(*pair):
                            if entry[1] == FIRED:  # its early padded row, corrected
                                out.append(self._padded(not left, entry[0], RowKind.UPDATE_BEFORE))
                                out.append(Change(RowKind.UPDATE_AFTER, *pair))
                            else:
                                out.append(Change(RowKind.INSERT, *pair))
                            emitted = True
                            entry[1] = 1 if pad_other else entry[1]
                if time <= expiration:
                    if pad_other:
                        out.extend(self._padded(not left, e[0]) for e in cached if not e[1])
                    del other[time]
        if operator_time < upper:
            same_time = own.get(row_time)
            if same_time is None:
                own[row_time] = [[row, emitted]]
            else:
                same_time.append([row, emitted])
            if left and state.right_timer is None:
                state.right_timer = self._cleanup_time(row_time, True)
            elif not left and state.left_timer is None:
                state.left_timer = self._cleanup_time(row_time, False)
            if self.early_fire is not None and not emitted and self._outer(left):
                fire = row_time + self.early_fire
                state.early_timer = (
                    fire if state.early_timer is None else min(fire, state.early_timer)
                )
        elif not emitted and self._outer(left):
            out.append(self._padded(left, row))
        self._forget_if_empty(bucket, key)
        return out

    def on_timer(
        self, bucket: Bucket, key: Any, timestamp: int, operator_time: int
    ) -> list[Change]:
        """A cleanup timer of `key` at `timestamp` fired at `operator_time`."""
        state = bucket.keys.get(key)
        out: list[Change] = []
        if state is None:
            return out
        if state.left_timer == timestamp:
            bucket.right_expiration = self._expiration(operator_time, self.right_size)
            out += self._remove_expired(state, bucket.right_expiration, left=False)
        if state.right_timer == timestamp:
            bucket.left_expiration = self._expiration(operator_time, self.left_size)
            out += self._remove_expired(state, bucket.left_expiration, left=True)
        if state.early_timer is not None and state.early_timer <= operator_time:
            out += self._fire_early(state, operator_time)
        self._forget_if_empty(bucket, key)
        return out

    def _outer(self, left: bool) -> bool:
        return self.left_outer if left else self.right_outer

    def _fire_early(self, state: KeyState, operator_time: int) -> list[Change]:
        """The unmatched outer rows `delay` old at `operator_time`, padded, each once; the
        key's next early fire set to the next such row's."""
        assert self.early_fire is not None
        out: list[Change] = []
        due = operator_time - self.early_fire
        following: int | None = None
        for left, cache in ((True, state.left), (False, state.right)):
            if not self._outer(left):
                continue
            for time, entries in cache.items():
                for entry in entries:
                    if entry[1]:
                        continue
                    if time <= due:
                        out.append(self._padded(left, entry[0]))
                        entry[1] = FIRED
                    elif following is None or time < following:
                        following = time
        state.early_timer = None if following is None else following + self.early_fire
        return out

    def fire_due(self, bucket: Bucket, operator_time: int) -> list[Change]:
        """Every key's cleanup timers at or before `operator_time`, as Flink fires them."""
        out: list[Change] = []
        for timestamp, key in bucket.keys.due(operator_time):
            out += self.on_timer(bucket, key, timestamp, operator_time)
        return out

    def _remove_expired(self, state: KeyState, expiration: int, left: bool) -> list[Change]:
        cache = state.left if left else state.right
        pad = self._outer(left)
        out: list[Change] = []
        earliest = -1
        for time in list(cache):
            if time <= expiration:
                if pad:
                    out.extend(self._padded(left, e[0]) for e in cache[time] if not e[1])
                del cache[time]
            elif time < earliest or earliest < 0:
                earliest = time
        timer = "right_timer" if left else "left_timer"
        if earliest > 0:
            setattr(state, timer, self._cleanup_time(earliest, left))
        else:  # as in Flink, also when the rows left have times <= 0
            setattr(state, timer, None)
            cache.clear()
        return out

    @staticmethod
    def _padded(left: bool, row: Row, kind: str = RowKind.INSERT) -> Change:
        return Change(kind, row) if left else Change(kind, None, row)

    @staticmethod
    def _forget_if_empty(bucket: Bucket, key: Any) -> None:
        state = bucket.keys[key]
        if not state.left and not state.right and not state.timers():
            del bucket.keys[key]
