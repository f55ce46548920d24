"""A unique key view's rows written as visits add them (`state.joins.inline`): what a visit
that only adds an order pays, and that the rows read back are Flink's."""

from __future__ import annotations

import random
from collections import Counter

from state.joins.inline import MAX_CHUNKS, InlineRows
from state.joins.views import MultisetView, UniqueKeyView, views_from_plain, views_to_plain
from state.store.encoding import dump, load
from state.store.retention import Retention


def _visit(plain: tuple, retention: Retention) -> UniqueKeyView:
    """A key's orders as a visit reads them from what the last one stored."""
    (view,) = views_from_plain(load(dump(plain)), (retention,))
    assert isinstance(view, UniqueKeyView)
    return view


def _stored(view: UniqueKeyView) -> list:
    """The pickles of a view's inline rows as its entry stores them."""
    return list(views_to_plain((view,))[0][2])


def test_an_order_added_to_a_key_leaves_the_pickles_of_its_other_orders_as_they_were() -> None:
    """A product holding 100 orders gets one more a visit: each visit stores the 100 as the
    bytes it read, adding only the new order's; past `MAX_CHUNKS` visits they are stored as one
    pickle again. Every order reads back, in its latest version."""
    retention = Retention()
    view = UniqueKeyView([0], retention)
    for i in range(100):
        view.add((f"o{i}", "p1", 1))
    plain = views_to_plain((view,))
    first = _stored(view)
    for visit in range(1, MAX_CHUNKS):
        view = _visit(plain, retention)
        view.add((f"n{visit}", "p1", visit))
        stored = _stored(view)
        assert stored[: len(stored) - 1] == first and len(stored) == visit + 1
        assert view.rows.read is None  # the 100 orders were not decoded
        first, plain = stored, views_to_plain((view,))
    view = _visit(plain, retention)
    view.add(("n-last", "p1", 0))
    assert len(_stored(view)) == 1
    read = _visit(views_to_plain((view,)), retention)
    assert len(read) == 100 + MAX_CHUNKS == len(list(read.records()))


def test_a_unique_key_added_again_unread_holds_only_its_latest_row() -> None:
    """An append-only input repeating a unique key (Flink puts the row over the one before):
    two visits each add the order; the rows read hold its second version only. Until then the
    key counts it twice."""
    retention = Retention()
    view = UniqueKeyView([0], retention)
    view.add(("o1", "p1", 1))
    view = _visit(views_to_plain((view,)), retention)
    view.add(("o1", "p1", 2))
    view = _visit(views_to_plain((view,)), retention)
    assert len(view) == 2
    assert list(view.records()) == [(("o1", "p1", 2), 0)]
    assert len(view) == 1


def test_under_a_ttl_a_visits_pickle_goes_unread_once_all_its_rows_expired() -> None:
    """Orders added at 0 s and at 50 s under a 2-minute TTL: at 121 s the first visit's pickle
    is dropped without reading either; the second's order is the one joined."""
    retention = Retention(120_000)
    view = UniqueKeyView([0], retention)
    retention.at(0)
    view.add(("o1", "p1", 1))
    retention.at(50_000)
    view = _visit(views_to_plain((view,)), retention)
    view.add(("o2", "p1", 1))
    retention.at(121_000)
    view = _visit(views_to_plain((view,)), retention)
    view.prune()
    assert isinstance(view.rows, InlineRows) and view.rows.read is None
    assert len(view) == 1 and len(_stored(view)) == 1
    assert [row for row, _associations in view.records()] == [("o2", "p1", 1)]


def _bids_visit(plain: tuple, retention: Retention) -> MultisetView:
    """An auction's bids as a visit reads them from what the last one stored."""
    (view,) = views_from_plain(load(dump(plain)), (retention,))
    assert isinstance(view, MultisetView)
    return view


def test_a_bid_added_to_an_auction_leaves_the_pickles_of_its_other_bids_as_they_were() -> None:
    """An auction holding 100 bids (no unique key: a multiset) gets the same bid once more each
    visit: the 100 stay the bytes read, and the bid's copies read back counted across visits."""
    retention = Retention()
    view = MultisetView(retention)
    for i in range(100):
        view.add((f"b{i}", 1))
    plain = views_to_plain((view,))
    first = list(plain[0][1])
    for visit in range(1, MAX_CHUNKS):
        view = _bids_visit(plain, retention)
        view.add(("b0", 1))
        stored = list(views_to_plain((view,))[0][1])
        assert stored[:-1] == first and len(stored) == visit + 1
        assert view.rows.read is None
        first, plain = stored, views_to_plain((view,))
    view = _bids_visit(plain, retention)
    assert Counter(row for row, _associations in view.records()) == Counter(
        {("b0", 1): MAX_CHUNKS, **{(f"b{i}", 1): 1 for i in range(1, 100)}}
    )


def test_a_multiset_stored_as_added_reads_as_flinks_map_of_counts_under_a_ttl() -> None:
    """Random visits to one key under a 30 s TTL, each adding copies unread, some retracting,
    counting associations or reading: every read gives the rows and counts of Flink's map state
    (a copy added once the count expired starts it again; a retraction refreshes it), and the
    stored pickles never outgrow `MAX_CHUNKS`."""
    ttl, rows = 30_000, [(f"b{i}",) for i in range(6)]
    retention, chance = Retention(ttl), random.Random(7)
    flink: dict[tuple, list[int]] = {}  # row -> [copies, written]
    plain, now = views_to_plain((MultisetView(retention),)), 0
    for _visit in range(400):
        now = retention.at(now + chance.choice((1_000, 5_000, 20_000, 40_000)))
        view = _bids_visit(plain, retention)
        for _ in range(chance.randint(1, 3)):
            row = chance.choice(rows)
            held = flink.get(row)
            alive = held is not None and held[1] > now - ttl
            if chance.random() < 0.85:
                view.add(row)
                flink[row] = [held[0] + 1 if alive else 1, now]
            else:
                view.retract(row)
                if alive:
                    flink[row] = [held[0] - 1, now]
                    if not flink[row][0]:
                        del flink[row]
        if chance.random() < 0.1:
            row = chance.choice(rows)
            view.set_associations(row, 1)  # a write: a live row's time to live starts again
            assert view.rows.read is not None
            if row in flink and flink[row][1] > now - ttl:
                flink[row][1] = now
        view.prune()
        if chance.random() < 0.3:
            expected = {r: c for r, (c, written) in flink.items() if written > now - ttl}
            assert Counter(row for row, _associations in view.records()) == expected
        plain = views_to_plain((view,))
        assert len(plain[0][1]) <= MAX_CHUNKS
