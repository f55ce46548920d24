"""The Kafka sink: what it writes, and that a record Kafka does not take fails the batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from serdes.kafka_sink import DeliveryError, KafkaStreamWriter
from serdes.kafka_source import HEADER_TYPE
from tests.kafka_io import create_topics, read_topic, unique

SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("headers", HEADER_TYPE),
                    ("topic", pa.string())])  # fmt: skip


def batch(rows: list[tuple]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [dict(zip(SCHEMA.names, row, strict=True)) for row in rows], schema=SCHEMA
    )


def test_records_go_to_their_own_topic_or_the_sinks_with_their_headers(kafka: str) -> None:
    main, side = unique("sink"), unique("sink-dlq")
    create_topics(kafka, [main, side])
    writer = KafkaStreamWriter(main, {"bootstrap.servers": kafka})
    header = [{"key": "h", "value": b"1"}]
    commit = writer.write(iter([batch([(b"k1", b"v1", header, None), (b"k2", b"v2", None, side),
                                       (b"k3", None, None, None)])]))  # fmt: skip
    assert commit.records == 3
    [first, tombstone] = read_topic(kafka, main)
    assert (first.key, first.value, first.header("h")) == (b"k1", b"v1", b"1")
    assert (tombstone.key, tombstone.value) == (b"k3", None)
    assert [(r.key, r.value) for r in read_topic(kafka, side)] == [(b"k2", b"v2")]


def test_undelivered_records_fail_the_write() -> None:
    writer = KafkaStreamWriter(
        "t", {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "1500"}
    )
    with pytest.raises(DeliveryError, match="1 of 1 records to 't' were not delivered"):
        writer.write(iter([batch([(b"k", b"v", None, None)])]))
