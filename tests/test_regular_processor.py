"""The regular join's bucketed processor, through pyspark's TwsTester (pandas, no Spark query)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from state.joins.inline import APART, MAX_CHUNKS, inline_rows
from state.joins.pages import pages_for
from state.joins.specs import RegularJoinSpec, SideSpec
from state.store.encoding import load, load_entry
from tests.frames import join_frame

SPEC = RegularJoinSpec(
    "left",
    "L.product_id = R.product_id",
    SideSpec(("order_id", "product_id", "qty"), ("order_id",)),
    SideSpec(("product_id", "price"), ("product_id",)),
)
OUT = ["op", "L_order_id", "L_product_id", "L_qty", "R_product_id", "R_price"]
KINDS = {"L_qty": "integral", "R_price": "integral"}


def changes(*rows: tuple) -> pd.DataFrame:
    """(side, op, seq, row) -> the processor's input columns."""
    records = []
    for side, op, seq, row in rows:
        left = row if side == 0 else (None, None, None)
        right = row if side == 1 else (None, None)
        records.append(
            {
                "side": side,
                "op": op,
                "seq": seq,
                "ts": None,
                "k0": row[side ^ 1],
                "L_order_id": left[0],
                "L_product_id": left[1],
                "L_qty": left[2],
                "R_product_id": right[0],
                "R_price": right[1],
            }
        )
    return pd.DataFrame(records)


def joined(frame: pd.DataFrame) -> list[tuple]:
    return [
        tuple(None if v != v else v for v in row)  # NaN: a padded, NULL column
        for row in frame[OUT].itertuples(index=False)
    ]


def stored_keys(tester: TwsTester, bucket: int) -> dict:
    """The bucket's entries: join key -> both sides' views, as plain data."""
    entries = tester.peekMapState("keys", bucket).items()
    return {load(k[0]): load_entry(v[0])[1] for k, v in entries}


def test_rows_of_a_bucket_are_joined_in_arrival_order_and_each_key_keeps_its_own_entry() -> None:
    tester = TwsTester(join_frame(SPEC, KINDS))
    first = tester.testInPandas(
        0,
        changes(  # delivered out of order: the processor orders by seq
            (1, "+I", 3, ("p1", 10)),
            (0, "+I", 1, ("o1", "p1", 1)),
            (0, "+I", 2, ("o2", "p2", 1)),
        ),
    )
    assert joined(first) == [
        ("+I", "o1", "p1", 1, None, None),
        ("+I", "o2", "p2", 1, None, None),
        ("-D", "o1", "p1", 1, None, None),
        ("+I", "o1", "p1", 1, "p1", 10),
    ]
    assert set(stored_keys(tester, 0)) == {("p1",), ("p2",)}
    second = tester.testInPandas(0, changes((1, "-D", 5, ("p1", 10))))
    assert joined(second) == [
        ("-D", "o1", "p1", 1, "p1", 10),
        ("+I", "o1", "p1", 1, None, None),
    ]
    tester.testInPandas(0, changes((0, "-D", 7, ("o1", "p1", 1))))
    assert set(stored_keys(tester, 0)) == {("p2",)}  # an emptied key leaves no entry


def test_an_update_whose_after_image_comes_first_in_a_batch_is_applied_in_seq_order() -> None:
    """A Debezium update is `-U before` (seq 2n) then `+U after` (2n+1); the shuffle may deliver
    the `+U` first. Flink's result: the old joined row retracted, then the new one."""
    spec = RegularJoinSpec("inner", SPEC.on, SPEC.left, SPEC.right)
    tester = TwsTester(join_frame(spec, KINDS))
    tester.testInPandas(0, changes((1, "+I", 2, ("p1", 10)), (0, "+I", 4, ("o1", "p1", 1))))
    update = tester.testInPandas(
        0, changes((0, "+U", 15, ("o1", "p1", 2)), (0, "-U", 14, ("o1", "p1", 1)))
    )
    assert joined(update) == [
        ("-U", "o1", "p1", 1, "p1", 10),
        ("+U", "o1", "p1", 2, "p1", 10),
    ]
    (kind, key_indices, rows), _right = stored_keys(tester, 0)[("p1",)]
    assert (kind, key_indices) == ("unique", (0,))
    assert dict(inline_rows(rows, None)) == {("o1",): [("o1", "p1", 2), 1, 0]}  # no TTL: no time


def test_a_batch_writes_back_only_the_keys_whose_rows_changed() -> None:
    tester = TwsTester(join_frame(SPEC, KINDS))
    tester.testInPandas(0, changes((1, "+I", 1, ("p1", 10)), (1, "+I", 2, ("p2", 20))))
    written = []
    entries = tester.handle.map_states["keys"]
    update = entries.updateValue
    entries.updateValue = lambda key, value: (written.append(load(key[0])), update(key, value))
    # p2's row retracted and re-added unchanged within the batch: nothing to write for it
    tester.testInPandas(
        0,
        changes((0, "+I", 3, ("o1", "p1", 1)), (1, "-U", 4, ("p2", 20)), (1, "+U", 5, ("p2", 20))),
    )
    assert written == [("p1",)]


class Calls:
    """Counts the writes a processor makes to its `MapState`s, by state."""

    def __init__(self, tester: TwsTester, *names: str) -> None:
        self.writes: dict[str, int] = dict.fromkeys(names, 0)
        for name in names:
            state = tester.handle.map_states[name]
            state.updateValue = self._counted(name, state.updateValue)

    def _counted(self, name: str, write: Callable) -> Callable:
        def counted(key: tuple, value: tuple) -> None:
            self.writes[name] += 1
            write(key, value)

        return counted

    def taken(self) -> dict[str, int]:
        taken, self.writes = self.writes, dict.fromkeys(self.writes, 0)
        return taken


def test_a_key_with_many_rows_rewrites_only_the_page_a_change_falls_in() -> None:
    """2,000 orders of one product: a new order writes its page and the key's entry, not 2,000
    rows; a price change still joins every order; deleting most puts the rest back inline."""
    tester = TwsTester(join_frame(SPEC, KINDS))
    orders = [(0, "+I", i, (f"o{i}", "p1", 1)) for i in range(2000)]
    tester.testInPandas(0, changes((1, "+I", -1, ("p1", 10)), *orders))
    pages = tester.peekMapState("pages", 0)
    assert len(pages) == pages_for(2000)  # 2,000 rows at `PAGE_ROWS` a page
    calls = Calls(tester, "keys", "pages")

    added = tester.testInPandas(0, changes((0, "+I", 5000, ("o5000", "p1", 1))))
    assert joined(added) == [("+I", "o5000", "p1", 1, "p1", 10)]
    assert calls.taken() == {"keys": 1, "pages": 1}

    repriced = tester.testInPandas(
        0, changes((1, "-U", 5001, ("p1", 10)), (1, "+U", 5002, ("p1", 11)))
    )
    assert len(repriced) == 4 * 2001  # LEFT join: each order padded, then joined anew
    assert calls.taken() == {"keys": 1, "pages": 0}  # the orders' association counts held

    deletes = [(0, "-D", 6000 + i, (f"o{i}", "p1", 1)) for i in range(1995)]
    tester.testInPandas(0, changes(*deletes))
    assert tester.peekMapState("pages", 0) == {}
    (left, _right) = stored_keys(tester, 0)[("p1",)]
    assert sorted(inline_rows(left[2], None)) == [
        ("o1995",),
        ("o1996",),
        ("o1997",),
        ("o1998",),
        ("o1999",),
        ("o5000",),
    ]


def test_a_product_with_many_orders_gets_an_order_by_writing_the_orders_added_since() -> None:
    """100 orders of one product, then one order a visit (the soak's shape): the orders read
    and written as one are stored apart, so a visit writes the key's entry with the orders
    added since, not the 100; every `MAX_CHUNKS` visits they are written as one again; a price
    change joins every order."""
    tester = TwsTester(join_frame(SPEC, KINDS))
    orders = [(0, "+I", i, (f"o{i}", "p1", 1)) for i in range(100)]
    tester.testInPandas(0, changes((1, "+I", -1, ("p1", 10)), *orders))
    (((name,), (apart,)),) = tester.peekMapState("pages", 0).items()
    assert load(name) == (("p1",), 0, APART) and len(load(apart)) == 100
    calls = Calls(tester, "keys", "pages")
    for visit in range(1, MAX_CHUNKS):
        order = (f"n{visit}", "p1", 2)
        added = tester.testInPandas(0, changes((0, "+I", 1000 + visit, order)))
        assert joined(added) == [("+I", *order, "p1", 10)]
        assert calls.taken() == {"keys": 1, "pages": 0}
        ((entry,),) = tester.peekMapState("keys", 0).values()
        assert b"o99" not in entry and len(entry) < len(apart)  # none of the 100 orders
    tester.testInPandas(0, changes((0, "+I", 2000, ("last", "p1", 3))))
    assert calls.taken() == {"keys": 1, "pages": 1}  # all 116 orders written as one, apart
    repriced = tester.testInPandas(
        0, changes((1, "-U", 2001, ("p1", 10)), (1, "+U", 2002, ("p1", 11)))
    )
    rejoined = {row[1] for row in joined(repriced) if row[0] == "+I" and row[5] == 11}
    assert len(rejoined) == 100 + MAX_CHUNKS == len(repriced) / 4


def test_under_a_state_ttl_orders_stored_apart_expire_and_their_entry_goes() -> None:
    """40 orders of a product stored apart, one more 29 s later: once the 40 expired, a price
    change joins the one order alone and the entry of the 40 is removed."""
    spec = RegularJoinSpec("inner", SPEC.on, SPEC.left, SPEC.right, state_ttl_ms=60_000)
    tester = TwsTester(join_frame(spec, KINDS), timeMode="ProcessingTime")
    tester.setProcessingTime(1_000)
    tester.testInPandas(0, changes(*[(0, "+I", i, (f"o{i}", "p1", 1)) for i in range(40)]))
    assert len(tester.peekMapState("pages", 0)) == 1  # the 40 orders, apart
    tester.setProcessingTime(30_000)
    tester.testInPandas(0, changes((0, "+I", 40, ("o40", "p1", 1))))
    tester.setProcessingTime(70_000)  # the 40 expired at 61 s; o40 lives to 90 s
    out = tester.testInPandas(0, changes((1, "+I", 41, ("p1", 10))))
    assert joined(out) == [("+I", "o40", "p1", 1, "p1", 10)]
    assert tester.peekMapState("pages", 0) == {}
    (left, _right) = stored_keys(tester, 0)[("p1",)]
    assert list(inline_rows(left[2], None)) == [("o40",)]


class Reports:
    """A `HeldRows` that keeps each bucket's latest report, as the driver's accumulator."""

    def __init__(self) -> None:
        self.latest: dict[tuple[str, str, int], int] = {}

    def add(self, reports: dict) -> None:
        self.latest |= {
            key: sum(n for _expires, n in counts) for key, (_when, counts) in reports.items()
        }


def test_each_bucket_reports_the_rows_it_holds_per_side() -> None:
    reports = Reports()
    tester = TwsTester(join_frame(SPEC, KINDS, held_rows=reports))
    tester.testInPandas(
        3,
        changes(
            (1, "+I", 1, ("p1", 10)),
            (0, "+I", 2, ("o1", "p1", 1)),
            (0, "+I", 3, ("o2", "p2", 1)),
            (0, "+I", 4, ("o3", "p2", 1)),
        ),
    )
    assert reports.latest == {("join", "left", 3): 3, ("join", "right", 3): 1}
    tester.testInPandas(3, changes((0, "-D", 5, ("o2", "p2", 1)), (1, "-D", 6, ("p1", 10))))
    assert reports.latest == {("join", "left", 3): 2, ("join", "right", 3): 0}


def test_under_a_state_ttl_a_key_that_keeps_getting_rows_holds_only_the_recent_ones() -> None:
    """An order every 10 s for one product for 10 minutes, a 60 s TTL: the key's entry and the
    rows reported hold the last minute's orders, not all 60 (the TTL was once per join key, and
    a key written every few seconds never expired)."""
    reports = Reports()
    spec = RegularJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, state_ttl_ms=60_000)
    tester = TwsTester(join_frame(spec, KINDS, held_rows=reports), timeMode="ProcessingTime")
    tester.testInPandas(0, changes((1, "+I", 0, ("p1", 10))))
    for i in range(1, 61):
        tester.setProcessingTime(i * 10_000)
        out = tester.testInPandas(0, changes((0, "+I", i, (f"o{i}", "p1", 1))))
        expected_price = 10 if i < 6 else None  # the product, written at 0, lives 60 s
        assert joined(out)[-1] == (
            "+I",
            f"o{i}",
            "p1",
            1,
            "p1" if expected_price else None,
            expected_price,
        )
    (left, right) = stored_keys(tester, 0)[("p1",)]
    assert sorted(inline_rows(left[2], None)) == [(f"o{i}",) for i in range(55, 61)]
    assert right[1] is None  # the product went
    assert reports.latest == {("join", "left", 0): 6, ("join", "right", 0): 0}


def test_under_a_state_ttl_expired_rows_in_pages_are_dropped_when_a_batch_reads_them() -> None:
    """A key's rows past the inline limit live in pages: a product arriving after its 600
    orders expired reads every page, joins none of them, and leaves no page behind."""
    spec = RegularJoinSpec("inner", SPEC.on, SPEC.left, SPEC.right, state_ttl_ms=60_000)
    tester = TwsTester(join_frame(spec, KINDS), timeMode="ProcessingTime")
    tester.setProcessingTime(1_000)
    tester.testInPandas(0, changes(*[(0, "+I", i, (f"o{i}", "p1", 1)) for i in range(600)]))
    assert len(tester.peekMapState("pages", 0)) == pages_for(600)
    tester.setProcessingTime(30_000)
    tester.testInPandas(0, changes((0, "+I", 600, ("o600", "p1", 1))))
    tester.setProcessingTime(70_000)  # the first 600 expired at 61 s; o600 lives to 90 s
    out = tester.testInPandas(0, changes((1, "+I", 601, ("p1", 10))))
    assert joined(out) == [("+I", "o600", "p1", 1, "p1", 10)]
    assert tester.peekMapState("pages", 0) == {}
    (left, _right) = stored_keys(tester, 0)[("p1",)]
    assert list(inline_rows(left[2], None)) == [("o600",)]


def test_a_join_counts_its_fanout_and_names_a_key_past_hot_key_rows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three orders padded, then their product: each order emitted one change, the product six
    (a -D/+I per order). The key then holds three orders, past `hot_key_rows` 2: one line names
    it, and one more order within the minute names it no more."""
    spec = RegularJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, hot_key_rows=2)
    frame = join_frame(spec, KINDS)
    tester = TwsTester(frame)
    orders = [(0, "+I", i, (f"o{i}", "p1", 1)) for i in range(3)]
    tester.testInPandas(0, changes(*orders, (1, "+I", 3, ("p1", 10))))
    assert frame.operator.fanout.take() == {
        ("fanout", "1"): 3,
        ("fanout", "10"): 1,
        ("fanout", "sum"): 9,
        ("hot", "left"): 1,
    }
    tester.testInPandas(0, changes((0, "+I", 4, ("o4", "p1", 1))))
    assert frame.operator.fanout.take() == {("fanout", "1"): 1, ("fanout", "sum"): 1}
    named = [r.getMessage() for r in caplog.records if r.name == "state.joins.fanout"]
    assert named == [
        "hot key: ('p1',) holds 3 rows of input left (HOT_KEY_ROWS=2): each of its changes "
        "emits a change per matching row"
    ]
