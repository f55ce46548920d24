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
import pyarrow.compute as pc
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

from ops.worker.collector import settle_worker
from serdes.kafka.dead_letters import DeadLetterTopic
from serdes.kafka.event_times import WATERMARK_COLUMN
from serdes.kafka.produce import OutputRecord
from serdes.kafka.source import HEADER_TYPE, HEADERS_SPARK_TYPE
from serdes.records.formats import DecodedChange, JsonFormat, UpsertJsonFormat
from serdes.records.json_batch import JsonBatchReader
from serdes.records.values import DecodeError
from state.changes import EPOCH
from state.expr.condition import compile_predicate, parse_condition

# Changes of one Kafka record share its offset: seq = offset * SEQ_PER_RECORD + index.
SEQ_PER_RECORD = 2


class Format(Protocol):
    def decode(self, key: bytes | None, value: bytes | None) -> list[DecodedChange]: ...


def decoded_schema(row_type: StructType) -> StructType:
    return StructType(
        [
            StructField("op", StringType()),
            StructField("seq", LongType()),
            StructField("row", row_type),
            StructField("timestamp", TimestampType()),
            StructField("event_time", TimestampType()),
            StructField(WATERMARK_COLUMN, TimestampType()),  # see `serdes.kafka.event_times`
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


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow batches Spark takes for rows of `schema` (timestamps in UTC)."""
    return pa.schema([pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC")) for f in schema])


RECORD_COLUMNS = ("key", "value", "topic", "partition", "offset", "headers")


class _Output:
    """One output batch, built a column at a time: what was decoded as Python lists, what
    comes from the Kafka record taken from the input batch by row index (`take`), not copied
    through Python objects. Every output row is a change or a dead letter of record `src`."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self.ops: list[str | None] = []
        self.seqs: list[int | None] = []
        self.rows: list[tuple | None] = []
        self.event_times: list[Any] = []
        self.src: list[int] = []  # the record each output row came from
        self.kept: list[int | None] = []  # the record again where its columns are kept
        self.errors: dict[int, DecodeError] = {}  # by output row
        self._records: list[dict[str, Any]] | None = None

    def record(self, index: int) -> dict[str, Any]:
        """Record `index` of the batch as a dict (the batch is converted once, when first
        asked: only metadata columns, a special time attribute or a dead letter need it)."""
        if self._records is None:
            self._records = self.batch.to_pylist()
        return self._records[index]

    def change(
        self, op: str, seq: int, row: tuple, event_time: Any, src: int, keep_record: bool
    ) -> None:
        """A decoded change of record `src`; `keep_record` keeps that record's columns."""
        self.ops.append(op)
        self.seqs.append(seq)
        self.rows.append(row)
        self.event_times.append(event_time)
        self.src.append(src)
        self.kept.append(src if keep_record else None)

    def dead_letter(self, error: DecodeError, src: int) -> None:
        self.errors[len(self.ops)] = error
        for column in (self.ops, self.seqs, self.rows, self.event_times):
            column.append(None)
        self.src.append(src)
        self.kept.append(src)

    def output(self, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.ops)
        kept = pa.array(self.kept, pa.int64()) if any(k is not None for k in self.kept) else None

        def decoded(name: str, values: list) -> pa.Array:
            return pa.array(values, schema.field(name).type)

        def of_error(name: str) -> pa.Array:
            values = [None] * n
            for at, error in self.errors.items():
                values[at] = error.reason if name == "reason" else str(error)
            return pa.array(values, pa.string())

        changes = {
            "op": decoded("op", self.ops),
            "seq": decoded("seq", self.seqs),
            "row": decoded("row", self.rows),
            "event_time": decoded("event_time", self.event_times),
            "reason": of_error("reason"),
            "error": of_error("error"),
        }
        return output_batch(schema, self.batch, pa.array(self.src, pa.int64()), changes, kept)


def output_batch(
    schema: pa.Schema,
    batch: pa.RecordBatch,
    src: pa.Array,
    changes: dict[str, pa.Array],
    kept: pa.Array | None = None,
) -> pa.RecordBatch:
    """The decoded batch: `changes` (op, seq, row, event_time, reason, error), each row of
    record `src` of the input `batch`, with that record's time and partition, and its Kafka
    columns where `kept` names it (null elsewhere: `take` of a null index)."""
    n = len(src)

    def of_record(name: str) -> pa.Array:
        column = batch.column(name)
        return column.take(kept) if kept is not None else pa.nulls(n, column.type)

    columns = (
        changes
        | {
            "timestamp": batch.column("timestamp").take(src),
            WATERMARK_COLUMN: pa.nulls(n, schema.field(WATERMARK_COLUMN).type),
        }
        | {name: of_record(name) for name in RECORD_COLUMNS}
    )
    # every change's partition: the input's watermark is its partitions' least
    columns["partition"] = batch.column("partition").take(src)
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def read_at_once(
    reader: JsonBatchReader,
    batch: pa.RecordBatch,
    schema: pa.Schema,
    time_index: int | None,
    kept: Callable[[tuple, tuple], Any] | None,
) -> pa.RecordBatch | None:
    """The batch decoded by `reader` at once (inserts; a record the view does not keep, or
    whose row the pushed filter `kept` drops, gives none); None where it must be decoded record
    by record (`serdes.records.json_batch`)."""
    read = reader.read(batch.column("value"), batch.column("key"))
    if read is None:
        return None
    src, rows = read
    if kept is not None:
        values = [tuple(row.values()) for row in rows.to_pylist()]
        mask = pa.array([kept(row, row) is True for row in values], pa.bool_())
        src, rows = src.filter(mask), rows.filter(mask)
    n = len(src)
    event_type = schema.field("event_time").type
    changes = {
        "op": pa.repeat(pa.scalar(reader.op, pa.string()), n),
        "seq": pc.multiply(batch.column("offset").take(src), SEQ_PER_RECORD),
        "row": rows,
        "event_time": rows.field(time_index) if time_index is not None else pa.nulls(n, event_type),
        "reason": pa.nulls(n, pa.string()),
        "error": pa.nulls(n, pa.string()),
    }
    return output_batch(schema, batch, src, changes)


class Tally(Protocol):
    """Where dead letters are counted, by (input, reason): a Spark accumulator."""

    def add(self, counts: dict[tuple[str, str], int]) -> None: ...


class EventTimes(Protocol):
    """Where each input's largest event time (epoch ms) is kept, by (input,): a Spark
    accumulator (`ops.metrics.LargestEventTimes`)."""

    def add(self, largest: dict[tuple[str], int]) -> None: ...


def largest_event_time(batch: pa.RecordBatch, before: int | None) -> int | None:
    """The largest event time (epoch ms) of a decoded batch's changes and `before`."""
    times = batch.column("event_time").filter(pc.is_null(batch.column("error")))
    found = pc.max(times.cast(pa.int64())).as_py()  # microseconds, None for none
    if found is None:
        return before
    return found // 1000 if before is None else max(before, found // 1000)


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
METADATA_TYPES = {
    "timestamp": "TIMESTAMP",
    "value.source.timestamp": "TIMESTAMP",
    "partition": "INT",
    "offset": "BIGINT",
    "topic": "STRING",
}
_SPECIAL_TIMES = {"kafka_timestamp": "timestamp", "source_ts_ms": "value.source.timestamp"}
_RECORD_KEYS = {"timestamp", "partition", "offset", "topic"}


def event_time_of(time: str, row_type: StructType) -> Callable[[Format, dict | None, tuple], Any]:
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
) -> Callable[[Format, dict | None, tuple], tuple]:
    """The row with its metadata columns (column, key) set from the record (as decoded, the
    row has None there: the value does not carry them)."""
    if not metadata:
        return lambda _fmt, _record, row: row
    setters = [(row_type.names.index(column), METADATA[key]) for column, key in metadata]

    def fill(fmt: Format, record: dict | None, row: tuple) -> tuple:
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
    keep: str | None = None,
    event_times: EventTimes | None = None,
):
    """The function for `mapInArrow`: raw Kafka batches in, decoded batches out. With
    `letters`, the records that cannot be decoded are written there once the input is exhausted
    (and counted if written); without, they come out as dead-letter rows (and are counted).
    `keep_records` keeps each change's Kafka record beside it (a later step may dead-letter it:
    the lookup join's failed lookups). `metadata`: the
    columns (column, key) filled from the record (`metadata_filler`). `keep`: a condition over
    the row's columns (`L.x` or `R.x` alike) a change must meet to be kept (a filter pushed
    below the join, `app.plan.pushdown`). `event_times` keeps the largest event time of the
    changes, where the input has one."""
    schema = arrow_schema(decoded_schema(row_type))
    assert schema.field("headers").type == HEADER_TYPE

    event_time = event_time_of(time, row_type)
    with_metadata = metadata_filler(metadata, row_type)
    # what is read off the Kafka record itself (Debezium's source time is in the value)
    needs_record = time == "kafka_timestamp" or any(k in _RECORD_KEYS for _, k in metadata)
    timed = event_times if time != "proctime" else None

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        settle_worker()
        fmt = make_format()
        kept = None
        if keep is not None:  # compiled where it runs: an evaluator is closures of closures
            names = row_type.names
            kept = compile_predicate(parse_condition(keep), names, names)
        reasons: dict[tuple[str, str], int] = {}
        undecoded: dict[int, list[OutputRecord]] = {}  # by input partition
        may_keep = fmt.may_keep if isinstance(fmt, JsonFormat) else None
        # plain JSON whose rows are the record's values alone: read a batch at a time
        at_once = None
        plain = not (metadata or keep_records or needs_record)
        json_rows = isinstance(fmt, JsonFormat | UpsertJsonFormat)
        if json_rows and plain and (time in row_type.names or time == "proctime"):
            at_once = JsonBatchReader.of(fmt, schema.field("row").type)
        time_index = row_type.names.index(time) if time in row_type.names else None
        largest = None
        for batch in batches:
            if may_keep is not None:  # the records this view of the topic may keep, unparsed
                batch = batch.filter(may_keep(batch.column("value")))
            read = at_once and read_at_once(at_once, batch, schema, time_index, kept)
            if read is not None:
                if timed is not None:
                    largest = largest_event_time(read, largest)
                yield read
                continue
            out = _Output(batch)
            for src, (key, value, offset) in enumerate(
                zip(
                    batch.column("key").to_pylist(),
                    batch.column("value").to_pylist(),
                    batch.column("offset").to_pylist(),
                    strict=True,
                )
            ):
                try:
                    changes = fmt.decode(key, value)
                except DecodeError as error:
                    if letters is None:
                        out.dead_letter(error, src)
                    else:
                        letter = letters.letter(error, out.record(src))
                        undecoded.setdefault(out.record(src)["partition"], []).append(letter)
                    reasons[(side, error.reason)] = reasons.get((side, error.reason), 0) + 1
                    continue
                base = offset * SEQ_PER_RECORD
                for i, (op, decoded) in enumerate(changes):
                    record = out.record(src) if needs_record else None
                    row = with_metadata(fmt, record, decoded) if metadata else decoded
                    if kept is not None and kept(row, row) is not True:
                        continue
                    out.change(op, base + i, row, event_time(fmt, record, row), src, keep_records)
            decoded = out.output(schema)
            if timed is not None:
                largest = largest_event_time(decoded, largest)
            yield decoded
        if letters is not None:
            written = sum(letters.write(p, found) for p, found in undecoded.items())
            if not written:  # by an earlier attempt of this batch, and counted then
                reasons.clear()
        if dead is not None and reasons:
            dead.add(reasons)
        if timed is not None and largest is not None:
            timed.add({(side,): largest})

    return decode
