"""A hot join key's rows over pages (`state.joins.pages`): what a micro-batch pays the store."""

from __future__ import annotations

from collections import Counter

from state.joins.inline import APART, MAX_CHUNKS
from state.joins.pages import PagedRows, pages_for, settle
from state.joins.views import MultisetView, views_from_plain, views_to_plain
from state.store.encoding import dump, load
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
