"""Flink's temporal table joins in plain Python, one key at a time.

Event time (`TemporalRowTimeJoinOperator`): probe rows wait in state until the watermark passes
their time; then, in arrival order, each joins the version of its key valid at its time, the
latest version at or before it, unless that version is a deletion (the row was deleted then).
Versions are kept by time (a later change at the same time replaces an earlier one); once the
watermark passes, all but the last version at or before it are dropped. A key is visited when
the watermark passes its earliest waiting probe row, or its second version (one version has
nothing to trim). Probe rows wait in their bucket's own value, versions in their key's entry
(`state.store.keyed_state`): a probe row costs no state call until it is due.

Processing time (`TemporalProcessTimeJoinOperator`): the build side is a map key -> latest row
(the seed's "HashMap"); a probe row joins what is there when it arrives.

| build (versioned) change | what it does                                                    |
|--------------------------|-----------------------------------------------------------------|
| +I, +U at t              | the row is the key's version from t on                          |
| -U                       | nothing: Flink drops update-befores before the join, so a version |
|                          | stays valid until the next +U or -D (a -U carries the old row's |
|                          | time when the time is a column: it would delete the old version |
|                          | from its own start)                                             |
| -D at t                  | from t on the key has no version                                |
| -D without a time        | the same at the time of the key's last row (an upsert tombstone |
|                          | has only the key), nothing if the key has none                  |

The versioned table needs no changelog normalizer in front of it (Flink's `ChangelogNormalize`):
an upsert or a Debezium record is itself the next version, and a delete needs only the key and
the time of the key's last row, which the key's state keeps (`last`). What the normalizer
would change does not change a version: it drops an update equal to the last row (the same
version again), turns an upsert into -U/+U (the -U is dropped here) and passes a delete on
only for a key it holds, at that row's time unless the delete has its own.

| probe change (any kind)  | output                                                          |
|--------------------------|-----------------------------------------------------------------|
| k, matched at its time   | k [probe, version]                                              |
| k, no match              | LEFT: k [probe, NULLs]; INNER: nothing                          |

A changelog probe input (an orders table from CDC) thus retracts what its old row joined: Flink's
operators set the output's kind to the probe row's.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from state.changes import Change, Row, RowKind
from state.columns import Widening
from state.store.keyed_state import Waiting, due_keys, next_time


@dataclass
class VersionedKey:
    """One key's versions time -> (op, row), and when time passing may trim them (None:
    never, while it has one version)."""

    versions: dict[int, tuple[str, Row]] = field(default_factory=dict)
    timer: int | None = None
    last: int | None = None  # the time of the key's last row in arrival order; None: deleted


def key_to_plain(state: VersionedKey) -> tuple:
    """A key's state as plain data (`state.store.encoding`)."""
    return state.versions, state.timer, state.last


def key_from_plain(plain: tuple, widen: Widening | None = None) -> VersionedKey:
    """A key's state from plain data, its versions widened to the table's columns now
    (`state.columns.Widening`; None: as stored); a key stored before `last` was kept behind a
    normalizer, which tells every delete its time."""
    state = VersionedKey(*plain)
    if widen is not None:
        state.versions = {t: (op, widen(row)) for t, (op, row) in state.versions.items()}
    return state


def widen_waiting(waiting: Waiting, widen: Widening) -> None:
    """The probe rows that wait, widened in place to the probe input's columns now."""
    for key, rows in waiting.items():
        waiting[key] = [(seq, time, widen(row), *rest) for seq, time, row, *rest in rows]


def key_timer(state: VersionedKey) -> int | None:
    return state.timer


def key_size(state: VersionedKey) -> tuple[int, int]:
    """What a key holds, per side: versions of the table (the right side)."""
    return 0, len(state.versions)


class KeysInMemory(dict[Any, Any]):
    """The keys' states in memory (versions, or a latest row); `peek` reads one without taking
    it to change, as `state.store.keyed_state.StoredKeys.peek` does."""

    def peek(self, key: Any, default: Any = None) -> Any:
        return self.get(key, default)


@dataclass
class VersionedBucket:
    """The keys of one bucket, in memory: their versions, and the probe rows that wait."""

    keys: KeysInMemory = field(default_factory=KeysInMemory)
    waiting: Waiting = field(default_factory=dict)
    spark_timer: int | None = None  # the pending engine timer, if any

    def _trims(self) -> dict[Any, int]:
        return {k: s.timer for k, s in self.keys.items() if s.timer is not None}

    def next_timer(self) -> int | None:
        return next_time(self._trims(), self.waiting)

    def due(self, now: int) -> list[Any]:
        """The keys with a probe row or a trim at or before `now`."""
        return due_keys(self._trims(), self.waiting, now)


class EventTimeTemporalJoin:
    """`L JOIN R FOR SYSTEM_TIME AS OF L.t`, INNER or LEFT; `normalized`: the versioned table
    comes through a changelog normalizer (a checkpoint made before it needed none)."""

    def __init__(
        self, kind: str, matches: Callable[[Row, Row], bool], normalized: bool = False
    ) -> None:
        self.left_outer = kind == "left"
        self.matches = matches
        self.normalized = normalized

    def _state(self, bucket: VersionedBucket, key: Any) -> VersionedKey:
        state = bucket.keys.get(key)
        if state is None:
            state = bucket.keys[key] = VersionedKey()
        return state

    @staticmethod
    def _timer_at(state: VersionedKey, time: int) -> None:
        if state.timer is None or time < state.timer:
            state.timer = time

    @staticmethod
    def probe(
        bucket: VersionedBucket, key: Any, seq: int, time: int, row: Row, op: str = RowKind.INSERT
    ) -> None:
        """A probe row waits, without reading its key's versions, until the watermark passes."""
        bucket.waiting.setdefault(key, []).append((seq, time, row, op))

    def version(
        self, bucket: VersionedBucket, key: Any, op: str, time: int | None, row: Row
    ) -> None:
        if op == RowKind.UPDATE_BEFORE:
            return
        if op in RowKind.ACCUMULATE or self.normalized:  # a normalizer times every delete
            state = self._state(bucket, key)
            state.last = time if op in RowKind.ACCUMULATE else None
        else:
            state = bucket.keys.get(key)
            if state is None or state.last is None:
                return  # a delete of a key without a row: nothing to delete
            time, state.last = (state.last if time is None else time), None
        state.versions[time] = (op, row)  # type: ignore[index]
        if len(state.versions) > 1:
            # Time passing trims versions, and with one version there is nothing to trim: a
            # table loaded ahead of the watermark leaves no key waiting for time.
            self._timer_at(state, sorted(state.versions)[1])

    def fire_due(
        self, bucket: VersionedBucket, watermark: int, due_keys: list[Any] | None = None
    ) -> list[Change]:
        """Every key whose timer the watermark reached (`due_keys`, if the caller found them
        already): emit its due probe rows, trim versions. A key's versions are written back
        only if the trim changed them."""
        out: list[Change] = []
        for key in bucket.due(watermark) if due_keys is None else due_keys:
            waiting = bucket.waiting.pop(key, [])
            later = [p for p in waiting if p[1] > watermark]
            if later:
                bucket.waiting[key] = later
            state = bucket.keys.peek(key)
            due = sorted((p for p in waiting if p[1] <= watermark), key=lambda p: p[0])
            out += self._emit(due, state.versions if state is not None else {})
            if state is None:
                continue
            trimmed = self._trim(state, watermark)
            if not state.versions:
                del bucket.keys[key]
            elif trimmed:
                bucket.keys[key] = state
        return out

    def _emit(self, due: list[tuple], versions: dict[int, tuple[str, Row]]) -> list[Change]:
        """Due probe rows in arrival order, each joined with the version of its time."""
        times = sorted(versions)
        out: list[Change] = []
        for _seq, time, row, op in due:
            at = bisect_right(times, time) - 1
            version = versions[times[at]] if at >= 0 else None
            if (
                version is not None
                and version[0] in RowKind.ACCUMULATE
                and self.matches(row, version[1])
            ):
                out.append(Change(op, row, version[1]))
            elif self.left_outer:
                out.append(Change(op, row))
        return out

    @staticmethod
    def _trim(state: VersionedKey, watermark: int) -> bool:
        """Keep the version valid at the watermark and the later ones; as in Flink, a key's
        versions wait for no further time until another row of the key comes. Whether that
        changed the key's state."""
        changed = state.timer is not None
        if len(state.versions) > 1:
            times = sorted(state.versions)
            keep_from = max(bisect_right(times, watermark) - 1, 0)
            for time in times[:keep_from]:
                del state.versions[time]
            changed = changed or keep_from > 0
        state.timer = None
        return changed


class ProcessingTimeTemporalJoin:
    """`L JOIN R FOR SYSTEM_TIME AS OF L.proctime`: the latest row of each key, INNER or LEFT."""

    def __init__(self, kind: str, matches: Callable[[Row, Row], bool]) -> None:
        self.left_outer = kind == "left"
        self.matches = matches

    def probe(
        self, latest: KeysInMemory, key: Any, row: Row, op: str = RowKind.INSERT
    ) -> list[Change]:
        """A probe row joins its key's latest row, which it only reads."""
        version = latest.peek(key)
        if version is not None and self.matches(row, version):
            return [Change(op, row, version)]
        return [Change(op, row)] if self.left_outer else []

    @staticmethod
    def version(latest: KeysInMemory, key: Any, op: str, row: Row) -> None:
        if op in RowKind.ACCUMULATE:
            latest[key] = row
        elif op != RowKind.UPDATE_BEFORE:
            latest.pop(key, None)
