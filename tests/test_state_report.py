"""`streamjoin state`: each operator reads back what its stored entries hold, as the layouts
write them; the report's plain text; a checkpoint with no state refused in one line."""

from __future__ import annotations

import os
from pathlib import Path
from unittest.mock import patch

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from app.cli import main
from app.state_report import RowShape, key_text, table
from state.joins.inline import APART
from state.joins.interval_join import Bucket, KeyState, bucket_to_plain
from state.joins.pages import PagedRows
from state.joins.specs import IntervalJoinSpec, RegularJoinSpec, SideSpec, TemporalJoinSpec
from state.spark.interval import IntervalJoinOperator
from state.spark.normalizer import NormalizeOperator
from state.spark.regular import RegularJoinOperator
from state.spark.temporal import EventTimeTemporalJoinOperator
from state.store.encoding import dump, dump_key
from state.store.parked import PARK_FROM_ROWS, park

ORDERS = SideSpec(("order_id", "product_id", "ts"), ("order_id",))
PRODUCTS = SideSpec(("product_id", "price", "ts"), ("product_id",))
PRICES = SideSpec(("product_id", "price", "ts"))  # no unique key: a multiset


def held(operator, variable, name, value, now=0):
    return [
        (h.side, h.key, h.count, h.oldest, h.rows)
        for h in operator.inspect(variable, name, value, now)
    ]


def test_a_regular_join_key_holds_each_sides_rows_and_a_paged_side_its_count() -> None:
    operator = RegularJoinOperator(
        RegularJoinSpec("inner", "L.product_id = R.product_id", ORDERS, PRICES)
    )
    orders = ("unique", (0,), {("o1",): [("o1", "p1", 5), 1, 0], ("o2",): [("o2", "p1", 6), 1, 0]})
    products = ("multiset", {("p1", 10, 4): [2, 0, 0]})
    entry = dump((None, (orders, products)))
    assert held(operator, "keys", dump_key(("p1",)), entry) == [
        ("left", ("p1",), 2, None, [("o1", "p1", 5), ("o2", "p1", 6)]),
        ("right", ("p1",), 2, None, [("p1", 10, 4), ("p1", 10, 4)]),
    ]
    paged = ("unique", (0,), (PagedRows(4, 900, 3).pages, 900, 3))
    entry = dump((None, (paged, ("multiset", {}))))
    assert held(operator, "keys", dump_key(("p1",)), entry) == [("left", ("p1",), 900, None, [])]
    page = dump([(("o7",), [("o7", "p1", 9), 0, 0])])
    assert held(operator, "pages", dump_key((("p1",), 0, 3)), page) == [
        ("left", ("p1",), 0, None, [("o7", "p1", 9)])
    ]
    # orders stored apart: counted and shown from their own entry, the key's entry holding
    # those added since
    added = {("o9",): [("o9", "p1", 8), 0, 0]}
    inline = ("unique", (0,), [(40, 0, None), (1, 0, dump(added))])
    entry = dump((None, (inline, ("multiset", {}))))
    assert held(operator, "keys", dump_key(("p1",)), entry) == [
        ("left", ("p1",), 1, None, [("o9", "p1", 8)])
    ]
    apart = dump({(f"o{i}",): [(f"o{i}", "p1", i), 0, 0] for i in range(40)})
    assert held(operator, "pages", dump_key((("p1",), 0, APART)), apart) == [
        ("left", ("p1",), 40, None, [(f"o{i}", "p1", i) for i in range(40)])
    ]


def test_an_entry_whose_time_has_come_holds_nothing() -> None:
    operator = NormalizeOperator("right", ttl_ms=60_000)
    entry = dump((1_000, (("p1", 10, 4), 4, 0)))
    assert held(operator, "keys", dump_key(("p1",)), entry, now=999) == [
        ("right", ("p1",), 1, 4, [("p1", 10, 4)])
    ]
    assert held(operator, "keys", dump_key(("p1",)), entry, now=1_000) == []


def test_a_temporal_join_holds_versions_by_key_and_probe_rows_in_its_bucket_or_parked() -> None:
    operator = EventTimeTemporalJoinOperator(
        TemporalJoinSpec("left", "L.product_id = R.product_id", ORDERS, PRODUCTS, "ts")
    )
    versions = {4: ("+I", ("p1", 10, 4)), 9: ("+U", ("p1", 12, 9))}
    entry = dump((None, (versions, 9, 9)))
    assert held(operator, "keys", dump_key(("p1",)), entry) == [
        ("right", ("p1",), 2, 4, [("p1", 10, 4), ("p1", 12, 9)])
    ]
    waiting = {("p2",): [(0, 7, ("o1", "p2", 7), "+I"), (1, 3, ("o2", "p2", 3), "+I")]}
    bucket = dump((8, [], waiting, [], None))
    assert held(operator, "bucket", None, bucket) == [
        ("left", ("p2",), 2, 3, [("o1", "p2", 7), ("o2", "p2", 3)])
    ]
    parked, value = park({("p3",): [(2, 5, ("o3", "p3", 5), "+I")] * PARK_FROM_ROWS})
    assert held(operator, "keys", parked[0], value) == [
        ("left", ("p3",), PARK_FROM_ROWS, 5, [("o3", "p3", 5)] * PARK_FROM_ROWS)
    ]


def test_an_interval_join_bucket_holds_each_keys_cached_rows_by_time() -> None:
    operator = IntervalJoinOperator(
        IntervalJoinSpec(
            "inner",
            "L.product_id = R.product_id AND L.ts BETWEEN R.ts - INTERVAL '1' SECOND AND R.ts",
            ORDERS,
            PRODUCTS,
            "ts",
            "ts",
        )
    )
    state = KeyState(left={5: [[("o1", "p1", 5), False]], 2: [[("o2", "p1", 2), True]]})
    bucket = dump(bucket_to_plain(Bucket({("p1",): state})))
    assert held(operator, "bucket", None, bucket) == [
        ("left", ("p1",), 2, 2, [("o1", "p1", 5), ("o2", "p1", 2)])
    ]


def test_rows_are_shown_by_column_and_keys_as_typed() -> None:
    shape = RowShape.of(
        StructType([StructField("id", StringType()), StructField("at", TimestampType())])
    )
    assert shape.show(("o1", 1_500_000)) == {"id": "o1", "at": "1970-01-01T00:00:01.500000+00:00"}
    assert key_text(("p1", 7, b"k")) == ["p1", "7", "k"]


def test_the_report_as_text_names_each_operators_side_and_a_keys_rows() -> None:
    side = {
        "id": 0,
        "operator": "join",
        "side": "left",
        "rows": 3,
        "keys": 2,
        "oldest_event_time": 1_000,
        "largest_keys": [{"key": ["p1"], "rows": 2}],
    }
    result = {"checkpoint": "/ck", "batch": 4, "operators": [side]}
    assert table(result) == [
        "checkpoint /ck, batch 4",
        "held by          rows        keys  oldest event time",
        "join left           3           2  1970-01-01T00:00:01+00:00",
        "largest keys:",
        '  join left: ["p1"] 2 rows',
    ]
    keyed = {**result, "key": ["p1"], "operators": [{**side, "held": [{"order_id": "o1"}]}]}
    assert table(keyed)[-2:] == ["rows held for key p1:", '  join left: {"order_id": "o1"}']


@pytest.mark.spark
def test_a_checkpoint_without_state_is_refused_in_one_line(
    tmp_path: Path, spark: SparkSession, capsys: pytest.CaptureFixture
) -> None:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "LEFT_TOPIC": "orders",
        "RIGHT_TOPIC": "products",
        "OUTPUT_TOPIC": "out",
        "LEFT_SCHEMA": "order_id STRING, product_id STRING",
        "RIGHT_SCHEMA": "product_id STRING, name STRING",
        "JOIN_ON": "L.product_id = R.product_id",
    }
    (tmp_path / "ck").mkdir()
    with patch.dict(os.environ, env, clear=True):  # --checkpoint stands for CHECKPOINT_LOCATION
        assert main(["state", "--checkpoint", str(tmp_path / "ck")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"streamjoin: {tmp_path / 'ck'} holds no")
