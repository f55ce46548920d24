"""A hot join key's rows over pages (`state.joins.pages`): what a micro-batch pays the store."""

from __future__ import annotations

from collections import Counter

from state.joins.inline import APART, MAX_CHUNKS
from state.joins.pages import PagedRows, PageReads, pages_for, settle
from state.joins.views import MultisetView, UniqueKeyView, views_from_plain, views_to_plain
from state.store.encoding import dump, dump_key, load
from state.store.retention import Retention
from tests.test_keyed_state import CountingStore


def test_joining_every_row_of_a_paged_side_reads_and_writes_its_pages_in_one_call_each() -> None:
    """2,000 orders of one product, then the product changes: every order is read to join it
    (one round trip for all the pages, not one a page) and each order's association count
    changes (one round trip to write every page back)."""
    store, key = CountingStore(), ("p1",)
    orders = MultisetView()
    for i in range(2000):
        orders.add((f"o{i}", "p1"))
    orders.rows = settle(orders.rows, store, key, 0)
    assert isinstance(orders.rows, PagedRows) and orders.rows.pages == pages_for(2000)
    store.calls()
    store.round_trips = 0

    orders.rows.bind(store, key, 0)
    joined = [row for row, _associations in orders.records()]
    assert len(joined) == 2000 and store.round_trips == 1
    for identity in list(orders.rows):
        orders.rows[identity][1] += 1  # one more row of the other side joins it
    orders.rows = settle(orders.rows, store, key, 0)
    assert store.round_trips == 2
    assert store.calls() == (pages_for(2000), pages_for(2000), 0)  # each page read and written once


def test_a_row_expires_exactly_its_ttl_after_its_last_write_inline_or_paged() -> None:
    """Flink hides a row once `written + ttl <= now`: a millisecond before, the row is joined and
    kept; at that time it is neither joined nor kept, in a view's own rows or in its pages."""
    store, key, ttl = CountingStore(), ("p1",), 120_000
    for paged in (False, True):
        retention = Retention(ttl)
        orders = MultisetView(retention)
        retention.at(1_000)
        for i in range(2000 if paged else 3):
            orders.add((f"o{i}", "p1"))
        retention.at(2_000)
        orders.add(("young", "p1"))
        if paged:
            orders.rows = settle(orders.rows, store, key, 0)
            assert isinstance(orders.rows, PagedRows)
            orders.rows.bind(store, key, 0)
        retention.at(1_000 + ttl - 1)
        assert len(list(orders.records())) == len(orders)
        retention.at(1_000 + ttl)
        assert [row for row, _associations in orders.records()] == [("young", "p1")]
        orders.prune()
        assert len(orders) == 1 and orders.holds(("young", "p1"))
        assert not orders.holds(("o0", "p1"))


def test_rows_added_again_unread_stay_inline_while_few() -> None:
    """A multiset of 40 rows gets each of them once more at each visit, unread: the pickles the
    visits add count 40 rows each, past `INLINE_ROWS` by the 14th, but the key holds 40 distinct
    rows, so they stay inline and no page is written (once read, they are stored apart)."""
    store, key = CountingStore(), ("k1",)
    retention = Retention()
    view = MultisetView(retention)
    for visit in range(MAX_CHUNKS - 1):
        for i in range(40):
            view.add((f"r{i}", "k1"))
        view.rows = settle(view.rows, store, key, 0)
        assert not isinstance(view.rows, PagedRows), f"paged at visit {visit}"
        (view,) = views_from_plain(load(dump(views_to_plain((view,)))), (retention,))
    assert [load(name)[2] for name in store.entries] == [APART]
    view.rows.bind(store, key, 0)
    assert Counter(row for row, _ in view.records()) == {(f"r{i}", "k1"): 15 for i in range(40)}


def test_the_visit_that_writes_rows_stored_apart_as_one_reads_them_with_its_pages() -> None:
    """40 orders of a product stored apart, then one order a visit: the visit that writes them
    all as one again (every `MAX_CHUNKS`th) reads the 40 in the one call that reads its
    micro-batch's pages, not in a call of their own as it merges them; so does a retraction."""
    store, key = CountingStore(), ("p1",)
    retention = Retention()
    orders = UniqueKeyView((0,), retention)
    for i in range(40):
        orders.add((f"o{i}", "p1"))
    orders.rows = settle(orders.rows, store, key, 0)
    assert [load(name)[2] for name in store.entries] == [APART]
    reads_with_pages, reads_alone = [], []
    for visit in range(MAX_CHUNKS):
        (orders,) = views_from_plain(load(dump(views_to_plain((orders,)))), (retention,))
        orders.rows.bind(store, key, 0)
        store.calls()
        reads = PageReads()
        order = (f"n{visit}", "p1")
        orders.want_pages(reads, order)
        reads.read()
        reads_with_pages.append(store.calls()[0])
        orders.add(order)
        orders.rows = settle(orders.rows, store, key, 0)
        reads_alone.append(store.calls()[0])
    assert reads_with_pages == [0] * (MAX_CHUNKS - 1) + [1]
    assert reads_alone == [0] * MAX_CHUNKS
    assert len(load(store.entries[dump_key((key, 0, APART))])) == 40 + MAX_CHUNKS

    (orders,) = views_from_plain(load(dump(views_to_plain((orders,)))), (retention,))
    orders.rows.bind(store, key, 0)
    reads = PageReads()
    orders.want_pages(reads, ("o3", "p1"), retracts=True)
    reads.read()
    assert store.calls()[0] == 1  # a retraction reads them with the pages too
    orders.retract(("o3", "p1"))
    assert store.calls()[0] == 0 and len(orders) == 40 + MAX_CHUNKS - 1
