"""Flink's regular (unbounded) stream-stream join, for the rows of one join key.

Two operators, as in Flink's `flink-table-runtime`:

- `RegularJoin` follows `StreamingJoinOperator` (INNER, LEFT, RIGHT, FULL): inner joins pass the
  input's change kind through (`+I/+U` joined, `-U/-D` retracted); outer joins emit only `+I` and
  `-D`, retracting a null-padded row when a record gets its first match and re-emitting it when
  the last match goes, tracked by each outer record's association count.
- `SemiAntiJoin` follows `StreamingSemiAntiJoinOperator` (SEMI, ANTI): left rows only, emitted
  while they have (SEMI) or have no (ANTI) match on the right.

Both are plain Python over the state views, so their semantics are tested without Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from state.changes import Change, Row, RowKind
from state.joins.views import View

INSERT, DELETE = RowKind.INSERT, RowKind.DELETE
LEFT, RIGHT = 0, 1

# (left row, right row) -> bool; includes the null check of the equi-key columns.
Matcher = Callable[[Row, Row], Any]


class RegularJoin:
    """INNER, LEFT, RIGHT or FULL join of the rows of one join key."""

    def __init__(self, kind: str, matches: Matcher) -> None:
        self.outer = (kind in ("left", "full"), kind in ("right", "full"))
        self.matches = matches

    def _pair(self, side: int, row: Row | None, other: Row | None) -> tuple[Row | None, ...]:
        return (row, other) if side == LEFT else (other, row)

    def _associated(self, side: int, row: Row, other_view: View) -> list[tuple[Row, int]]:
        if side == LEFT:
            return [(o, n) for o, n in other_view.records() if self.matches(row, o)]
        return [(o, n) for o, n in other_view.records() if self.matches(o, row)]

    def process(self, side: int, op: str, row: Row, views: tuple[View, View]) -> list[Change]:
        """Apply one input change of `side` to the views; return the output changes."""
        view, other_view = views[side], views[1 - side]
        input_outer, other_outer = self.outer[side], self.outer[1 - side]
        associated = self._associated(side, row, other_view)
        out: list[Change] = []

        def emit(kind: str, this: Row | None, other: Row | None) -> None:
            out.append(Change(kind, *self._pair(side, this, other)))

        if op in RowKind.ACCUMULATE:
            view.add(row, len(associated))
            if input_outer and not associated:
                emit(INSERT, row, None)
            joined_kind = INSERT if input_outer or other_outer else op
            for other, associations in associated:
                if other_outer:
                    if associations == 0:
                        emit(DELETE, None, other)
                    other_view.set_associations(other, associations + 1)
                emit(joined_kind, row, other)
        else:
            view.retract(row)
            if input_outer and not associated:
                emit(DELETE, row, None)
            retracted_kind = DELETE if input_outer else op
            for other, associations in associated:
                emit(retracted_kind, row, other)
                if other_outer:
                    if associations == 1:
                        emit(INSERT, None, other)
                    other_view.set_associations(other, associations - 1)
        return out


class SemiAntiJoin:
    """SEMI or ANTI join: left rows with (SEMI) or without (ANTI) a matching right row."""

    def __init__(self, kind: str, matches: Matcher) -> None:
        self.anti = kind == "anti"
        self.matches = matches

    def process(self, side: int, op: str, row: Row, views: tuple[View, View]) -> list[Change]:
        left_view, right_view = views
        if side == LEFT:
            matched = sum(1 for r, _ in right_view.records() if self.matches(row, r))
            if op in RowKind.ACCUMULATE:
                left_view.add(row, matched)
            else:
                left_view.retract(row)
            return [Change(op, row, None)] if (matched == 0) == self.anti else []
        associated = [(r, n) for r, n in left_view.records() if self.matches(r, row)]
        out: list[Change] = []
        if op in RowKind.ACCUMULATE:
            right_view.add(row)
            for left, associations in associated:
                if associations == 0:  # SEMI passes the right row's kind (+I/+U) through
                    out.append(Change(DELETE if self.anti else op, left, None))
                left_view.set_associations(left, associations + 1)
        else:
            right_view.retract(row)
            for left, associations in associated:
                if associations == 1:  # SEMI passes the right row's kind (-U/-D) through
                    out.append(Change(INSERT if self.anti else op, left, None))
                left_view.set_associations(left, associations - 1)
        return out
