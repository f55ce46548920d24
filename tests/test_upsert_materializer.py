"""The sink upsert materializer (Flink's `SinkUpsertMaterializer`), without Spark."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from state.joins.materialize import materialize
from state.store.encoding import load, load_entry
from tests.frames import upsert_frame

A, B, C = ("o1", "p1"), ("o1", "p2"), ("o1", "p3")


@pytest.mark.parametrize(
    ("rows", "changes", "emitted", "after"),
    [
        ([], [("+I", A)], [("+I", A)], [A]),
        ([A], [("+U", B)], [("+U", B)], [A, B]),
        ([A], [("-D", A)], [("-D", A)], []),
        ([A, B], [("-U", B)], [("+U", A)], [A]),
        ([A, B], [("-U", A)], [], [B]),
        ([A], [("-D", C)], [], [A]),  # not there: expired state, as Flink logs it
        ([A, A], [("-D", A)], [], [A]),  # the first equal row goes; the record stands
    ],
)
def test_each_change_emits_what_its_key_becomes(rows, changes, emitted, after) -> None:
    assert materialize(rows, changes) == emitted
    assert rows == after


def test_a_move_between_join_keys_ends_on_the_new_row_whatever_order_the_tasks_deliver() -> None:
    """An order moving from product p1 to p2 and on to p3 within one batch: each product's task
    keeps its own changes in order, the tasks' changes interleave in any way."""
    rng = random.Random(3)
    by_task = [
        [("+I", A), ("-U", A)],  # p1's task: the order, then its move away
        [("+U", B), ("-U", B)],  # p2's
        [("+U", C)],  # p3's
    ]
    for _ in range(200):
        queues = [list(changes) for changes in by_task]
        interleaved = []
        while any(queues):
            interleaved.append(rng.choice([q for q in queues if q]).pop(0))
        rows: list = []
        records = materialize(rows, interleaved)
        assert rows == [C]
        assert records[-1] == ("+U", C) or records[-1] == ("+I", C)


def changes(*rows: tuple) -> pd.DataFrame:
    """(op, seq, record key, order_id, qty) -> the processor's input columns."""
    columns = ("op", "seq", "k0", "L_0", "L_1")
    return pd.DataFrame([dict(zip(columns, row, strict=True)) for row in rows])


def records(frame: pd.DataFrame) -> list[tuple]:
    rows = frame[["op", "k0", "L_0", "L_1"]].itertuples(index=False)
    return [(op, key, order, None if qty != qty else int(qty)) for op, key, order, qty in rows]


def test_the_processor_applies_each_keys_changes_in_seq_order_and_keeps_its_rows() -> None:
    tester = TwsTester(upsert_frame(2, {"L_1": "integral"}))
    first = tester.testInPandas(
        0,
        changes(  # delivered out of order: the processor orders by seq
            ("-U", 2, b"o1", "o1", 1),
            ("+I", 1, b"o1", "o1", 1),
            ("+U", 3, b"o1", "o1", 2),
            ("+I", 0, b"o2", "o2", 5),
        ),
    )
    assert records(first) == [
        ("+I", b"o2", "o2", 5),
        ("+I", b"o1", "o1", 1),
        ("-D", b"o1", "o1", 1),
        ("+I", b"o1", "o1", 2),
    ]
    entries = tester.peekMapState("keys", 0)
    assert {load(k[0]): load_entry(v[0])[:2] for k, v in entries.items()} == {
        b"o1": (None, [("o1", 2)]),
        b"o2": (None, [("o2", 5)]),  # no TTL: no expiry
    }
    # the next batch: o2 deleted (its entry goes), o1's row retracted by a late task's change
    second = tester.testInPandas(0, changes(("-D", 7, b"o2", "o2", 5), ("-U", 4, b"o1", "o1", 2)))
    assert records(second) == [("-D", b"o1", "o1", 2), ("-D", b"o2", "o2", 5)]
    assert tester.peekMapState("keys", 0) == {}
