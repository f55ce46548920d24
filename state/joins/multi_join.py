"""Flink's multi-way join (`StreamingMultiJoinOperator`, FLIP-516) for the rows of one key.

A chain of INNER and LEFT regular joins whose inputs all share one join key runs as one
operator that keeps only the inputs' rows: no join's result is kept as the next join's state.
The result is the chain's, left-deep in the written order: input 0, joined with input 1 under
the first join's condition, that result with input 2 under the second's, and so on; a LEFT
join pads a combination no row of its input matches with NULLs.

A change of input `i`'s row `r` touches only the results whose first `i` inputs (a prefix `p`,
enumerated from the state as the joins before `i` combine them) match `r` under join `i`'s
condition. Per such prefix, the rows of input `i` matching it before and after the change
differ by `r` alone, so the output is, for each suffix the joins after `i` give `p + r`:

| change of `r`            | results with `r`  | `p` padded (LEFT join `i`)            |
|--------------------------|-------------------|---------------------------------------|
| `+I`/`+U`, first match   | added             | its padded results retracted (`-D`)   |
| `+I`/`+U`, more matches  | added             | -                                     |
| `-U`/`-D`, last match    | retracted         | its padded results back (`+I`)        |
| `-U`/`-D`, more remain   | retracted         | -                                     |

Results are added and retracted with the input change's own kind where every join is INNER
(as Flink's inner joins pass it through), as `+I` and `-D` otherwise, as the outer joins of a
chain emit them. Plain Python over the state views (`state.joins.views`), one view per input,
so the semantics are tested without Spark, against the chain of `RegularJoin`s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from state.changes import Change, Row, RowKind
from state.joins.views import View

# (the result so far as one flat row, the next input's row) -> whether they join
Matcher = Callable[[Row, Row], object]
Combination = tuple[Row | None, ...]  # one row (or NULL padding) per input, from input 0


class MultiJoin:
    """INNER and LEFT joins of several inputs, for the rows of one shared key."""

    def __init__(
        self, kinds: Sequence[str], matchers: Sequence[Matcher], widths: Sequence[int]
    ) -> None:
        """`kinds[j]`, `matchers[j]`: the join of input `j + 1` with what comes before it;
        `widths[i]`: input `i`'s number of columns."""
        self.outer = tuple(kind == "left" for kind in kinds)
        self.matchers = tuple(matchers)
        self.widths = tuple(widths)
        self.inner = not any(self.outer)

    def _flat(self, combination: Combination) -> Row:
        """A combination as the flat row its next join's condition reads."""
        flat: tuple = ()
        for row, width in zip(combination, self.widths, strict=False):
            flat += row if row is not None else (None,) * width
        return flat

    def _matches(self, combination: Combination, views: Sequence[View]) -> list[Row]:
        """The rows (a copy each) of the next input that join `combination`."""
        at = len(combination)
        flat, matches = self._flat(combination), self.matchers[at - 1]
        return [row for row, _ in views[at].records() if matches(flat, row)]

    def _extended(
        self, combinations: list[Combination], views: Sequence[View]
    ) -> list[Combination]:
        """Each combination joined with the next input: one per matching row, or padded by a
        LEFT join that finds none."""
        out: list[Combination] = []
        for combination in combinations:
            rows = self._matches(combination, views)
            if rows:
                out += [(*combination, row) for row in rows]
            elif self.outer[len(combination) - 1]:
                out.append((*combination, None))
        return out

    def _completed(self, combination: Combination, views: Sequence[View]) -> list[Combination]:
        """The whole results that begin with `combination`."""
        combinations = [combination]
        while combinations and len(combinations[0]) < len(views):
            combinations = self._extended(combinations, views)
        return combinations

    def _prefixes(self, side: int, views: Sequence[View]) -> list[Combination]:
        """The combinations of the inputs before `side`, as the joins before it give them."""
        combinations: list[Combination] = [(row,) for row, _ in views[0].records()]
        while combinations and len(combinations[0]) < side:
            combinations = self._extended(combinations, views)
        return combinations

    def _output(self, kind: str, results: list[Combination]) -> list[Change]:
        """Results as changes: all inputs but the last as one flat row, then the last's."""
        return [Change(kind, self._flat(r[:-1]), r[-1]) for r in results]

    def process(self, side: int, op: str, row: Row, views: Sequence[View]) -> list[Change]:
        """Apply one change of input `side` to its view; return the output changes."""
        adds = op in RowKind.ACCUMULATE
        view = views[side]
        if not adds and not view.holds(row):
            return []  # a retraction of nothing held (expired, say) changes no result
        if side == 0:
            (view.add if adds else view.retract)(row)
            return self._changed(op, adds, self._completed((row,), views))
        prefixes = [
            p for p in self._prefixes(side, views) if self.matchers[side - 1](self._flat(p), row)
        ]
        # whether a prefix's padding comes or goes: only a LEFT join pads, so only it counts
        # each prefix's matches before and after (a scan of the input's view per prefix)
        outer = self.outer[side - 1]
        before = [len(self._matches(p, views)) for p in prefixes] if outer else []
        (view.add if adds else view.retract)(row)
        out: list[Change] = []
        for i, prefix in enumerate(prefixes):
            padded = outer and (before[i] == 0) != (len(self._matches(prefix, views)) == 0)
            if padded and adds:
                out += self._output(RowKind.DELETE, self._completed((*prefix, None), views))
            out += self._changed(op, adds, self._completed((*prefix, row), views))
            if padded and not adds:
                out += self._output(RowKind.INSERT, self._completed((*prefix, None), views))
        return out

    def _changed(self, op: str, adds: bool, results: list[Combination]) -> list[Change]:
        """The results of the changed row, with the change's kind where every join is INNER."""
        if self.inner:
            return self._output(op, results)
        return self._output(RowKind.INSERT if adds else RowKind.DELETE, results)
