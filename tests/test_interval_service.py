"""`streamjoin run` with an interval join (orders and shipments) through a real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kafka_io import join_topics, produce, read_topic
from tests.service import Service, service_env
from tests.test_service import wait_for

pytestmark = pytest.mark.spark


def at(hour: int, minute: int = 0) -> str:
    return f"2026-11-22 {hour:02d}:{minute:02d}:00.000"


ORDERS = [("o1", at(1)), ("o2", at(2)), ("o3", at(3)), ("o4", at(10))]
SHIPMENTS = [("s1", "o1", at(3)), ("s3", "o3", at(5)), ("s4", "o3", at(6)), ("s2", "o2", at(7))]
# later rows only move both watermarks past every window above
LATER_ORDERS = [("o9", at(23))]
LATER_SHIPMENTS = [("s9", "o9", at(23, 30))]


def test_a_left_interval_join_emits_matches_and_pads_orders_whose_window_closed(
    kafka: str, tmp_path: Path
) -> None:
    orders, shipments, out = join_topics(kafka)
    produce(kafka, orders, [json.dumps({"order_id": o, "ot": t}).encode() for o, t in ORDERS])
    produce(kafka, shipments, [json.dumps({"ship_id": s, "order_id": o, "st": t}).encode()
                               for s, o, t in SHIPMENTS])  # fmt: skip
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka, LEFT_TOPIC=orders, RIGHT_TOPIC=shipments,
        OUTPUT_TOPIC=out, CHECKPOINT_LOCATION=str(tmp_path / "ck"), TRIGGER_INTERVAL="200ms",
        LEFT_SCHEMA="order_id STRING, ot TIMESTAMP(3)", LEFT_TIME="ot",
        RIGHT_SCHEMA="ship_id STRING, order_id STRING, st TIMESTAMP(3)", RIGHT_TIME="st",
        JOIN_TYPE="interval", JOIN_KIND="left", OUTPUT_ENCODING="append",
        JOIN_ON="L.order_id = R.order_id AND L.ot BETWEEN R.st - INTERVAL '4' HOUR AND R.st",
        JOIN_SELECT="L.order_id, R.ship_id",
    )  # fmt: skip
    expected = {("o1", "s1"), ("o3", "s3"), ("o3", "s4"), ("o2", None), ("o4", None)}

    def output() -> list[tuple]:
        return [(v["order_id"], v["ship_id"]) for v in map(json.loads, (
            r.value for r in read_topic(kafka, out)))]  # fmt: skip

    service = Service(env, tmp_path / "log")
    try:
        wait_for(lambda: {("o1", "s1"), ("o3", "s3"), ("o3", "s4")} <= set(output()),
                 240, "the matches never came", service)  # fmt: skip
        produce(kafka, orders, [json.dumps({"order_id": o, "ot": t}).encode()
                                for o, t in LATER_ORDERS])  # fmt: skip
        produce(kafka, shipments, [json.dumps({"ship_id": s, "order_id": o, "st": t}).encode()
                                   for s, o, t in LATER_SHIPMENTS])  # fmt: skip
        wait_for(lambda: expected <= set(output()), 120,
                 "the unmatched orders were never padded", service)  # fmt: skip
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    rows = output()
    assert sorted((r for r in rows if r[0] != "o9"), key=str) == sorted(expected, key=str)
    assert all(r.header("op") == b"+I" for r in read_topic(kafka, out))
