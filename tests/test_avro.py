"""Avro in the Confluent wire format, with writer schemas from a (real, HTTP) registry."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from pyspark.sql import types as T

from serdes.records.avro import AvroConfluentFormat, DebeziumAvroFormat, RegistrySchemas
from serdes.records.avro_out import value_schema
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


def test_every_column_type_reads_back_what_the_avro_output_writes(
    registry: SchemaRegistry,
) -> None:
    """A service reading another's Avro output (a chain of services) gets its rows back: the
    input reads each Avro type the output writes, `bytes` included."""
    columns = parse_schema(
        "s STRING, i INT, b BIGINT, t TINYINT, f FLOAT, d DOUBLE, ok BOOLEAN,"
        " price DECIMAL(10,2), day DATE, at TIMESTAMP(3), raw BYTES"
    )
    row = (
        "é",
        -7,
        1 << 40,
        -128,
        0.5,
        -1e300,
        True,
        Decimal("-12.34"),
        date(1969, 7, 20),
        datetime(2024, 2, 29, 23, 59, 59, 999_000, tzinfo=UTC),
        b"\x00\xff",
    )
    schema = value_schema(T.StructType([T.StructField(c.name, c.spark_type) for c in columns]))
    fmt = AvroConfluentFormat(columns, [], RegistrySchemas(registry.url))
    record = dict(zip([c.name for c in columns], row, strict=True))
    assert fmt.decode(None, wire(registry, schema, record)) == [("+I", row)]


def test_avro_bytes_read_into_a_string_column_as_utf8_text(registry: SchemaRegistry) -> None:
    """Avro's schema resolution promotes `bytes` to `string` (UTF-8); bytes that are not
    UTF-8 make the record a dead letter, not a string of Python's `b'...'` notation."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "bytes"}]}
    fmt = AvroConfluentFormat(parse_schema("s STRING"), [], RegistrySchemas(registry.url))
    assert fmt.decode(None, wire(registry, schema, {"s": "é".encode()})) == [("+I", ("é",))]
    with pytest.raises(DecodeError) as caught:
        fmt.decode(None, wire(registry, schema, {"s": b"\xff"}))
    assert caught.value.reason == "wrong-type"


def test_an_avro_double_read_into_a_string_column_as_java_writes_it(
    registry: SchemaRegistry,
) -> None:
    """Flink's Avro format reads any field into a STRING by its Java `toString`: a double is
    `Double.toString`'s text (`1.0E20`), where Python's (`1e+20`) was ours; a dead letter for
    neither."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "double"}]}
    fmt = AvroConfluentFormat(parse_schema("s STRING"), [], RegistrySchemas(registry.url))
    read = [fmt.decode(None, wire(registry, schema, {"s": s})) for s in (1e20, 1.5, 1e-5)]
    assert read == [[("+I", ("1.0E20",))], [("+I", ("1.5",))], [("+I", ("1.0E-5",))]]
