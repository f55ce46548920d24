"""Kafka records -> typed change rows, in Arrow batches (`mapInArrow`), bad records kept aside.

Every output row is either a change (`op`, `seq`, `row`) or a dead letter (`error`, `reason`
and the original record), so a record that cannot be decoded is never dropped: the pipeline
writes dead letters to the dead-letter topic with the error and the source coordinates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
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

from ops.worker_gc import settle_worker
from serdes.dead_letters import DeadLetterTopic
from serdes.formats import Change
from serdes.kafka_produce import OutputRecord
from serdes.kafka_source import HEADER_TYPE, HEADERS_SPARK_TYPE
from serdes.values import EPOCH, DecodeError

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
            StructField("event_time", TimestampType()),
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
            for name in ("op", "seq", "row", "timestamp", "event_time", "reason", "error", "key",
                         "value", "topic", "partition", "offset", "headers")
        }  # fmt: skip

    def change(self, op: str, seq: int, row: tuple, timestamp: Any, event_time: Any,
               record: dict[str, Any] | None = None) -> None:  # fmt: skip
        """A decoded change; `record`, when given, keeps the Kafka record it came from."""
        for name, value in (("op", op), ("seq", seq), ("row", row), ("timestamp", timestamp),
                            ("event_time", event_time)):  # fmt: skip
            self.columns[name].append(value)
        for name in ("reason", "error"):
            self.columns[name].append(None)
        for name in ("key", "value", "topic", "partition", "offset", "headers"):
            self.columns[name].append(None if record is None else record[name])

    def dead_letter(self, error: DecodeError, record: dict[str, Any]) -> None:
        for name in ("op", "seq", "row", "event_time"):
            self.columns[name].append(None)
        self.columns["reason"].append(error.reason)
        self.columns["error"].append(str(error))
        for name in ("timestamp", "key", "value", "topic", "partition", "offset", "headers"):
            self.columns[name].append(record[name])

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(self.columns, schema=schema)


class Tally(Protocol):
    """Where dead letters are counted, by (input, reason): a Spark accumulator."""

    def add(self, counts: dict[tuple[str, str], int]) -> None: ...


# A record's metadata, by Flink's keys (`METADATA FROM 'timestamp'`): what an input's
# `<SIDE>_METADATA` columns are filled with, and where a special time attribute is read.
METADATA: dict[str, Callable[[Format, dict], Any]] = {
    "timestamp": lambda _fmt, record: record["timestamp"],
    "value.source.timestamp": lambda fmt, _record: _from_ms(getattr(fmt, "source_ts_ms", None)),
    "partition": lambda _fmt, record: record["partition"],
    "offset": lambda _fmt, record: record["offset"],
    "topic": lambda _fmt, record: record["topic"],
}
# What a column filled with each key is declared as (Flink's Kafka and Debezium metadata).
METADATA_TYPES = {"timestamp": "TIMESTAMP", "value.source.timestamp": "TIMESTAMP",
                  "partition": "INT", "offset": "BIGINT", "topic": "STRING"}  # fmt: skip
_SPECIAL_TIMES = {"kafka_timestamp": "timestamp", "source_ts_ms": "value.source.timestamp"}


def event_time_of(time: str, row_type: StructType) -> Callable[[Format, dict, tuple], Any]:
    """How a change's event time is found: a column of the row, the Kafka record timestamp,
    Debezium's `source.ts_ms`, or none (`proctime`)."""
    if time in row_type.names:
        index = row_type.names.index(time)
        return lambda _fmt, _record, row: row[index]
    if time in _SPECIAL_TIMES:
        read = METADATA[_SPECIAL_TIMES[time]]
        return lambda fmt, record, _row: read(fmt, record)
    return lambda _fmt, _record, _row: None


def metadata_filler(
    metadata: tuple[tuple[str, str], ...], row_type: StructType
) -> Callable[[Format, dict, tuple], tuple]:
    """The row with its metadata columns (column, key) set from the record (as decoded, the
    row has None there: the value does not carry them)."""
    if not metadata:
        return lambda _fmt, _record, row: row
    setters = [(row_type.names.index(column), METADATA[key]) for column, key in metadata]

    def fill(fmt: Format, record: dict, row: tuple) -> tuple:
        values = list(row)
        for index, read in setters:
            values[index] = read(fmt, record)
        return tuple(values)

    return fill


def _from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else EPOCH + timedelta(milliseconds=ms)


def decoder(
    make_format: Callable[[], Format],
    row_type: StructType,
    side: str,
    time: str = "proctime",
    dead: Tally | None = None,
    letters: DeadLetterTopic | None = None,
    keep_records: bool = False,
    metadata: tuple[tuple[str, str], ...] = (),
):
    """The function for `mapInArrow`: raw Kafka batches in, decoded batches out. With
    `letters`, the records that cannot be decoded are written there once the input is exhausted
    (and counted if written); without, they come out as dead-letter rows (and are counted).
    `keep_records` keeps each change's Kafka record beside it (a later step may dead-letter it:
    the lookup join's failed lookups). `metadata`: the
    columns (column, key) filled from the record (`metadata_filler`)."""
    schema = pa.schema(
        [
            pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"))
            for f in decoded_schema(row_type)
        ]
    )
    assert schema.field("headers").type == HEADER_TYPE

    event_time = event_time_of(time, row_type)
    with_metadata = metadata_filler(metadata, row_type)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        settle_worker()
        fmt = make_format()
        reasons: dict[tuple[str, str], int] = {}
        undecoded: dict[int, list[OutputRecord]] = {}  # by input partition
        for batch in batches:
            out = _Output()
            for record in batch.to_pylist():
                try:
                    changes = fmt.decode(record["key"], record["value"])
                except DecodeError as error:
                    if letters is None:
                        out.dead_letter(error, record)
                    else:
                        letter = letters.letter(error, record)
                        undecoded.setdefault(record["partition"], []).append(letter)
                    reasons[(side, error.reason)] = reasons.get((side, error.reason), 0) + 1
                    continue
                base = record["offset"] * SEQ_PER_RECORD
                for i, (op, decoded) in enumerate(changes):
                    row = with_metadata(fmt, record, decoded)
                    out.change(
                        op,
                        base + i,
                        row,
                        record["timestamp"],
                        event_time(fmt, record, row),
                        record if keep_records else None,
                    )
            yield out.batch(schema)
        if letters is not None:
            written = sum(letters.write(p, found) for p, found in undecoded.items())
            if not written:  # by an earlier attempt of this batch, and counted then
                reasons.clear()
        if dead is not None and reasons:
            dead.add(reasons)

    return decode
