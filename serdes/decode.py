"""Kafka records -> typed change rows, in Arrow batches (`mapInArrow`), bad records kept aside.

Every output row is either a change (`op`, `seq`, `row`) or a dead letter (`error`, `reason`
and the original record), so a record that cannot be decoded is never dropped: the pipeline
writes dead letters to the dead-letter topic with the error and the source coordinates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from serdes.formats import Change
from serdes.kafka_source import HEADER_TYPE, HEADERS_SPARK_TYPE
from serdes.values import DecodeError

# Changes of one Kafka record share its offset: seq = offset * SEQ_PER_RECORD + index.
SEQ_PER_RECORD = 2


class Format(Protocol):
    def decode(self, key: bytes | None, value: bytes | None) -> list[Change]: ...


def decoded_schema(row_type: StructType) -> StructType:
    return StructType(
        [
            StructField("op", StringType()),
            StructField("seq", LongType()),
            StructField("row", row_type),
            StructField("timestamp", TimestampType()),
            StructField("reason", StringType()),
            StructField("error", StringType()),
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("headers", HEADERS_SPARK_TYPE),
        ]
    )


class _Output:
    """Column buffers for one output batch."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {
            name: []
            for name in ("op", "seq", "row", "timestamp", "reason", "error", "key", "value",
                         "topic", "partition", "offset", "headers")
        }  # fmt: skip

    def change(self, op: str, seq: int, row: tuple, timestamp: Any) -> None:
        for name, value in (("op", op), ("seq", seq), ("row", row), ("timestamp", timestamp)):
            self.columns[name].append(value)
        for name in ("reason", "error", "key", "value", "topic", "partition", "offset", "headers"):
            self.columns[name].append(None)

    def dead_letter(self, error: DecodeError, record: dict[str, Any]) -> None:
        for name in ("op", "seq", "row"):
            self.columns[name].append(None)
        self.columns["reason"].append(error.reason)
        self.columns["error"].append(str(error))
        for name in ("timestamp", "key", "value", "topic", "partition", "offset", "headers"):
            self.columns[name].append(record[name])

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(self.columns, schema=schema)


def decoder(make_format: Callable[[], Format], row_type: StructType):
    """The function for `mapInArrow`: raw Kafka batches in, decoded batches out."""
    schema = pa.schema(
        [
            pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"))
            for f in decoded_schema(row_type)
        ]
    )
    assert schema.field("headers").type == HEADER_TYPE

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fmt = make_format()
        for batch in batches:
            out = _Output()
            for record in batch.to_pylist():
                try:
                    changes = fmt.decode(record["key"], record["value"])
                except DecodeError as error:
                    out.dead_letter(error, record)
                    continue
                base = record["offset"] * SEQ_PER_RECORD
                for i, (op, row) in enumerate(changes):
                    out.change(op, base + i, row, record["timestamp"])
            yield out.batch(schema)

    return decode
