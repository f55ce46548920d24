"""Flink's temporal table joins in plain Python, one key at a time.

Event time (`TemporalRowTimeJoinOperator`): probe rows wait in state until the watermark passes
their time; then, in arrival order, each joins the version of its key valid at its time, the
latest version at or before it, unless that version is a deletion (the row was deleted then).
Versions are kept by time (a later change at the same time replaces an earlier one); once the
watermark passes, all but the last version at or before it are dropped. One timer per key, at
the earliest time still waiting, drives both.

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

from state.interval_join import Row

ACCUMULATE = ("+I", "+U")
UPDATE_BEFORE = "-U"
Joined = tuple[str, Row, Row | None]  # an output change: kind, probe row, version (None: NULLs)


@dataclass
class VersionedKey:
    """One key's waiting probe rows (seq, time, row, op), its versions time -> (op, row), its
    timer."""

    probes: list[tuple] = field(default_factory=list)
    versions: dict[int, tuple[str, Row]] = field(default_factory=dict)
    timer: int | None = None

    def timers(self) -> list[int]:
        return [] if self.timer is None else [self.timer]


def key_to_plain(state: VersionedKey) -> tuple:
    """A key's state as plain data (`state.encoding`)."""
    return state.probes, state.versions, state.timer


def key_from_plain(plain: tuple) -> VersionedKey:
    probes, versions, timer = plain
    return VersionedKey(probes, versions, timer)


def key_timer(state: VersionedKey) -> int | None:
    return state.timer


@dataclass
class VersionedBucket:
    """The keys of one state value."""

    keys: dict[Any, VersionedKey] = field(default_factory=dict)
    spark_timer: int | None = None  # the pending engine timer, if any

    def next_timer(self) -> int | None:
        return min((s.timer for s in self.keys.values() if s.timer is not None), default=None)

    def due(self, now: int) -> list[Any]:
        """The keys whose timer is at or before `now`."""
        return [k for k, s in self.keys.items() if s.timer is not None and s.timer <= now]


class EventTimeTemporalJoin:
    """`L JOIN R FOR SYSTEM_TIME AS OF L.t`, INNER or LEFT."""

    def __init__(self, kind: str, matches: Callable[[Row, Row], bool]) -> None:
        self.left_outer = kind == "left"
        self.matches = matches

    def _state(self, bucket: VersionedBucket, key: Any) -> VersionedKey:
        state = bucket.keys.get(key)
        if state is None:
            state = bucket.keys[key] = VersionedKey()
        return state

    @staticmethod
    def _timer_at(state: VersionedKey, time: int) -> None:
        if state.timer is None or time < state.timer:
            state.timer = time

    def probe(
        self, bucket: VersionedBucket, key: Any, seq: int, time: int, row: Row, op: str = "+I"
    ) -> None:
        state = self._state(bucket, key)
        state.probes.append((seq, time, row, op))
        self._timer_at(state, time)

    def version(self, bucket: VersionedBucket, key: Any, op: str, time: int, row: Row) -> None:
        if op == UPDATE_BEFORE:
            return
        state = self._state(bucket, key)
        state.versions[time] = (op, row)
        if len(state.versions) > 1:
            # Time passing trims versions, and with one version there is nothing to trim: a
            # table loaded ahead of the watermark leaves no key waiting for time.
            self._timer_at(state, sorted(state.versions)[1])

    def fire_due(self, bucket: VersionedBucket, watermark: int) -> list[Joined]:
        """Every key whose timer the watermark reached: emit its due probe rows, trim versions."""
        out: list[Joined] = []
        for key in bucket.due(watermark):
            state = bucket.keys[key]
            out += self._emit_and_clean(state, watermark)
            if not state.probes and not state.versions:
                del bucket.keys[key]
        return out

    def _emit_and_clean(self, state: VersionedKey, watermark: int) -> list[Joined]:
        times = sorted(state.versions)
        due = sorted((p for p in state.probes if p[1] <= watermark), key=lambda p: p[0])
        state.probes = [p for p in state.probes if p[1] > watermark]
        out: list[Joined] = []
        for probe in due:
            time, row = probe[1], probe[2]
            op = probe[3] if len(probe) > 3 else "+I"  # checkpoints from before probe kinds
            at = bisect_right(times, time) - 1
            version = state.versions[times[at]] if at >= 0 else None
            if version is not None and version[0] in ACCUMULATE and self.matches(row, version[1]):
                out.append((op, row, version[1]))
            elif self.left_outer:
                out.append((op, row, None))
        keep_from = max(bisect_right(times, watermark) - 1, 0)
        for time in times[:keep_from]:
            del state.versions[time]
        state.timer = min((p[1] for p in state.probes), default=None)
        return out


class ProcessingTimeTemporalJoin:
    """`L JOIN R FOR SYSTEM_TIME AS OF L.proctime`: the latest row of each key, INNER or LEFT."""

    def __init__(self, kind: str, matches: Callable[[Row, Row], bool]) -> None:
        self.left_outer = kind == "left"
        self.matches = matches

    def probe(self, latest: dict[Any, Row], key: Any, row: Row, op: str = "+I") -> list[Joined]:
        version = latest.get(key)
        if version is not None and self.matches(row, version):
            return [(op, row, version)]
        return [(op, row, None)] if self.left_outer else []

    @staticmethod
    def version(latest: dict[Any, Row], key: Any, op: str, row: Row) -> None:
        if op in ACCUMULATE:
            latest[key] = row
        elif op != UPDATE_BEFORE:
            latest.pop(key, None)
