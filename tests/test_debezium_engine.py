"""End to end with a real Debezium engine: PostgreSQL 15 -> Debezium -> Kafka -> streamjoin.

The table keeps PostgreSQL's default REPLICA IDENTITY, so updates arrive without their old
row and deletes with only the key: the service must rebuild both from its normalizer's state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from tests.kafka_io import join_topics, read_topic
from tests.postgres import PostgresCluster
from tests.service import Service, service_env
from tests.test_service import wait_for

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not PostgresCluster.available(), reason="PostgreSQL 15 is not installed"),
]


def table_rows(pg: PostgresCluster) -> Counter:
    lines = pg.sql("SELECT id, customer, amount, status FROM orders ORDER BY id").splitlines()
    return Counter(
        (int(i), c, Decimal(a) if a else None, s or None)
        for i, c, a, s in (line.split("|") for line in lines)
    )


def joined_rows(records) -> Counter:
    table: Counter = Counter()
    for record in records:
        value = json.loads(record.value, parse_float=Decimal)
        amount = value["L_amount"]
        row = (
            value["L_id"],
            value["L_customer"],
            None if amount is None else Decimal(amount).quantize(Decimal("0.01")),
            value["L_status"],
        )
        table[row] += 1 if value["op"] in ("+I", "+U") else -1
    return +table


def test_debezium_captures_of_postgres_decode_into_the_right_changes(
    kafka: str, tmp_path: Path
) -> None:
    cdc, products, out = join_topics(kafka)
    with PostgresCluster() as pg:
        pg.sql(
            "CREATE TABLE orders (id INT PRIMARY KEY, customer TEXT NOT NULL, "
            "amount NUMERIC(10,2), status TEXT)"
        )
        pg.sql("INSERT INTO orders VALUES (1, 'alice', 10.50, 'NEW'), (2, 'bob', 20.00, 'NEW')")
        capture = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.debezium_capture",
                str(pg.port),
                "public.orders",
                kafka,
                cdc,
                str(tmp_path),
            ],
            stdout=(tmp_path / "debezium.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        env = service_env(
            KAFKA_BOOTSTRAP_SERVERS=kafka,
            LEFT_TOPIC=cdc,
            RIGHT_TOPIC=products,
            OUTPUT_TOPIC=out,
            CHECKPOINT_LOCATION=str(tmp_path / "ck"),
            TRIGGER_INTERVAL="200ms",
            LEFT_FORMAT="debezium-json",
            LEFT_SCHEMA="id INT, customer STRING, amount DECIMAL(10,2), status STRING",
            LEFT_PRIMARY_KEY="id",
            LEFT_TIME="source_ts_ms",
            LEFT_WATERMARK_DELAY="5s",
            RIGHT_SCHEMA="id INT, note STRING",
            JOIN_KIND="left",
            JOIN_ON="L.id = R.id",
        )
        service = Service(env, tmp_path / "service.log")
        try:
            read_topic(kafka, cdc, at_least=2, timeout_s=180)  # the snapshot
            pg.sql("INSERT INTO orders VALUES (3, 'carol', 30.25, 'NEW')")
            pg.sql("UPDATE orders SET status = 'PAID', amount = 31.00 WHERE id = 1")
            pg.sql("DELETE FROM orders WHERE id = 2")
            expected = table_rows(pg)
            wait_for(
                lambda: joined_rows(read_topic(kafka, out)) == expected,
                240,
                "the output never matched the table",
                service,
            )
            events = [
                json.loads(r.value)["payload"]["op"]
                for r in read_topic(kafka, cdc)
                if r.value is not None
            ]
        finally:
            capture.terminate()
            capture.wait(30)
            assert service.terminate() == 0, service.log()[-3000:]
    assert events == ["r", "r", "c", "u", "d"]
    ops = Counter(json.loads(r.value)["op"] for r in read_topic(kafka, out))
    # +I: two snapshot rows, carol, alice's new row; -D: alice's old row (rebuilt by the
    # normalizer, since the update had no before image) and bob (whose delete held only the key).
    assert ops == Counter({"+I": 4, "-D": 2})
    assert not read_topic(kafka, f"{out}.dlq")
