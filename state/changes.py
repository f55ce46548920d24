"""The vocabulary every stage shares: a change's kind (Flink's `RowKind`), a row, an output change.

Kinds travel between stages as Flink's short strings (`+I -U +U -D`) in a string column, so
they are plain `str` constants here, not an enum: an enum member would have to be turned back
into its string for every row that crosses to Arrow.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

Row = tuple[Any, ...]  # a row's column values, in its input's column order
# Where event times and timestamps count from: Flink's epoch milliseconds, as Python datetimes
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The two inputs of a join, as the metrics, the state report and the join's columns name them
SIDES = ("left", "right")


class RowKind:
    """Flink's `RowKind`, as its short strings."""

    INSERT = "+I"
    UPDATE_BEFORE = "-U"
    UPDATE_AFTER = "+U"
    DELETE = "-D"
    ALL = (INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE)
    # The kinds that add a row to a result (Flink's `RowDataUtil.isAccumulateMsg`); the others
    # retract one.
    ACCUMULATE = frozenset((INSERT, UPDATE_AFTER))


class Change(NamedTuple):
    """One output change of a stateful operator: its kind and each side's row (None: padded with
    NULLs), and what some operators' outputs carry besides: the change's event time (epoch ms),
    its order among its key's changes, the record key it is for."""

    kind: str
    left: Row | None
    right: Row | None = None
    ts: int | None = None
    seq: int | None = None
    key: Any = None


def opens_update(changes: Sequence[Sequence[Any]], i: int) -> bool:
    """Whether change `i` (each change's kind first) is a `-U` whose `+U` follows it: the two
    are one update, as a Debezium record with both images carries it."""
    return (
        changes[i][0] == RowKind.UPDATE_BEFORE
        and i + 1 < len(changes)
        and changes[i + 1][0] == RowKind.UPDATE_AFTER
    )
