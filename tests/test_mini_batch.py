"""A micro-batch's changes of a join key folded per input as Flink's mini-batch join folds
them: an insert and its retraction cancel, an update collapses into what it leaves."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from state.joins.mini_batch import fold_by_row, fold_by_unique_key, folded
from state.joins.specs import RegularJoinSpec
from tests.frames import RandomChanges, join_frame
from tests.test_regular_processor import KINDS, SPEC, changes, joined


def kinds_kept(kinds: list[str]) -> list[str]:
    return [kind for _, kind in fold_by_unique_key(kinds)]


@pytest.mark.parametrize(
    ("kinds", "kept"),
    [
        (["+I", "-U", "+U"], ["+I"]),  # inserted and updated: an insert of the last row
        (["+I", "-D"], []),
        (["+I", "-D", "+U"], ["+I"]),
        (["-U", "+U"], ["-U", "+U"]),  # an update of a row from before: both sides of it
        (["-U", "+U", "-U", "+U"], ["-U", "+U"]),
        (["-U", "+U", "-D"], ["-U"]),  # the row from before, retracted
        (["+I", "+U"], ["+I"]),
        (["+U", "+U"], ["+U"]),
        (["-D", "+I"], ["-D", "+I"]),
    ],
)
def test_changes_of_one_unique_key_fold_into_what_they_leave(
    kinds: list[str], kept: list[str]
) -> None:
    assert kinds_kept(kinds) == kept


def test_the_changes_kept_are_those_that_leave_the_row_and_keep_their_order() -> None:
    assert fold_by_unique_key(["-U", "+U", "-U", "+U"]) == [(0, "-U"), (3, "+U")]


def test_without_a_unique_key_an_insert_and_a_retraction_of_the_same_row_cancel() -> None:
    kept = fold_by_row(["+I", "+I", "-D", "-D", "+I"], ["a", "b", "a", "c", "c"])
    assert kept == [(1, "+I")]


def apply(table: dict, changes: list[tuple[str, tuple]], key_of) -> dict:
    """A keyed table after `changes` (kind, row)."""
    table = dict(table)
    for kind, row in changes:
        if kind in ("+I", "+U"):
            table[key_of(row)] = row
        else:
            table.pop(key_of(row), None)
    return table


@pytest.mark.parametrize("seed", range(20))
def test_folded_changes_leave_every_table_as_the_changes_themselves_do(seed: int) -> None:
    rng = random.Random(seed)
    before = {k: (k, rng.randrange(3)) for k in range(3) if rng.random() < 0.5}
    table, changes = dict(before), []
    for _ in range(rng.randrange(1, 12)):
        k = rng.randrange(3)
        if k in table and rng.random() < 0.3:
            changes.append(("-D", table.pop(k)))
        elif k in table:
            new = (k, rng.randrange(3))
            changes += [("-U", table[k]), ("+U", new)]
            table[k] = new
        else:
            table[k] = (k, rng.randrange(3))
            changes.append(("+I", table[k]))
    changes = [(position, kind, row) for position, (kind, row) in enumerate(changes)]
    kept = dict(folded(changes, lambda row: row[0]))
    rows = {position: row for position, _, row in changes}
    after = apply(before, [(kind, rows[p]) for p, kind in sorted(kept.items())], lambda r: r[0])
    assert after == table
    assert len(kept) <= len(changes)
    multiset = dict(folded(changes, None))
    assert (
        apply(before, [(k, rows[p]) for p, k in sorted(multiset.items())], lambda r: r[0]) == table
    )


def materialized(frames: list[Any]) -> Counter:
    """The table a join's changes leave (a multiset of output rows)."""
    table: Counter = Counter()
    for frame in frames:
        for kind, *row in joined(frame) if len(frame.columns) else []:
            table[tuple(row)] += 1 if kind in ("+I", "+U") else -1
    return +table


@pytest.mark.parametrize("kind", ["inner", "left", "full"])
def test_a_mini_batch_join_ends_in_the_same_table_with_fewer_changes(kind: str) -> None:
    rng = random.Random(kind)
    plain = RegularJoinSpec(kind, SPEC.on, SPEC.left, SPEC.right)
    frames = {
        False: TwsTester(join_frame(plain, KINDS)),
        True: TwsTester(join_frame(replace(plain, mini_batch=True), KINDS)),
    }
    out: dict[bool, list] = {False: [], True: []}
    source = RandomChanges(rng, 6, 3)
    for _batch in range(30):
        rows = source.batch(rng.randrange(1, 10))
        for folding, tester in frames.items():
            out[folding].append(tester.testInPandas(0, changes(*rows)))
    assert materialized(out[True]) == materialized(out[False])
    counts = {f: sum(len(frame) for frame in frames) for f, frames in out.items()}
    assert counts[True] < counts[False]
