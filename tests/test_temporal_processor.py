"""The temporal join processors through pyspark's TwsTester (pandas, no Spark query)."""

from __future__ import annotations

from collections import Counter

import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester

from state.joins.specs import SideSpec, TemporalJoinSpec
from state.store.encoding import dump, load
from tests.frames import join_frame
from tests.test_regular_processor import Reports

SPEC = TemporalJoinSpec(
    "inner",
    "L.currency = R.currency",
    SideSpec(("amount", "currency")),
    SideSpec(("currency", "rate"), ("currency",)),
    "proctime",
)


def changes(*rows: tuple) -> pd.DataFrame:
    """(side, op, seq, row) -> the processor's input columns."""
    records = []
    for side, op, seq, row in rows:
        left = row if side == 0 else (None, None)
        right = row if side == 1 else (None, None)
        key = row[1] if side == 0 else row[0]  # the currency
        records.append(
            {
                "side": side,
                "op": op,
                "seq": seq,
                "ts": None,
                "k0": key,
                "L_amount": left[0],
                "L_currency": left[1],
                "R_currency": right[0],
                "R_rate": right[1],
            }
        )
    return pd.DataFrame(records)


def yen(frame: pd.DataFrame) -> list[int]:
    return [a * r for a, r in zip(frame["L_amount"], frame["R_rate"], strict=True)]


def test_the_seeds_latest_rates_through_the_processing_time_processor() -> None:
    """LatestRates: the Euro moves from 114 to 116 at 10:52; orders at 10:15, 10:30, 10:52."""
    tester = TwsTester(
        join_frame(SPEC, {"L_amount": "integral", "R_rate": "integral"}),
        timeMode="ProcessingTime",
    )
    tester.testInPandas(0, changes((1, "+I", 1, ("Euro", 114)), (1, "+I", 3, ("US Dollar", 102))))
    first = tester.testInPandas(
        0, changes((0, "+I", 10, (2, "Euro")), (0, "+I", 12, (1, "US Dollar")))
    )
    assert yen(first) == [228, 102]
    later = tester.testInPandas(
        0,
        changes(
            (1, "-U", 20, ("Euro", 114)), (1, "+U", 21, ("Euro", 116)), (0, "+I", 22, (2, "Euro"))
        ),
    )
    assert yen(later) == [232]


def test_event_time_orders_wait_for_the_watermark_and_join_the_version_of_their_time() -> None:
    """Orders come out when the watermark passes their time (an engine timer fires
    `handleExpiredTimer`), each with the rate valid then, even when a later order arrived first
    and an earlier one took over the bucket's timer."""
    spec = TemporalJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, "order_time")
    reports = Reports()
    kinds = {"L_amount": "integral", "R_rate": "integral"}
    tester = TwsTester(
        join_frame(spec, kinds, held_rows=reports),
        timeMode="EventTime",
        # The changelog carries its time as a plain `ts`: Spark drops no row as late.
        eventTimeExtractor=lambda _row: float("inf"),
    )

    def at(ms: int, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(ts=ms)

    tester.testInPandas(0, at(0, changes((1, "+I", 1, ("Euro", 114)))))
    assert tester.testInPandas(0, at(500, changes((0, "+I", 10, (3, "Euro"))))).empty
    assert tester.testInPandas(0, at(300, changes((0, "+I", 12, (2, "Euro"))))).empty
    tester.testInPandas(0, at(600, changes((1, "+U", 14, ("Euro", 116)))))
    tester.testInPandas(0, at(650, changes((0, "+I", 16, (1, "Euro")))))
    # held: the orders waiting for the watermark (left), the Euro's two versions (right)
    assert reports.latest == {("join", "left", 0): 3, ("join", "right", 0): 2}
    assert yen(tester.setWatermark(400)) == [228]
    # An order earlier than the one the bucket's timer waits for (500) takes the timer over:
    # one engine timer per bucket (a second one makes Spark warn at every registration).
    assert tester.testInPandas(0, at(450, changes((0, "+I", 18, (4, "Euro"))))).empty
    assert list(tester.handle.listTimers()) == [450]
    assert sorted(yen(tester.setWatermark(700))) == [116, 342, 456]
    assert tester.setWatermark(800).empty
    assert reports.latest == {("join", "left", 0): 0, ("join", "right", 0): 1}


def test_an_order_comes_out_in_the_micro_batch_whose_rows_move_the_watermark_past_it() -> None:
    """Each row carries the watermark its input reaches once the micro-batch is read (`bound`):
    where the task's rows show both inputs', the orders they pass join in that micro-batch, not
    one later when Spark moves the watermark; until both showed theirs, the order waits."""
    spec = TemporalJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, "order_time")
    kinds = {"L_amount": "integral", "R_rate": "integral"}
    tester = TwsTester(
        join_frame(spec, kinds, bounds=True),
        timeMode="EventTime",
        eventTimeExtractor=lambda _row: float("inf"),
    )

    def at(ms: int, bound: int, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(ts=ms, bound=bound)

    only_orders = at(500, 1000, changes((0, "+I", 10, (2, "Euro"))))
    assert tester.testInPandas(0, only_orders).empty  # the rates' watermark is not known yet
    batch = pd.concat(
        [
            at(0, 800, changes((1, "+I", 12, ("Euro", 114)))),
            at(700, 1000, changes((0, "+I", 14, (3, "Euro")))),
            at(900, 1000, changes((0, "+I", 16, (1, "Euro")))),
        ],
        ignore_index=True,
    )
    # the watermark after it: the least of the inputs' (800); the order at 900 waits for it
    assert sorted(yen(tester.testInPandas(0, batch))) == [228, 342]
    assert list(tester.handle.listTimers()) == [900]


def test_after_another_join_rows_released_at_a_watermark_join_as_of_their_time() -> None:
    """The join before emits at a watermark the rows it held for it; in Flink they reach the
    next join before that watermark does. So a later temporal join takes a batch's rows before
    its timers: rows behind the watermark join the versions of their time, at once, and are not
    counted late. As the first join, the same rows came late: they wait for the next watermark."""
    spec = TemporalJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, "order_time")
    kinds = {"L_amount": "integral", "R_rate": "integral"}
    batch = pd.concat(
        [
            changes((1, "+I", 1, ("Euro", 114))).assign(ts=0),
            changes((1, "+U", 2, ("Euro", 116))).assign(ts=600),
            changes((0, "+I", 3, (2, "Euro"))).assign(ts=300),
            changes((0, "+I", 4, (3, "Euro"))).assign(ts=700),
        ],
        ignore_index=True,
    )
    outputs = []
    for number in (2, 1):
        late = LateCounts()
        tester = TwsTester(
            join_frame(spec, kinds, late_rows=late, number=number),
            timeMode="EventTime",
            eventTimeExtractor=lambda _row: float("inf"),
        )
        tester.setWatermark(1000)
        out = tester.testInPandas(0, batch)
        outputs.append(([] if out.empty else yen(out), dict(late)))
    # the table's versions came from its topic, behind the watermark: late in both
    assert outputs == [([228, 348], {("right",): 2}), ([], {("left",): 2, ("right",): 2})]


def _orders(first_seq: int, times: range) -> pd.DataFrame:
    """An order of 1 Euro at each of `times`."""
    return pd.concat(
        [
            changes((0, "+I", first_seq + i, (1, "Euro"))).assign(ts=ms)
            for i, ms in enumerate(times)
        ],
        ignore_index=True,
    )


def test_many_waiting_orders_are_parked_apart_from_the_bucket_and_join_as_of_their_time() -> None:
    """A catch-up leaves micro-batches of orders waiting behind the watermark: each batch's are
    written once to an entry of their own, not carried in the bucket's value that every visit
    reads and writes whole; they come out as of their time, those a watermark leaves waiting
    parked again, and every one once."""
    spec = TemporalJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, "order_time")
    reports = Reports()
    tester = TwsTester(
        join_frame(spec, {"L_amount": "integral", "R_rate": "integral"}, held_rows=reports),
        timeMode="EventTime",
        eventTimeExtractor=lambda _row: float("inf"),
    )
    tester.testInPandas(0, changes((1, "+I", 1, ("Euro", 114))).assign(ts=0))
    tester.testInPandas(0, changes((1, "+U", 2, ("Euro", 116))).assign(ts=1_300))
    bucket = tester.handle.value_states["bucket"].state
    (without_orders,) = (len(value[0]) for value in bucket.values())
    assert tester.testInPandas(0, _orders(10, range(1_000, 1_600))).empty
    assert tester.testInPandas(0, _orders(1_000, range(2_000, 2_600))).empty
    (with_orders,) = (len(value[0]) for value in bucket.values())
    assert with_orders - without_orders < 100  # two parked entries' names, times and counts
    (entries,) = tester.handle.map_states["keys"].state.values()
    assert len(entries) == 1 + 2  # the Euro's versions, each batch's orders
    assert reports.latest[("join", "left", 0)] == 1_200
    assert list(tester.handle.listTimers()) == [1_000]

    keys = tester.handle.map_states["keys"]
    passes = []
    scan = keys.iterator
    keys.iterator = lambda: (passes.append(1), scan())[1]
    first = yen(tester.setWatermark(1_449))  # half the first batch's: the rest parked again
    assert passes == []  # the Euro read by name: a pass would stream the parked orders too
    assert first == [114] * 300 + [116] * 150
    assert reports.latest[("join", "left", 0)] == 750
    assert yen(tester.setWatermark(3_000)) == [116] * 750
    assert reports.latest[("join", "left", 0)] == 0
    (entries,) = tester.handle.map_states["keys"].state.values()
    assert len(entries) == 1  # the Euro's version valid at the watermark


def test_orders_waiting_in_a_bucket_written_before_parking_come_out() -> None:
    """A checkpoint written before rows were parked keeps them in the bucket's value (six
    fields): they come out at their watermark, with those that arrive after."""
    spec = TemporalJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, "order_time")
    tester = TwsTester(
        join_frame(spec, {"L_amount": "integral", "R_rate": "integral"}),
        timeMode="EventTime",
        eventTimeExtractor=lambda _row: float("inf"),
    )
    tester.testInPandas(0, changes((1, "+I", 1, ("Euro", 114))).assign(ts=0))
    waiting = {("Euro",): [(5, 500, (2, "Euro"), "+I"), (6, 700, (3, "Euro"), "+I")]}
    state = tester.handle.value_states["bucket"].state
    ((key, (old,)),) = state.items()
    _timer, timers, _none, ledger, known, token, _parked = load(old)
    state[key] = (dump((500, timers, waiting, ledger, known, token)),)
    tester.handle.registerTimer(500)
    assert tester.testInPandas(0, _orders(10, range(800, 1_200))).empty
    assert yen(tester.setWatermark(2_000)) == [228, 342] + [114] * 400


def test_late_orders_go_to_the_letters_and_late_versions_still_update_the_table() -> None:
    """`LATE_ROWS=dead-letter`: an order behind the watermark is sent on, with the watermark
    it missed, instead of joining the version of its time; a version behind it still enters
    the table, so the orders after it join it."""
    spec = TemporalJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, "order_time")
    kinds = {"L_amount": "integral", "R_rate": "integral"}
    outputs, letters = [], []
    for late_letters in (None, LateLetterBox((0,))):
        tester = TwsTester(
            frame := join_frame(spec, kinds, late_rows=LateCounts(), late_letters=late_letters),
            timeMode="EventTime",
            eventTimeExtractor=lambda _row: float("inf"),
        )
        tester.testInPandas(0, changes((1, "+I", 1, ("Euro", 114))).assign(ts=0))
        tester.setWatermark(1000)
        late = pd.concat(
            [
                changes((1, "+U", 2, ("Euro", 116))).assign(ts=600),
                changes((0, "+I", 3, (2, "Euro"))).assign(ts=300),
                changes((0, "+I", 4, (3, "Euro"))).assign(ts=1500),
            ],
            ignore_index=True,
        )
        tester.testInPandas(0, late)
        outputs.append(yen(tester.setWatermark(2000)))
        frame.close()
        letters.append(late_letters and late_letters.sent)
    assert outputs == [[228, 348], [348]]
    assert letters == [None, [(0, "+I", (2, "Euro"), 300, 1000)]]


class LateLetterBox:
    """A `LateLetters` that keeps what it is sent."""

    def __init__(self, sides: tuple[int, ...]) -> None:
        self.sides = sides
        self.sent: list = []

    def send(self, late: list) -> None:
        self.sent += late


class LateCounts(Counter):
    """A `LateRows` that counts, as the driver's accumulator."""

    def add(self, counts: dict) -> None:
        self.update(counts)
