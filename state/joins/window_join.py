"""Flink's window join (`WindowJoinOperator`) in plain Python, one key at a time.

Both inputs come through the same windowing table function (TUMBLE, HOP or CUMULATE), which
gives each row its window's `window_start`, `window_end` and `window_time` (a HOP or CUMULATE
row once per window that holds it); the condition equates both sides' window starts and ends, so
a key is a window too. Each side's rows of a key wait until the watermark passes the window's
end; then the window is joined once, its result emitted, its rows dropped. Rows arrive insert
only, and the result is append only.

A row whose window has fired (the watermark at or past its end - 1) is late and dropped, as
Flink drops it; the frame counts it (`late`).

A side may be a window aggregate first (`GROUP BY cols, window_start, window_end` with no
aggregate function, as Nexmark's q8 writes it): its rows are then the distinct values of those
columns in the window, which is what Flink's window aggregate emits as the window fires and its
window join then joins in the same firing.

| kind  | emitted when the window fires                                                  |
|-------|--------------------------------------------------------------------------------|
| INNER | each matching (left, right)                                                    |
| LEFT  | each matching pair; each left row without one, padded                          |
| RIGHT | each matching pair; each right row without one, padded                         |
| FULL  | each matching pair; each row of either side without one, padded                |
| SEMI  | each left row with a match                                                     |
| ANTI  | each left row without one                                                      |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from state.changes import Change, Row, RowKind
from state.columns import Widening, Widenings

# A key's rows by the end of their window (epoch ms): (left rows, right rows)
Windows = dict[int, tuple[list[Row], list[Row]]]


@dataclass
class Bucket:
    """The keys of one state value, each with its windows' rows."""

    keys: dict[Any, Windows] = field(default_factory=dict)
    spark_timer: int | None = None  # the pending engine timer, if any

    def next_timer(self) -> int | None:
        """When the earliest window fires: at its end - 1, as Flink's window timers."""
        ends = [end for windows in self.keys.values() for end in windows]
        return min(ends) - 1 if ends else None


def bucket_to_plain(bucket: Bucket) -> tuple:
    """A bucket as plain data (`state.store.encoding`)."""
    return bucket.keys, bucket.spark_timer


def bucket_from_plain(plain: tuple, widenings: Widenings = (None, None)) -> Bucket:
    """A bucket from plain data, each side's rows widened to its columns now
    (`state.columns.Widening`; None: as stored)."""
    keys, spark_timer = plain
    left, right = widenings
    return Bucket(
        {
            k: {end: (_widened(rows[0], left), _widened(rows[1], right)) for end, rows in w.items()}
            for k, w in keys.items()
        },
        spark_timer,
    )


def _widened(rows: list[Row], widen: Widening | None) -> list[Row]:
    return [widen(row) for row in rows] if widen else rows


def held_rows(bucket: Bucket, side: int) -> int:
    """The rows of one side (0 left, 1 right) the bucket's windows hold."""
    return sum(len(rows[side]) for windows in bucket.keys.values() for rows in windows.values())


class WindowJoin:
    """INNER, LEFT, RIGHT, FULL, SEMI and ANTI joins of windows."""

    def __init__(
        self,
        kind: str,
        matches: Callable[[Row, Row], bool],
        ends: tuple[int, int],
        distinct: tuple[tuple[int, ...] | None, tuple[int, ...] | None] = (None, None),
    ) -> None:
        """`ends`: the position of `window_end` in a left and in a right row (its value in
        epoch microseconds, as the frame gives timestamps); `distinct`: for a side that is a
        window aggregate, the positions of its grouping columns (None: every row)."""
        self.kind = kind
        self.matches = matches
        self.ends = ends
        self.distinct = distinct

    def window_end(self, side: int, row: Row) -> int:
        """The end of a row's window, epoch ms."""
        return row[self.ends[side]] // 1000

    @staticmethod
    def fired(window_end: int, watermark: int) -> bool:
        """Whether a window with this end has fired at `watermark` (Flink's `isWindowFired`)."""
        return window_end - 1 <= watermark

    def add(self, bucket: Bucket, key: Any, side: int, row: Row) -> None:
        """A row of a window yet to fire, kept until it does."""
        windows = bucket.keys.setdefault(key, {})
        rows = windows.setdefault(self.window_end(side, row), ([], []))
        rows[side].append(row)

    def fire_due(self, bucket: Bucket, watermark: int) -> list[Change]:
        """Every window of the bucket that the watermark passed, joined in the order of their
        ends, and dropped."""
        due = sorted(
            (end, n, key)
            for n, (key, windows) in enumerate(bucket.keys.items())
            for end in windows
            if self.fired(end, watermark)
        )
        out: list[Change] = []
        for end, _, key in due:
            windows = bucket.keys[key]
            lefts, rights = windows.pop(end)
            out += self.joined(self.grouped(0, lefts), self.grouped(1, rights))
            if not windows:
                del bucket.keys[key]
        return out

    def grouped(self, side: int, rows: list[Row]) -> list[Row]:
        """A window's rows of a side as its aggregate gives them: the first row of each group
        (the query names only the grouping columns of it), in the order the groups came."""
        positions = self.distinct[side]
        if positions is None:
            return rows
        groups: dict[tuple, Row] = {}
        for row in rows:
            groups.setdefault(tuple(row[i] for i in positions), row)
        return list(groups.values())

    def joined(self, lefts: list[Row], rights: list[Row]) -> list[Change]:
        """One window's result, in Flink's order: each left row with its matches (or padded),
        then the right rows nothing matched (RIGHT: each right row with its matches)."""
        kind, out = self.kind, []
        if kind in ("semi", "anti"):
            for left in lefts:
                if any(self.matches(left, right) for right in rights) == (kind == "semi"):
                    out.append(Change(RowKind.INSERT, left))
            return out
        if kind == "right":
            for right in rights:
                pairs = [
                    Change(RowKind.INSERT, left, right)
                    for left in lefts
                    if self.matches(left, right)
                ]
                out += pairs or [Change(RowKind.INSERT, None, right)]
            return out
        matched: set[int] = set()
        for left in lefts:
            found = False
            for n, right in enumerate(rights):
                if self.matches(left, right):
                    out.append(Change(RowKind.INSERT, left, right))
                    matched.add(n)
                    found = True
            if not found and kind in ("left", "full"):
                out.append(Change(RowKind.INSERT, left))
        if kind == "full":
            out += [
                Change(RowKind.INSERT, None, r) for n, r in enumerate(rights) if n not in matched
            ]
        return out
