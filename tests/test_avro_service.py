"""`streamjoin run` with Avro in and out, against a real broker and an HTTP schema registry."""

from __future__ import annotations

import io
import json
import struct
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Producer

from tests.kafka_io import join_topics, read_topic
from tests.schema_registry import SchemaRegistry
from tests.service import Service, service_env
from tests.test_avro import wire
from tests.test_join_service import produce_events
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "product_id", "type": "string"},
    ],
}
BAD = {"bad-magic-byte": b'{"order_id": "x"}', "unknown-schema-id": b"\x00\x00\x00\x03\xe7\x02"}


def avro_values(registry: SchemaRegistry, records) -> list[dict]:
    """Output values decoded with their writer schema from the registry."""
    decoded = []
    for record in records:
        (schema_id,) = struct.unpack(">I", record.value[1:5])
        schema = json.loads(registry.schemas[schema_id - 1])
        decoded.append(fastavro.schemaless_reader(io.BytesIO(record.value[5:]), schema))
    return decoded


def test_avro_orders_joined_to_debezium_products_come_out_as_avro_debezium(
    kafka: str, tmp_path: Path
) -> None:
    orders, products, out = join_topics(kafka)
    with SchemaRegistry() as registry:
        producer = Producer({"bootstrap.servers": kafka})
        for oid, pid in (("o1", "p1"), ("o2", "p2")):
            producer.produce(orders, wire(registry, ORDER, {"order_id": oid, "product_id": pid}))
        for bad in BAD.values():
            producer.produce(orders, bad)
        assert producer.flush(30) == 0
        p1 = {"product_id": "p1", "price": "1.50"}
        produce_events(kafka, products, [{"before": None, "after": p1, "op": "c"}], "product_id")
        env = service_env(
            KAFKA_BOOTSTRAP_SERVERS=kafka,
            LEFT_TOPIC=orders,
            RIGHT_TOPIC=products,
            OUTPUT_TOPIC=out,
            CHECKPOINT_LOCATION=str(tmp_path / "ck"),
            TRIGGER_INTERVAL="200ms",
            SCHEMA_REGISTRY_URL=registry.url,
            LEFT_FORMAT="avro-confluent",
            LEFT_SCHEMA="order_id STRING, product_id STRING",
            RIGHT_FORMAT="debezium-json",
            RIGHT_SCHEMA="product_id STRING, price DECIMAL(10,2)",
            RIGHT_PRIMARY_KEY="product_id",
            JOIN_KIND="left",
            JOIN_ON="L.product_id = R.product_id",
            OUTPUT_ENCODING="debezium-json",
            OUTPUT_FORMAT="avro-confluent",
        )
        service = Service(env, tmp_path / "log")
        try:
            dead = read_topic(kafka, f"{out}.dlq", at_least=len(BAD), timeout_s=240)
            expected = {("o1", "p1", Decimal("1.50")), ("o2", None, None)}

            def joined() -> set:
                table = set()
                for value in avro_values(registry, read_topic(kafka, out)):
                    row = value["after"] or value["before"]
                    entry = (row["L_order_id"], row["R_product_id"], row["R_price"])
                    table.symmetric_difference_update({entry})  # c adds, d removes
                return table

            wait_for(lambda: joined() == expected, 240, "never joined", service)
        finally:
            assert service.terminate() == 0, service.log()[-3000:]
    assert {d.header("streamjoin.error.reason").decode(): d.value for d in dead} == BAD
