"""The regular join's transformWithState processor, through pyspark's TwsTester (no Spark)."""

from __future__ import annotations

from pyspark.sql import Row
from pyspark.sql.streaming.tws_tester import TwsTester

from state.regular_processor import RegularJoinProcessor, RegularJoinSpec, SideSpec
from state.views import load_view

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
    left = load_view(tester.peekValueState("left", ("p1",))[0])
    assert list(left.records()) == [(("o1", "p1"), 0)]
    assert tester.peekValueState("right", ("p1",)) is None  # an emptied side leaves no state
