"""The flat columns a stateful operator's rows cross between Spark and Python in.

The app side selects them (`app.run.stateful`) and the frame (`state.spark.frame`) reads and writes
them; both take the names from one `ColumnLayout`, so neither spells a prefix of its own.
Flat columns, not structs: pandas turns a struct column into a dict per row, which costs more
than the operator.

In: `bucket` (the grouping key: a hash of the key modulo the buckets), the key `k0..kN`,
`side` (when the operator has two inputs), `op`, `seq` (the order of arrival), `ts` (event
time, epoch ms, when the operator reads it), `bound` (where the layout takes it: the least
watermark, epoch ms, the query reaches once its micro-batch has read the row's input as far as
this micro-batch reads it; `state.spark.frame`), then each side's row as `L_<col>` / `R_<col>`.
Out: `op`, then `seq`, `ts`, `k0` when the layout says so, then the sides' columns it outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

BUCKET = "bucket"
SIDE = "side"
OP = "op"
SEQ = "seq"
TS = "ts"
BOUND = "bound"
SIDE_PREFIXES = ("L_", "R_")  # the join's output columns keep these: users name them


def key_column(i: int) -> str:
    return f"k{i}"


def side_column(side: int, name: str) -> str:
    return f"{SIDE_PREFIXES[side]}{name}"


def chained_column(table: int, name: str) -> str:
    """The column `name` of a query's `table`-th table (0 the first) in the result of a chain
    of joins that a further join takes as its left input."""
    return f"t{table}_{name}"


def chained_names(left: Sequence[str], right: Sequence[str], number: int) -> list[str]:
    """The fields of a job's `number`-th join's left input (from 2): the result of the join
    before it, whose inputs' fields are `left` (the first table's own, for the second join)
    and `right` (its table's own; none for a semi or anti join)."""
    lefts = [chained_column(0, name) for name in left] if number == 2 else list(left)
    return lefts + [chained_column(number - 1, name) for name in right]


@dataclass(frozen=True)
class ColumnLayout:
    """Which columns an operator takes and gives, and how pandas carries their values.

    `sides`: each input's row fields (one input: the operator reads no `side` column);
    `kinds`: `integral` or `timestamp` by column name, for the columns pandas carries as float
    (an integer column with a NULL) or NaT; `outputs`: the sides whose rows the output carries;
    `out_seq` / `out_ts` / `out_key`: whether it carries each change's `seq`, `ts`, record key;
    `bounds`: whether its rows carry their input's `bound`.
    """

    keys: int
    sides: tuple[tuple[str, ...], ...]
    kinds: Mapping[str, str] = field(default_factory=dict)
    times: bool = True
    outputs: tuple[int, ...] = (0, 1)
    out_seq: bool = False
    out_ts: bool = False
    out_key: bool = False
    bounds: bool = False

    @property
    def key_columns(self) -> list[str]:
        return [key_column(i) for i in range(self.keys)]

    def side_columns(self, side: int) -> list[str]:
        return [side_column(side, name) for name in self.sides[side]]

    @property
    def input_names(self) -> list[str]:
        head = [BUCKET, *self.key_columns, *([SIDE] if len(self.sides) > 1 else []), OP, SEQ]
        head += [TS] if self.times else []
        head += [BOUND] if self.bounds else []
        return head + [c for side in range(len(self.sides)) for c in self.side_columns(side)]

    @property
    def output_names(self) -> list[str]:
        names = [OP, *([SEQ] if self.out_seq else []), *([TS] if self.out_ts else [])]
        names += [key_column(0)] if self.out_key else []
        return names + [c for side in self.outputs for c in self.side_columns(side)]

    def kind(self, column: str) -> str:
        return self.kinds.get(column, "")


@dataclass(frozen=True)
class Widening:
    """An input whose columns grew while its state held rows: the rows written before are
    shorter, and read with NULL in the columns they lack. Columns are only ever added at the end
    of an input's own columns (`app.run.evolution`), before the `tail` ones an operator adds
    after them (a window join's window bounds), so a row of any earlier width widens the same
    way. `held`: the input's columns in the oldest rows, which a row's identity is hashed by
    where it places the row (`state.joins.pages`), so that a row finds the page it was put in
    before it widened."""

    width: int  # a row's length now
    held: int
    tail: int = 0

    def __call__(self, row: tuple) -> tuple:
        short = self.width - len(row)
        if short <= 0:
            return row
        end = len(row) - self.tail
        return row[:end] + (None,) * short + row[end:]


Widenings = tuple[Widening | None, Widening | None]  # a join's inputs', left and right
