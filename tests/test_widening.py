"""An input's columns grew on a checkpoint: every operator reads the rows its state held from
before with NULL in the columns they lack, and finds them where it put them."""

from __future__ import annotations

from state.columns import Widening
from state.joins.interval_join import Bucket as IntervalBucket
from state.joins.interval_join import KeyState, bucket_from_plain, bucket_to_plain
from state.joins.pages import PagedRows, settle
from state.joins.temporal_join import VersionedKey, key_from_plain, key_to_plain, widen_waiting
from state.joins.views import (
    MultisetView,
    SingleRowView,
    UniqueKeyView,
    hashed_columns,
    views_from_plain,
    views_to_plain,
)
from state.joins.window_join import Bucket as WindowBucket
from state.joins.window_join import bucket_from_plain as window_bucket_from_plain
from state.joins.window_join import bucket_to_plain as window_bucket_to_plain
from tests.test_keyed_state import CountingStore

GREW = Widening(width=3, held=2)  # (id, name) rows read as (id, name, category)


def test_a_short_row_gets_nulls_before_the_columns_an_operator_adds_after_the_inputs() -> None:
    assert GREW(("o1", "n1")) == ("o1", "n1", None)
    assert GREW(("o1", "n1", "c1")) == ("o1", "n1", "c1")
    windowed = Widening(width=6, held=2, tail=3)  # the window's start, end and time last
    assert windowed(("o1", "n1", 0, 10, 9)) == ("o1", "n1", None, 0, 10, 9)
    # a row written between two additions widens the same way
    assert Widening(width=4, held=2)(("o1", "n1", "c1")) == ("o1", "n1", "c1", None)


def test_a_regular_joins_views_read_their_rows_widened() -> None:
    single, unique = SingleRowView(), UniqueKeyView([0])
    single.add(("p1", "n1"))
    unique.add(("o1", "n1"), associations=2)
    widened = views_from_plain(views_to_plain((single, unique)), (), (GREW, GREW))
    assert list(widened[0].records()) == [(("p1", "n1", None), 0)]
    assert list(widened[1].records()) == [(("o1", "n1", None), 2)]
    # the widened row is the one a retraction of the new job's row finds
    widened[1].retract(("o1", "n1", None))
    assert len(widened[1]) == 0


def test_a_hot_keys_paged_rows_are_found_in_the_pages_they_were_put_in_before() -> None:
    """A multiset's rows are their own identities, and place themselves in pages by a hash of
    them: read wider, each is still looked for in its page (hashed by the columns the oldest
    rows hold), and a new row with the added column set goes to a page it is found in next."""
    store, key = CountingStore(), ("p1",)
    view = MultisetView()
    for i in range(600):
        view.add((f"o{i}", i))
    view.rows = settle(view.rows, store, key, 0)
    assert isinstance(view.rows, PagedRows) and view.rows.pages >= 3

    def read() -> MultisetView:
        [again] = views_from_plain(views_to_plain((view,)), (), (GREW,))
        assert isinstance(again, MultisetView) and isinstance(again.rows, PagedRows)
        again.rows.bind(store, key, 0)
        return again

    widened = read()
    assert widened.holds(("o7", 7, None)) and not widened.holds(("o7", 7))
    widened.retract(("o7", 7, None))
    widened.add(("o7", 7, "c1"))
    widened.add(("o600", 600, "c2"))
    view.rows = settle(widened.rows, store, key, 0, hashed_columns(widened, GREW))
    again = read()
    assert again.holds(("o7", 7, "c1")) and again.holds(("o600", 600, "c2"))
    assert not again.holds(("o7", 7, None)) and again.holds(("o8", 8, None))
    assert len(list(again.records())) == 601


def test_interval_and_window_rows_and_a_temporal_tables_versions_read_widened() -> None:
    interval = IntervalBucket({"k": KeyState(left={5: [[("o1", "n1"), False]]})})
    [[row, _joined]] = bucket_from_plain(bucket_to_plain(interval), (GREW, None)).keys["k"].left[5]
    assert row == ("o1", "n1", None)

    windowed = Widening(width=6, held=2, tail=3)
    window = WindowBucket({"k": {10: ([("o1", "n1", 0, 10, 9)], [("p1", 0, 10, 9)])}})
    read = window_bucket_from_plain(window_bucket_to_plain(window), (windowed, None))
    assert read.keys["k"][10] == ([("o1", "n1", None, 0, 10, 9)], [("p1", 0, 10, 9)])

    versions = VersionedKey({5: ("+I", ("p1", "n1"))}, timer=None, last=5)
    assert key_from_plain(key_to_plain(versions), GREW).versions == {5: ("+I", ("p1", "n1", None))}
    waiting = {"p1": [(0, 5, ("o1", "n1"), "+I")]}
    widen_waiting(waiting, GREW)
    assert waiting == {"p1": [(0, 5, ("o1", "n1", None), "+I")]}
