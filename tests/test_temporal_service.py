"""`streamjoin run` with an event-time temporal join of two Debezium changelogs through a real
broker: Flink's own `testEventTimeTemporalJoinChangelogUsingBeforeTime`."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.replay import load_cases, stream_input, stream_records
from tests.kafka_io import join_topics, produce, read_topic
from tests.service import Service, service_env
from tests.test_join_service import state_report
from tests.test_replay import FIXTURES, flink_changes
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

CASE = "flink_temporal_testEventTimeTemporalJoinChangelogUsingBeforeTime"
LATER_MS = 1597881600000  # 2020-08-20: closing rows move both watermarks past every order


def as_ms(text: str | None) -> int | None:
    if text is None:
        return None
    return round(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def test_orders_from_cdc_join_the_rate_valid_at_their_time_as_flink_does(
    kafka: str, tmp_path: Path, spark: SparkSession, capsys: pytest.CaptureFixture
) -> None:
    """The rates table's time is a column, so an update's `-U` carries the old row's time:
    the old rate must stay valid until the new one (order 1 joins Euro 114, not NULL). The
    orders are a changelog too: order 2's update retracts what its old row joined."""
    (case,) = [c for c in load_cases(FIXTURES / "flink_temporal.json") if c["id"] == CASE]
    orders_topic, rates_topic, out = join_topics(kafka)
    streams = case["streams"]
    closing = {"orders": [99, "ZZZ", "no1", 1], "rates": ["ZZZ", "no1", 1]}
    for name, topic in (("orders", orders_topic), ("rates", rates_topic)):
        stream = {
            **streams[name],
            "rows": streams[name]["rows"] + [{"op": "+I", "ts": LATER_MS, "v": closing[name]}],
        }
        source = stream_input("left", name, stream)
        produce(kafka, topic, [value for _key, value, _ts in stream_records(stream, source)])
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=orders_topic,
        RIGHT_TOPIC=rates_topic,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        TRIGGER_INTERVAL="200ms",
        LEFT_FORMAT="debezium-json",
        LEFT_PRIMARY_KEY="order_id",
        LEFT_TIME="order_time",
        LEFT_SCHEMA="order_id BIGINT, currency STRING, currency_no STRING, amount BIGINT, "
        "order_time TIMESTAMP(3)",
        RIGHT_FORMAT="debezium-json",
        RIGHT_PRIMARY_KEY="currency",
        RIGHT_TIME="currency_time",
        RIGHT_SCHEMA="currency STRING, currency_no STRING, rate BIGINT, currency_time TIMESTAMP(3)",
        JOIN_TYPE="temporal",
        JOIN_KIND="left",
        JOIN_ON=case["join"]["on"],
        JOIN_SELECT=case["join"]["select"],
        OUTPUT_ENCODING="retract",
    )
    expected = flink_changes("flink_temporal.jsonl")[CASE]
    closing_row = {
        "order_id": 99,
        "currency": "ZZZ",
        "amount": 1,
        "order_time": LATER_MS,
        "rate": 1,
        "currency_time": LATER_MS,
    }
    expected[("+I", json.dumps(closing_row))] += 1

    def output() -> Counter:
        changes: Counter = Counter()
        for record in read_topic(kafka, out):
            value = json.loads(record.value)
            op = value.pop("op")
            for column in ("order_time", "currency_time"):
                value[column] = as_ms(value[column])
            changes[(op, json.dumps(value))] += 1
        return changes

    service = Service(env, tmp_path / "log")
    try:
        wait_for(lambda: output() == expected, 300, "the output never became Flink's", service)
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    # the stopped job's state: the watermark passed every row, so no order waits, and each rate
    # keeps its last version (RMB's: its delete); the orders' normalizer keeps each live order
    held = state_report(env, capsys, spark)
    by_operator = {(o["operator"], o["side"]): (o["rows"], o["keys"]) for o in held["operators"]}
    assert by_operator == {("join", "right"): (5, 5), ("normalizer", "left"): (6, 6)}
    assert held["left"]["rows"] == 0
    assert held["right"]["oldest_event_time"] == 1597449603000  # Yen's only version
    euro = state_report(env, capsys, spark, "--key", "Euro")
    assert euro["right"]["held"] == [
        {
            "currency": "Euro",
            "currency_no": "no1",
            "rate": 118,
            "currency_time": "2020-08-16T00:01:00+00:00",
        }
    ]
