"""The decoding step (what `mapInArrow` runs): changes, event times and dead letters."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import partial

import pyarrow as pa
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from serdes.kafka.dead_letters import DeadLetterTopic
from serdes.kafka.decode import decoder
from serdes.kafka.source import ARROW_SCHEMA
from serdes.records.formats import DebeziumJsonFormat, JsonFormat, UpsertJsonFormat
from serdes.records.schema import parse_schema
from tests.kafka_io import create_topics, read_topic, unique

ORDERS = parse_schema("order_id STRING, order_time TIMESTAMP(3)")
ROW_TYPE = StructType([StructField(c.name, c.spark_type) for c in ORDERS])
KAFKA_TIME = datetime(2024, 1, 1, tzinfo=UTC)


class Tally:
    def __init__(self) -> None:
        self.counts: dict = {}

    def add(self, counts: dict) -> None:
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v


def kafka_batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": [b"k"] * n,
            "value": values,
            "topic": ["orders"] * n,
            "partition": [2] * n,
            "offset": list(range(10, 10 + n)),
            "timestamp": [KAFKA_TIME] * n,
            "headers": [None] * n,
        },
        schema=ARROW_SCHEMA,
    )


def decode(
    fmt_class, time: str, values: list[bytes | None], tally=None, letters=None
) -> list[dict]:
    make_format = partial(fmt_class, ORDERS, ["order_id"])
    run = decoder(make_format, ROW_TYPE, "left", time, tally, letters)
    return [row for batch in run(iter([kafka_batch(values)])) for row in batch.to_pylist()]


def test_event_time_comes_from_the_configured_attribute() -> None:
    value = json.dumps({"order_id": "o1", "order_time": "1970-01-01 00:01:00"}).encode()
    [by_column] = decode(JsonFormat, "order_time", [value])
    assert by_column["event_time"] == datetime(1970, 1, 1, 0, 1, tzinfo=UTC)
    assert by_column["seq"] == 20 and by_column["op"] == "+I"
    [by_kafka] = decode(JsonFormat, "kafka_timestamp", [value])
    assert by_kafka["event_time"] == KAFKA_TIME
    [none] = decode(JsonFormat, "proctime", [value])
    assert none["event_time"] is None


def test_debezium_source_time_is_the_database_change_time() -> None:
    event = {"op": "c", "after": {"order_id": "o1"}, "source": {"ts_ms": 43_200_000}}
    [change] = decode(DebeziumJsonFormat, "source_ts_ms", [json.dumps(event).encode()])
    assert change["event_time"] == datetime(1970, 1, 1, 12, tzinfo=UTC)


def test_bad_records_become_dead_letters_with_their_coordinates_and_are_counted() -> None:
    tally = Tally()
    good = json.dumps({"order_id": "o1"}).encode()
    rows = decode(JsonFormat, "proctime", [good, b"{oops", good, b'{"order_time": 1}'], tally)
    assert [r["op"] for r in rows] == ["+I", None, "+I", None]
    dead = [r for r in rows if r["error"]]
    assert [(r["reason"], r["offset"], r["partition"], r["topic"]) for r in dead] == [
        ("bad-json", 11, 2, "orders"),
        ("missing-field", 13, 2, "orders"),
    ]
    assert dead[0]["value"] == b"{oops"
    assert tally.counts == {("left", "bad-json"): 1, ("left", "missing-field"): 1}


def test_the_decoding_task_writes_its_dead_letters_itself_and_passes_on_only_changes(
    kafka: str,
) -> None:
    """The service decodes each record once: the dead letters leave from the decoding task,
    not from a second read of the topic."""
    dlq = unique("dlq")
    create_topics(kafka, [dlq])
    tally = Tally()
    good = json.dumps({"order_id": "o1"}).encode()
    letters = DeadLetterTopic(dlq, {"bootstrap.servers": kafka}, None, 0)
    rows = decode(JsonFormat, "proctime", [good, b"{oops", good], tally, letters)
    assert [(r["op"], r["seq"]) for r in rows] == [("+I", 20), ("+I", 24)]
    [letter] = read_topic(kafka, dlq, at_least=1)
    assert (letter.key, letter.value) == (b"k", b"{oops")
    assert letter.header("streamjoin.error.reason") == b"bad-json"
    assert letter.header("streamjoin.source.topic") == b"orders"
    assert letter.header("streamjoin.source.partition") == b"2"
    assert letter.header("streamjoin.source.offset") == b"11"
    assert letter.header("streamjoin.error")
    assert tally.counts == {("left", "bad-json"): 1}


def test_the_decoding_task_keeps_the_largest_event_time_of_the_changes_it_passes_on() -> None:
    """`streamjoin_event_time_max_seconds` comes from here: a record that could not be decoded
    shows no event time, and an input without one reports none."""

    class Largest:
        def __init__(self) -> None:
            self.added: list[dict] = []

        def add(self, largest: dict) -> None:
            self.added.append(largest)

    def value(minute: int) -> bytes:
        return json.dumps({"order_id": "o", "order_time": f"2024-01-01 00:{minute:02}:00"}).encode()

    values = [value(3), value(7), b"{oops", value(5)]
    make_format = partial(JsonFormat, ORDERS, ["order_id"])
    timed, untimed = Largest(), Largest()
    for time, kept in (("order_time", timed), ("proctime", untimed)):
        run = decoder(make_format, ROW_TYPE, "left", time, Tally(), event_times=kept)
        for _ in run(iter([kafka_batch(values[:2]), kafka_batch(values[2:])])):
            pass
    seventh_minute = datetime(2024, 1, 1, 0, 7, tzinfo=UTC)
    assert timed.added == [{("left",): int(seventh_minute.timestamp() * 1000)}]
    assert untimed.added == []


def test_json_in_utf_16_or_32_decodes_as_in_utf_8() -> None:
    """Decoding skips `json.loads`'s encoding detection only for a UTF-8 object: a record in
    another encoding JSON allows (and Jackson detects) still decodes to the same row."""
    text = json.dumps({"order_id": "o€1", "order_time": "1970-01-01 00:01:00"})
    encodings = ("utf-8", "utf-16-le", "utf-16", "utf-32")
    rows = decode(JsonFormat, "order_time", [text.encode(e) for e in encodings])
    assert [(r["op"], r["row"]["order_id"]) for r in rows] == [("+I", "o€1")] * 4
    assert len({r["event_time"] for r in rows}) == 1


def test_a_view_reads_its_kind_of_record_and_its_fields_from_nested_objects() -> None:
    """Nexmark's `bid` view of its one topic: `event_type` 2 only, each column from the
    record's `bid` object; the other kinds are skipped, neither rows nor dead letters."""
    columns = parse_schema("auction BIGINT, price BIGINT, dateTime TIMESTAMP(3)")
    paths = [(c.name, ("bid", c.name)) for c in columns]
    make_format = partial(JsonFormat, columns, [], paths, [("event_type", 2)])
    row_type = StructType([StructField(c.name, c.spark_type) for c in columns])
    bid = {"auction": 7, "price": 100, "dateTime": "1970-01-01 00:00:01.500"}
    values = [
        json.dumps({"event_type": 2, "person": None, "bid": bid}).encode(),
        json.dumps({"event_type": 0, "person": {"id": 1}, "bid": None}).encode(),
        json.dumps({"event_type": 2, "bid": {"auction": 8}}).encode(),
    ]
    run = decoder(make_format, row_type, "left", "dateTime")
    rows = [row for batch in run(iter([kafka_batch(values)])) for row in batch.to_pylist()]
    assert [(r["row"]["auction"], r["row"]["price"]) for r in rows] == [(7, 100), (8, None)]
    assert rows[0]["event_time"] == datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    assert all(r["error"] is None for r in rows)


def test_a_record_no_view_can_read_is_the_first_views_dead_letter_alone() -> None:
    """Two views of one topic: the record that is no JSON object is dead-lettered by the view
    that owns such records, and skipped by the other, so that it is written once."""
    columns = parse_schema("id BIGINT")
    row_type = StructType([StructField("id", columns[0].spark_type)])
    values = [b"not json", None, json.dumps({"event_type": 0, "id": 1}).encode()]

    def rows(unreadable: bool) -> list[tuple]:
        view = partial(JsonFormat, columns, [], (), [("event_type", 0)], unreadable)
        run = decoder(view, row_type, "left")
        out = [row for batch in run(iter([kafka_batch(values)])) for row in batch.to_pylist()]
        return [(r["reason"], r["row"] and r["row"]["id"]) for r in out]

    assert rows(True) == [("bad-json", None), ("null-value", None), (None, 1)]
    assert rows(False) == [(None, 1)]


def test_a_filter_pushed_below_the_join_drops_the_rows_before_they_leave_the_decoder() -> None:
    run = decoder(partial(JsonFormat, ORDERS, []), ROW_TYPE, "left", keep="L.order_id <> 'o2'")
    values = [json.dumps({"order_id": o}).encode() for o in ("o1", "o2", "o3")]
    rows = [row for batch in run(iter([kafka_batch(values)])) for row in batch.to_pylist()]
    assert [r["row"]["order_id"] for r in rows] == ["o1", "o3"]


def test_a_lone_surrogate_in_a_string_is_read_as_a_question_mark_as_flink_reads_it() -> None:
    """JSON may escape half of a surrogate pair alone (`"\\ud83d"`), which no UTF-8 holds: the
    row's column refused it and the decoding task failed, and the query with it. Flink 2.3
    reads "?" in its place (and a whole pair as its character), in values and in keys."""
    values = [
        b'{"order_id": "x\\ud83dy"}',
        b'{"order_id": "\\ud83d\\ude00", "n": NaN}',
        b'{"order_id": "b", "note": "\\udc00"}',
    ]
    rows = decode(JsonFormat, "proctime", values)
    assert [r["row"]["order_id"] for r in rows] == ["x?y", "\U0001f600", "b"]
    fmt = partial(UpsertJsonFormat, parse_schema("id STRING, n INT"), ["id"])
    run = decoder(
        fmt, StructType([StructField("id", StringType()), StructField("n", IntegerType())]), "right"
    )
    batch = kafka_batch([b'{"n": 1}', b'{"n": 2}'])
    batch = batch.set_column(0, "key", pa.array([b'"\\udc00a"', b'"ok"'], pa.binary()))
    upserted = [row for out in run(iter([batch])) for row in out.to_pylist()]
    assert [(r["op"], r["row"]) for r in upserted] == [
        ("+U", {"id": "?a", "n": 1}),
        ("+U", {"id": "ok", "n": 2}),
    ]
