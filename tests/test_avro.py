"""Avro in the Confluent wire format, with writer schemas from a (real, HTTP) registry."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from serdes.records.avro import AvroConfluentFormat, DebeziumAvroFormat, RegistrySchemas
from serdes.records.schema import parse_schema
from serdes.records.values import DecodeError
from tests.schema_registry import SchemaRegistry

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "order_id", "type": "string"},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "order_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
ROW = {
    "type": "record",
    "name": "Value",
    "fields": [
        {"name": "id", "type": "int"},
        {
            "name": "updated",
            "type": ["null", {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}],
        },
    ],
}
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {"name": "before", "type": ["null", ROW]},
        {"name": "after", "type": ["null", "Value"]},
        {"name": "op", "type": "string"},
    ],
}


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistry]:
    with SchemaRegistry() as running:
        yield running


def wire(registry: SchemaRegistry, schema: dict, record: dict) -> bytes:
    """Serialize `record` as a Confluent producer would: register, then id + Avro body."""
    client = SchemaRegistryClient({"url": registry.url})
    schema_id = client.register_schema("t-value", Schema(json.dumps(schema), "AVRO"))
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return struct.pack(">bI", 0, schema_id) + body.getvalue()


def test_avro_records_decode_to_typed_rows(registry: SchemaRegistry) -> None:
    fmt = AvroConfluentFormat(
        parse_schema("order_id STRING, price DECIMAL(10,2), order_time TIMESTAMP(3)"),
        ["order_id"],
        RegistrySchemas(registry.url),
    )
    value = wire(
        registry, ORDER, {"order_id": "o1", "price": Decimal("11.11"), "order_time": 60_000}
    )
    assert fmt.decode(None, value) == [
        ("+I", ("o1", Decimal("11.11"), datetime(1970, 1, 1, 0, 1, tzinfo=UTC)))
    ]


def test_debezium_avro_envelopes_decode_with_connect_time_units(registry: SchemaRegistry) -> None:
    fmt = DebeziumAvroFormat(
        parse_schema("id INT, updated TIMESTAMP(6)"), ["id"], RegistrySchemas(registry.url)
    )
    before, after = {"id": 1, "updated": 1_000_000}, {"id": 1, "updated": 2_500_000}
    value = wire(registry, ENVELOPE, {"before": before, "after": after, "op": "u"})
    assert fmt.decode(b"k", value) == [
        ("-U", (1, datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC))),
        ("+U", (1, datetime(1970, 1, 1, 0, 0, 2, 500_000, tzinfo=UTC))),
    ]
    assert fmt.decode(b"k", None) == []  # tombstone


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"order_id": "o1"}', "bad-magic-byte"),
        (b"\x00\x00\x00\x03\xe7" + b"\x02", "unknown-schema-id"),
    ],
)
def test_bad_avro_records_are_refused_with_a_reason(
    registry: SchemaRegistry, value: bytes, reason: str
) -> None:
    fmt = AvroConfluentFormat(
        parse_schema("order_id STRING"), ["order_id"], RegistrySchemas(registry.url)
    )
    with pytest.raises(DecodeError) as caught:
        fmt.decode(None, value)
    assert caught.value.reason == reason


def test_a_truncated_body_is_bad_avro(registry: SchemaRegistry) -> None:
    fmt = AvroConfluentFormat(
        parse_schema("order_id STRING, price DECIMAL(10,2), order_time TIMESTAMP(3)"),
        ["order_id"],
        RegistrySchemas(registry.url),
    )
    value = wire(registry, ORDER, {"order_id": "o1", "price": Decimal("1.00"), "order_time": 1})
    with pytest.raises(DecodeError) as caught:
        fmt.decode(None, value[:7])
    assert caught.value.reason == "bad-avro"
