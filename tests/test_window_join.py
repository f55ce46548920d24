"""The window join's semantics (`state.joins.window_join`) and its windows (`JOIN_WINDOW`), in
plain Python."""

from __future__ import annotations

import pytest

from app.config.windows import Windowing, windowing
from state.joins.window_join import Bucket, WindowJoin

# rows: (key, id, window_end in epoch µs); both sides' window_end at position 2
MINUTE_US = 60_000_000


def join(kind: str) -> WindowJoin:
    return WindowJoin(kind, lambda left, right: left[0] == right[0], (2, 2))


def fired_window(kind: str) -> list[tuple]:
    """o1 and its shipment s1, o2 without one, s3 without an order: one window, fired."""
    bucket, window_join = Bucket(), join(kind)
    for side, row in (
        (0, ("a", "o1", MINUTE_US)),
        (0, ("b", "o2", MINUTE_US)),
        (1, ("a", "s1", MINUTE_US)),
        (1, ("c", "s3", MINUTE_US)),
    ):
        window_join.add(bucket, "window", side, row)
    assert window_join.fire_due(bucket, 59_998) == []  # before its end - 1: still open
    out = window_join.fire_due(bucket, 59_999)
    assert bucket.keys == {}  # its rows dropped once it fired
    return [(c.left and c.left[1], c.right and c.right[1]) for c in out]


@pytest.mark.parametrize(
    ("kind", "emitted"),
    [
        ("inner", [("o1", "s1")]),
        ("left", [("o1", "s1"), ("o2", None)]),
        ("right", [("o1", "s1"), (None, "s3")]),
        ("full", [("o1", "s1"), ("o2", None), (None, "s3")]),
        ("semi", [("o1", None)]),
        ("anti", [("o2", None)]),
    ],
)
def test_a_window_joins_once_when_the_watermark_reaches_its_end(
    kind: str, emitted: list[tuple]
) -> None:
    assert fired_window(kind) == emitted


def test_a_window_aggregate_side_joins_its_distinct_groups_once_each() -> None:
    """Nexmark's q8: the sellers of a window grouped by seller (a window aggregate) joined with
    its people grouped by id and name: a seller of three auctions joins once."""
    grouped = WindowJoin("inner", lambda left, right: left[0] == right[0], (2, 2), ((0, 2), (0, 2)))
    bucket = Bucket()
    for side, row in [(0, ("p1", "ann", MINUTE_US)), (0, ("p1", "ann", MINUTE_US))] + [
        (1, ("p1", f"auction{n}", MINUTE_US)) for n in range(3)
    ]:
        grouped.add(bucket, "window", side, row)
    [change] = grouped.fire_due(bucket, 59_999)
    assert (change.left, change.right) == (("p1", "ann", MINUTE_US), ("p1", "auction0", MINUTE_US))


def test_the_next_timer_is_the_earliest_windows_end_less_a_millisecond() -> None:
    bucket, window_join = Bucket(), join("inner")
    window_join.add(bucket, "k", 0, ("a", "o1", 2 * MINUTE_US))
    window_join.add(bucket, "k", 1, ("a", "s1", MINUTE_US))
    assert bucket.next_timer() == 59_999
    assert window_join.fire_due(bucket, 59_999) == []  # no order in the first window
    assert bucket.next_timer() == 119_999
    assert window_join.fired(60_000, 59_999) and not window_join.fired(60_001, 59_999)


@pytest.mark.parametrize(
    ("text", "windows"),
    [
        ("TUMBLE(10s)", Windowing("TUMBLE", 10_000)),
        ("tumble(1d, 2h)", Windowing("TUMBLE", 86_400_000, 0, 7_200_000)),
        ("HOP(5s, 10s)", Windowing("HOP", 10_000, 5_000)),
        ("CUMULATE(4s, 12s)", Windowing("CUMULATE", 12_000, 4_000)),
    ],
)
def test_windows_are_read_as_flinks_functions_take_them(text: str, windows: Windowing) -> None:
    assert windowing(text) == windows
    assert windowing(str(windows)) == windows  # as the SQL compiles them


@pytest.mark.parametrize("text", ["HOP(7s, 10s)", "SESSION(5s)", "TUMBLE(0s)", "TUMBLE", "HOP(5s)"])
def test_windows_flink_refuses_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        windowing(text)
