"""The regular join as a Spark `transformWithState` processor, keyed by the join key.

Per key and micro-batch it makes at most four state calls: one read and at most one write per
input side, whatever the number of rows. Each side's view is stored as one value (see
`state.views`); a side whose view did not change is not written back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from state.condition import compile_predicate, parse_condition, split_condition
from state.regular_join import LEFT, Matcher, RegularJoin, SemiAntiJoin
from state.views import View, dump_view, load_view, new_view

VIEW_STATE = StructType([StructField("view", BinaryType())])


@dataclass(frozen=True)
class SideSpec:
    """One input's columns, in order, and its unique key (empty: none)."""

    fields: tuple[str, ...]
    unique_key: tuple[str, ...] = ()


@dataclass(frozen=True)
class RegularJoinSpec:
    """Everything the processor needs, small and picklable: it travels to the executors."""

    kind: str
    on: str
    left: SideSpec
    right: SideSpec

    @property
    def equi_keys(self) -> tuple[tuple[str, str], ...]:
        return split_condition(parse_condition(self.on)).equi

    @property
    def projects_right(self) -> bool:
        """SEMI and ANTI joins output left rows only."""
        return self.kind not in ("semi", "anti")

    def matcher(self) -> Matcher:
        """Rows match when no equi-key column is NULL and the residual is TRUE.

        Rows reach the same key only if their key values are equal, so equality itself need
        not be tested again; NULL keys are grouped together but, as in SQL, never match.
        """
        condition = split_condition(parse_condition(self.on))
        left_keys = [self.left.fields.index(a) for a, _ in condition.equi]
        right_keys = [self.right.fields.index(b) for _, b in condition.equi]
        residual = (
            compile_predicate(condition.residual, self.left.fields, self.right.fields)
            if condition.residual is not None
            else None
        )

        def matches(left: tuple[Any, ...], right: tuple[Any, ...]) -> bool:
            if any(left[i] is None for i in left_keys) or any(right[j] is None for j in right_keys):
                return False
            return residual is None or residual(left, right) is True

        return matches

    def operator(self) -> RegularJoin | SemiAntiJoin:
        if self.kind in ("semi", "anti"):
            return SemiAntiJoin(self.kind, self.matcher())
        return RegularJoin(self.kind, self.matcher())

    def new_views(self) -> tuple[View, View]:
        left_keys = [a for a, _ in self.equi_keys]
        right_keys = [b for _, b in self.equi_keys]
        return (
            new_view(left_keys, self.left.fields, self.left.unique_key),
            new_view(right_keys, self.right.fields, self.right.unique_key),
        )


def _values(struct: Any) -> tuple[Any, ...]:
    """A struct column's values in field order: Spark hands structs over as dicts."""
    return tuple(struct.values()) if isinstance(struct, dict) else tuple(struct)


class RegularJoinProcessor(StatefulProcessor):
    """Input rows: `side` (0 left, 1 right), `op`, `seq` (order), `left` / `right` structs."""

    def __init__(self, spec: RegularJoinSpec, output_names: list[str]) -> None:
        self.spec = spec
        self.output_names = output_names

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.states = (
            handle.getValueState("left", VIEW_STATE),
            handle.getValueState("right", VIEW_STATE),
        )
        self.join = self.spec.operator()
        self.out = Row(*self.output_names)
        self.null_left = (None,) * len(self.spec.left.fields)
        self.null_right = (None,) * len(self.spec.right.fields) if self.spec.projects_right else ()

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        stored = [state.get() for state in self.states]
        fresh = self.spec.new_views()
        views = tuple(
            load_view(blob[0]) if blob is not None else view
            for blob, view in zip(stored, fresh, strict=True)
        )
        output = []
        for row in sorted(rows, key=lambda r: r.seq):
            values = _values(row.left if row.side == LEFT else row.right)
            for change in self.join.process(row.side, row.op, values, views):
                left = change.left if change.left is not None else self.null_left
                right = change.right if change.right is not None else self.null_right
                output.append(self.out(change.op, *left, *right))
        for state, blob, view in zip(self.states, stored, views, strict=True):
            if len(view) == 0:
                if blob is not None:
                    state.clear()
                continue
            dumped = dump_view(view)
            if blob is None or blob[0] != dumped:
                state.update((dumped,))
        return iter(output)

    def close(self) -> None:
        """No resources beyond the state handles, which Spark closes."""
