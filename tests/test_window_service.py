"""`streamjoin run` with a window join (orders and shipments of the same hour) through a real
broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kafka_io import join_topics, read_topic
from tests.service import Service
from tests.test_interval_service import at, metric, send, shipped_orders_env
from tests.test_service import wait_for

pytestmark = pytest.mark.spark


def test_a_left_window_join_emits_each_hour_once_the_watermark_passes_it(
    kafka: str, tmp_path: Path
) -> None:
    """TUMBLE(1h): o1 (1:10) and its shipment (1:50) share the hour from 1:00; o2 (1:20) is
    shipped at 2:10, in the next hour, so its hour ends with it padded. Each hour comes out
    once later rows move the watermark past its end; a shipment of an hour already out is
    late and dropped."""
    orders, shipments, out = join_topics(kafka)

    def output() -> list[tuple]:
        values = map(json.loads, (r.value for r in read_topic(kafka, out)))
        return [(v["order_id"], v["ship_id"], v["window_start"]) for v in values]

    send(
        kafka,
        (orders, shipments),
        [("o1", at(1, 10)), ("o2", at(1, 20))],
        [("s1", "o1", at(1, 50)), ("s2", "o2", at(2, 10))],
    )
    env = shipped_orders_env(kafka, orders, shipments, out, tmp_path / "ck", "left", 1)
    window = {
        "JOIN_TYPE": "window",
        "JOIN_WINDOW": "TUMBLE(1h)",
        "JOIN_ON": "L.window_start = R.window_start AND L.window_end = R.window_end "
        "AND L.order_id = R.order_id",
        "JOIN_SELECT": "L.order_id, R.ship_id, L.window_start",
    }
    service = Service(env | window, tmp_path / "log")
    hour = "2026-11-22 01:00:00"  # as Flink's JSON writes a time of whole seconds
    expected = [("o1", "s1", hour), ("o2", None, hour)]
    try:
        wait_for(
            lambda: metric(service, "streamjoin_watermark_seconds") is not None,
            240,
            "no watermark",
            service,
        )
        assert output() == []  # the hour from 1:00 is still open
        send(kafka, (orders, shipments), [("o9", at(5))], [("s9", "o9", at(5))])
        wait_for(lambda: sorted(output(), key=str) == expected, 120, "1:00 never came", service)
        send(kafka, (orders, shipments), [], [("s0", "o1", at(1, 30))])
        wait_for(
            lambda: metric(service, 'streamjoin_late_rows_total{side="right"}') == 1,
            60,
            "the shipment of 1:30 was not late",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert sorted(output(), key=str) == expected
