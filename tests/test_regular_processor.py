"""The regular join's transformWithState processor, through pyspark's TwsTester (no Spark)."""

from __future__ import annotations

from pyspark.sql import Row
from pyspark.sql.streaming.tws_tester import TwsTester

from state.regular_processor import RegularJoinProcessor, RegularJoinSpec, SideSpec
from state.views import load_views

SPEC = RegularJoinSpec(
    "left",
    "L.product_id = R.product_id",
    SideSpec(("order_id", "product_id"), ("order_id",)),
    SideSpec(("product_id", "price"), ("product_id",)),
)
OUT = ["op", "L_order_id", "L_product_id", "R_product_id", "R_price"]
In = Row("side", "op", "seq", "left", "right")


def test_rows_of_a_key_are_joined_in_arrival_order_and_state_carries_over() -> None:
    tester = TwsTester(RegularJoinProcessor(SPEC, OUT))
    first = tester.test(
        ("p1",),
        [  # delivered out of order: the processor orders by seq
            In(1, "+I", 3, None, Row(product_id="p1", price=10)),
            In(0, "+I", 1, Row(order_id="o1", product_id="p1"), None),
        ],
    )
    assert [tuple(r) for r in first] == [
        ("+I", "o1", "p1", None, None),
        ("-D", "o1", "p1", None, None),
        ("+I", "o1", "p1", "p1", 10),
    ]
    second = tester.test(("p1",), [In(1, "-D", 5, None, Row(product_id="p1", price=10))])
    assert [tuple(r) for r in second] == [
        ("-D", "o1", "p1", "p1", 10),
        ("+I", "o1", "p1", None, None),
    ]
    left, right = load_views(tester.peekValueState("join", ("p1",))[0])
    assert list(left.records()) == [(("o1", "p1"), 0)]
    assert len(right) == 0
    tester.test(("p1",), [In(0, "-D", 7, Row(order_id="o1", product_id="p1"), None)])
    assert tester.peekValueState("join", ("p1",)) is None  # an emptied key leaves no state


class Tally:
    def __init__(self) -> None:
        self.total = 0

    def add(self, amount: int) -> None:
        self.total += amount


def test_idle_state_is_dropped_after_the_retention_time_and_counted() -> None:
    expired = Tally()
    spec = RegularJoinSpec(SPEC.kind, SPEC.on, SPEC.left, SPEC.right, state_ttl_ms=1000)
    tester = TwsTester(RegularJoinProcessor(spec, OUT, expired), timeMode="ProcessingTime")
    tester.setProcessingTime(100)
    tester.test(("p1",), [In(0, "+I", 1, Row(order_id="o1", product_id="p1"), None)])
    tester.setProcessingTime(600)
    tester.test(("p1",), [In(0, "+I", 2, Row(order_id="o2", product_id="p1"), None)])
    tester.setProcessingTime(1300)  # the first write's timer: the key was touched since
    assert tester.peekValueState("join", ("p1",)) is not None
    assert expired.total == 0
    tester.setProcessingTime(1700)  # idle for the retention time
    assert tester.peekValueState("join", ("p1",)) is None
    assert expired.total == 2
    # The key starts afresh: the late right row finds no order to join.
    fresh = tester.test(("p1",), [In(1, "+I", 3, None, Row(product_id="p1", price=1))])
    assert fresh == []


def test_an_update_whose_after_image_comes_first_in_a_batch_is_applied_in_seq_order() -> None:
    """A Debezium update is `-U before` (seq 2n) then `+U after` (2n+1); the shuffle may deliver
    the `+U` first. Flink's result: the old joined row retracted, then the new one."""
    spec = RegularJoinSpec(
        "inner",
        "L.product_id = R.product_id",
        SideSpec(("order_id", "product_id", "qty"), ("order_id",)),
        SideSpec(("product_id", "price"), ("product_id",)),
    )
    out = ["op", "L_order_id", "L_product_id", "L_qty", "R_product_id", "R_price"]
    tester = TwsTester(RegularJoinProcessor(spec, out))
    tester.test(
        ("p1",),
        [In(1, "+I", 2, None, Row(product_id="p1", price=10)),
         In(0, "+I", 4, Row(order_id="o1", product_id="p1", qty=1), None)],
    )  # fmt: skip
    update = tester.test(
        ("p1",),
        [In(0, "+U", 15, Row(order_id="o1", product_id="p1", qty=2), None),
         In(0, "-U", 14, Row(order_id="o1", product_id="p1", qty=1), None)],
    )  # fmt: skip
    assert [tuple(r) for r in update] == [
        ("-U", "o1", "p1", 1, "p1", 10),
        ("+U", "o1", "p1", 2, "p1", 10),
    ]
    left, _right = load_views(tester.peekValueState("join", ("p1",))[0])
    assert [row for row, _ in left.records()] == [("o1", "p1", 2)]
