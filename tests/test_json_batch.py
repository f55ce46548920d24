"""A batch of JSON records read at once by Arrow gives the rows the record-by-record path gives,
and is not read at once where a record would decode otherwise or not at all."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql.types import StructField, StructType

from serdes.kafka.decode import arrow_schema, decoded_schema, decoder
from serdes.records.formats import JsonFormat, UpsertJsonFormat
from serdes.records.json_batch import JsonBatchReader
from serdes.records.schema import parse_schema
from serdes.records.values import DecodeError
from tests.test_decode import kafka_batch

COLUMNS = parse_schema(
    "id BIGINT, qty INT, tiny TINYINT, name STRING, price DOUBLE, paid BOOLEAN, "
    "at TIMESTAMP(3), note STRING"
)
# a view of a topic of several kinds: `id` and `note` top-level, the rest in the `bid` object
PATHS = [(c.name, ("bid", c.name)) for c in COLUMNS if c.name not in ("id", "note")]
ROW_TYPE = StructType([StructField(c.name, c.spark_type) for c in COLUMNS])
ROW_ARROW = arrow_schema(decoded_schema(ROW_TYPE)).field("row").type

# each field's values: mostly what both paths read, some each path reads its own way or not
GOOD = {
    "qty": [1, -7, 2_147_483_647, None],
    "tiny": [0, 127, -128],
    "name": ["a", "é€😀", 'q"uote\\', "", None],
    "price": [1.5, 2, -0.0, 1e300, 12345678901234567891, None],
    "paid": [True, False, None],
    "at": ["2024-01-31 12:00:00.123", "2024-01-31T12:00:00", "1970-01-01 00:00:00.5", None],
}
ODD = {
    "qty": [2_147_483_648, "12", 1.0, True, [1], {"a": 1}],
    "tiny": [128, -129],
    "name": [10, 1.5, True, {"x": 1}],
    "price": ["1.5", "nan", True],
    "paid": ["true", 1],
    "at": [
        "2024-01-31 12:00:00Z",
        "2024-01-31 12:00:00+02:00",
        "2024-01-31",
        "2024-02-30 00:00:00",
        0,
        1_700_000_000_000,
        "2024-01-31 12:00:00.1234567",
        "0000-01-01 00:00:00",
    ],
}
ODD_RECORDS = [
    b"not json",
    b"",
    b"null",
    b"[1]",
    b' {"id": 1}',
    b'{"id": 1}\n',
    b'{"id": 1}{"id": 2}',
    b'{"id": 1, "id": 2}',
    b'{"id": 99999999999999999999}',
    b'{"id": NaN}',
    b'{"id": 1, "note": "\\ud800"}',
    b'{"id": 1, "note": "a\tb"}',
    b'{"id": 1, "note": "\xff"}',
    b'{"id": 1, "bid": 5}',
    b'{"id": 1, "bid": [1]}',
    b'{"event_type": "2", "id": 1}',
    b'{"event_type": 2.0, "id": 1}',
    b'{"event_type": 2, "id": 1, "bid": {"price": -NaN}}',
    b'{"event_type": 2, "id": 1, "bid": {"price": Inf}}',
    b'{"event_type": 2, "id": 1, "bid": {"price": NaN}}',
    b'{"event_type": 2, "id": 1, "bid": {"price": -0}}',
    b'{"event_type": 2, "id": 1, "bid": {"price": -0.0, "name": "-0"}}',
]


def record(rng: random.Random, odd: bool) -> bytes:
    fields = dict(GOOD)
    if odd:
        name = rng.choice(sorted(ODD))
        fields[name] = ODD[name]
    bid = {name: rng.choice(values) for name, values in fields.items() if rng.random() < 0.9}
    event = {"event_type": rng.choice([2, 2, 2, 1]), "id": rng.choice([1, 2]), "bid": bid}
    if rng.random() < 0.02:
        event["id"] = None  # required: a dead letter where the view keeps the record
    if rng.random() < 0.3:
        event["note"] = rng.choice(["n", None])
    if rng.random() < 0.1:
        event["bid"] = None
    if rng.random() < 0.1:
        event["extra"] = {"nested": [1, {"deep": "x"}]}
    return json.dumps(event, ensure_ascii=rng.random() < 0.5).encode()


def read(
    reader: JsonBatchReader, values: list[bytes | None], keys: list[bytes | None] | None = None
) -> tuple[pa.Array, pa.StructArray] | None:
    keys = keys or [None] * len(values)
    return reader.read(pa.array(values, pa.binary()), pa.array(keys, pa.binary()))


def canonical(changes: list[tuple[str, tuple]]) -> list:
    """Changes compared as a user sees them: -0.0 apart from 0.0, NaN equal to NaN, a time
    as its instant."""

    def value(v: object) -> object:
        if isinstance(v, float):
            return repr(v)
        return v.astimezone(UTC) if isinstance(v, datetime) else v

    return [(op, tuple(value(v) for v in row)) for op, row in changes]


def one_by_one(
    fmt: JsonFormat | UpsertJsonFormat,
    values: list[bytes | None],
    keys: list[bytes | None] | None = None,
) -> tuple[list[int], list[tuple]] | None:
    """What the format decodes, record by record (the records' indices, their changes); None
    where a record is a dead letter."""
    kept, rows = [], []
    for at, (key, value) in enumerate(zip(keys or [None] * len(values), values, strict=True)):
        try:
            changes = fmt.decode(key, value)
        except DecodeError:
            return None
        for op, row in changes:
            kept.append(at)
            rows.append((op, row))
    return kept, rows


def test_rows_read_at_once_are_the_rows_read_one_by_one() -> None:
    rng = random.Random(7)
    fmt = JsonFormat(COLUMNS, ["id"], PATHS, [("event_type", 2)])
    reader = JsonBatchReader.of(fmt, ROW_ARROW)
    assert reader is not None
    read_at_once = 0
    for trial in range(400):
        values = [record(rng, odd=rng.random() < 0.02) for _ in range(rng.randint(1, 12))]
        if trial % 10 == 0:
            values.insert(rng.randrange(len(values) + 1), rng.choice(ODD_RECORDS))
        expected = one_by_one(fmt, values)
        got = read(reader, values)
        if got is None:
            continue
        read_at_once += 1
        assert expected is not None, values  # a record the other path dead-letters
        kept, rows = got
        assert kept.to_pylist() == expected[0], values
        changes = [("+I", tuple(r.values())) for r in rows.to_pylist()]
        assert canonical(changes) == canonical(expected[1]), values
    assert read_at_once > 200  # the common batch is read at once


UPSERT_KEYS = [b"p1", b"17", b'"p2"', b"[1]", b" 3", b"temp", b'{"id": 1}', b"a\xff", None]


def test_an_upsert_batch_read_at_once_is_the_rows_its_values_give_one_by_one() -> None:
    """An upsert topic's row is its value, its key (of one column) a value the row overrides:
    read at once only where no key may fail its record or fill its row, and no value is a
    delete."""
    rng = random.Random(11)
    columns = parse_schema("id STRING, qty INT, at TIMESTAMP(3)")
    fmt = UpsertJsonFormat(columns, ["id"])
    row_type = StructType([StructField(c.name, c.spark_type) for c in columns])
    reader = JsonBatchReader.of(fmt, arrow_schema(decoded_schema(row_type)).field("row").type)
    assert reader is not None
    read_at_once = 0
    for _ in range(300):
        size = rng.randint(1, 8)
        keys = [rng.choice(UPSERT_KEYS[:3]) for _ in range(size)]
        values: list[bytes | None] = [
            json.dumps({"id": rng.choice(["p1", "p2"]), "qty": 3, "at": GOOD["at"][0]}).encode()
            for _ in range(size)
        ]
        if rng.random() < 0.3:
            keys[rng.randrange(size)] = rng.choice(UPSERT_KEYS)
        if rng.random() < 0.1:
            values[rng.randrange(size)] = rng.choice([None, b'{"qty": 1}', b'{"id": null}'])
        expected = one_by_one(fmt, values, keys)
        got = read(reader, values, keys)
        if got is None:
            continue
        read_at_once += 1
        assert expected is not None, (keys, values)
        assert got[0].to_pylist() == expected[0]
        changes = [("+U", tuple(r.values())) for r in got[1].to_pylist()]
        assert changes == expected[1], (keys, values)
    assert read_at_once > 100
    two_columns = UpsertJsonFormat(parse_schema("id STRING, n STRING"), ["id", "n"])
    assert JsonBatchReader.of(two_columns, ROW_ARROW) is None  # its key is a JSON object


def test_a_batch_that_decodes_otherwise_is_left_to_the_record_by_record_path() -> None:
    fmt = JsonFormat(COLUMNS, ["id"], PATHS, [("event_type", 2)])
    reader = JsonBatchReader.of(fmt, ROW_ARROW)
    assert reader is not None
    good = json.dumps({"event_type": 2, "id": 1, "bid": {"qty": 3}}).encode()
    assert read(reader, [good]) is not None
    for odd in ODD_RECORDS:
        assert read(reader, [good, odd]) is None, odd
    missing_key = json.dumps({"event_type": 2, "bid": {"qty": 3}}).encode()
    assert read(reader, [good, missing_key]) is None


def test_columns_it_cannot_read_alike_leave_the_input_to_the_record_by_record_path() -> None:
    for schema in ("d DECIMAL(10, 2)", "d DATE", "f FLOAT", "b BYTES"):
        columns = parse_schema(schema)
        row = arrow_schema(decoded_schema(StructType([StructField("x", columns[0].spark_type)])))
        assert JsonBatchReader.of(JsonFormat(columns, []), row.field("row").type) is None
    where_bool = JsonFormat(COLUMNS, [], PATHS, [("live", True)])
    assert JsonBatchReader.of(where_bool, ROW_ARROW) is None


def test_the_decoder_gives_the_same_batch_either_way() -> None:
    """A batch decoded at once and the same records decoded one by one (a dead letter among
    them sends the batch down that path) give the same changes, times and partitions."""
    rng = random.Random(3)
    good = [record(rng, odd=False) for _ in range(40)]
    run = decoder(
        lambda: JsonFormat(COLUMNS, [], PATHS, [("event_type", 2)]), ROW_TYPE, "left", "at"
    )
    at_once = [r for b in run(iter([kafka_batch(good)])) for r in b.to_pylist()]
    slow = [r for b in run(iter([kafka_batch([*good, b"{oops"])])) for r in b.to_pylist()]
    assert slow[-1]["reason"] == "bad-json"
    assert at_once == slow[:-1]
    assert any(
        r["event_time"] == datetime(2024, 1, 31, 12, 0, 0, 123000, tzinfo=UTC) for r in at_once
    )


def test_the_decoder_gives_an_upsert_batch_the_same_changes_either_way() -> None:
    columns = parse_schema("id STRING, qty INT")
    row_type = StructType([StructField(c.name, c.spark_type) for c in columns])
    run = decoder(lambda: UpsertJsonFormat(columns, ["id"]), row_type, "right")
    values = [json.dumps({"id": f"p{i}", "qty": i}).encode() for i in range(5)]
    at_once = [r for b in run(iter([kafka_batch(values)])) for r in b.to_pylist()]
    with_delete = kafka_batch([*values, None])  # a delete: the batch is read one by one
    slow = [r for b in run(iter([with_delete])) for r in b.to_pylist()]
    assert [(r["op"], r["row"]["qty"]) for r in slow] == [("+U", i) for i in range(5)] + [
        ("-D", None)
    ]
    assert at_once == slow[:-1]
