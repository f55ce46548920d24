"""Real Debezium 3.6 output (tests/fixtures/debezium, copied from shared/debezium) decodes."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from serdes.records.formats import DebeziumJsonFormat, JsonFormat, UpsertJsonFormat
from serdes.records.schema import parse_schema
from serdes.records.values import DecodeError

FIXTURES = Path(__file__).parent / "fixtures" / "debezium"
ORDERS = DebeziumJsonFormat(
    parse_schema("id INT, customer STRING, amount DECIMAL(10,2), status STRING"), ["id"]
)
CUSTOMERS = DebeziumJsonFormat(
    parse_schema(
        "id INT, email STRING, balance DECIMAL(10,2), active BOOLEAN, updated_at TIMESTAMP_LTZ(6)"
    ),
    ["id"],
)
TUTORIAL = DebeziumJsonFormat(
    parse_schema("id INT, first_name STRING, last_name STRING, email STRING"), ["id"]
)
ANNE = (1004, "Anne", "Kretchmar", "annek@noanswer.org")
CAROL_NEW = (3, "carol", Decimal("30.25"), "NEW")
CAROL_PAID = (3, "carol", Decimal("31.00"), "PAID")
ED_AT = datetime(2026, 11, 22, 3, 12, 50, 269446, tzinfo=UTC)

EXPECTED = {
    "generated-pg-snapshot-r": (ORDERS, [("+I", (1, "alice", Decimal("10.50"), "NEW"))]),
    "generated-pg-snapshot-r-2": (ORDERS, [("+I", (2, "bob", Decimal("20.00"), "NEW"))]),
    "generated-pg-create-c": (ORDERS, [("+I", CAROL_NEW)]),
    "generated-pg-update-u": (ORDERS, [("-U", CAROL_NEW), ("+U", CAROL_PAID)]),
    "generated-pg-delete-d": (ORDERS, [("-D", CAROL_PAID)]),
    "generated-pg-defaultident-snapshot-r": (
        CUSTOMERS,
        [
            (
                "+I",
                (
                    1001,
                    "sally@example.com",
                    Decimal("100.00"),
                    True,
                    datetime(2026, 11, 22, 3, 12, 32, 852343, tzinfo=UTC),
                ),
            )
        ],
    ),
    "generated-pg-defaultident-create-c": (
        CUSTOMERS,
        [("+I", (1002, "ed@example.com", Decimal("5.50"), True, ED_AT))],
    ),
    # REPLICA IDENTITY DEFAULT: no before image; the normalizer supplies the -U.
    "generated-pg-defaultident-update-u": (
        CUSTOMERS,
        [("+U", (1002, "ed@example.com", Decimal("7.25"), False, ED_AT))],
    ),
    # ... and a delete's before image carries only the key (the rest are defaults).
    "generated-pg-defaultident-delete-d": (
        CUSTOMERS,
        [("-D", (1002, "", None, None, datetime(1970, 1, 1, tzinfo=UTC)))],
    ),
    "docs-postgresql-create-c": (TUTORIAL, [("+I", (1, *ANNE[1:]))]),
    "docs-tutorial-snapshot-r": (TUTORIAL, [("+I", ANNE)]),
    "test-serde-with-schema-create-c": (TUTORIAL, [("+I", ANNE)]),
    "test-serde-update-u.payload-only": (
        TUTORIAL,
        [("-U", (1004, "Anne-Marie", "Kretchmar", "annek@noanswer.org")), ("+U", ANNE)],
    ),
}


def value_file(name: str) -> Path:
    plain = FIXTURES / f"{name}.json"
    return plain if plain.exists() else FIXTURES / f"{name}.value.json"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_debezium_event_file_decodes_to_its_changes(name: str) -> None:
    fmt, expected = EXPECTED[name]
    assert fmt.decode(None, value_file(name).read_bytes()) == expected


@pytest.mark.parametrize("name", ["generated-pg-tombstone", "generated-pg-defaultident-tombstone"])
def test_tombstones_are_skipped(name: str) -> None:
    tombstone = json.loads((FIXTURES / f"{name}.json").read_text())
    assert tombstone["value"] is None
    assert ORDERS.decode(json.dumps(tombstone["key"]).encode(), None) == []


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("generated-all-events.raw", ORDERS), ("generated-defaultident-all-events.raw", CUSTOMERS)],
)
def test_whole_captures_decode_in_order(name: str, fmt: DebeziumJsonFormat) -> None:
    events = json.loads((FIXTURES / f"{name}.json").read_text())
    ops = [
        op
        for e in events
        for op, _ in fmt.decode(e["key"].encode(), e["value"] and e["value"].encode())
    ]
    assert ops and set(ops) <= {"+I", "-U", "+U", "-D"}
    assert len([e for e in events if e["value"] is None]) >= 1  # the tombstones were there


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", "bad-json"),
        (b"[1, 2]", "bad-json"),
        (b'{"op": "t", "after": null}', "unknown-op"),
        (b'{"op": "c", "after": null}', "missing-field"),
        (b'{"op": "c", "after": {"customer": "x"}}', "missing-field"),
        (b'{"op": "c", "after": {"id": "one"}}', "wrong-type"),
        (b'{"op": "c", "after": {"id": 2147483648}}', "wrong-type"),  # 2^31 for an INT
        (b'{"op": "c", "after": {"id": 1, "amount": "DBw"}}', "wrong-type"),
    ],
)
def test_bad_records_are_refused_with_a_reason(value: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        ORDERS.decode(None, value)
    assert caught.value.reason == reason


def test_plain_json_rows_are_typed() -> None:
    fmt = JsonFormat(parse_schema("id STRING, at TIMESTAMP(3), price DECIMAL(10,2)"), ["id"])
    changes = fmt.decode(None, b'{"id": "o1", "at": "1970-01-01 00:01:00.000", "price": 1.5}')
    assert changes == [("+I", ("o1", datetime(1970, 1, 1, 0, 1, tzinfo=UTC), Decimal("1.50")))]


@pytest.mark.parametrize(
    ("price", "expected"),
    [
        (b"0.125", Decimal("0.13")),
        (b"-0.125", Decimal("-0.13")),
        (b"2.675", Decimal("2.68")),
        (b'"0.125"', Decimal("0.13")),
        (b"99999999.99", Decimal("99999999.99")),
        (b"99999999.995", None),
        (b"123456789012.34", None),
        (b"1e50", None),
    ],
)
def test_a_decimal_is_rounded_half_up_and_null_beyond_its_precision_as_flink_makes_it(
    price: bytes, expected: Decimal | None
) -> None:
    """Flink's `DecimalData.fromBigDecimal`: the number written (2.675, not the double nearest
    it, 2.67499...) rounded to the scale half up, NULL where it then has more digits than the
    precision (a value the column cannot hold failed the decoding task and stopped the query)."""
    fmt = JsonFormat(parse_schema("id STRING, price DECIMAL(10,2)"), ["id"])
    assert fmt.decode(None, b'{"id": "a", "price": %s}' % price) == [("+I", ("a", expected))]


REFUSED = object()  # the record is a dead letter: Flink cannot read the value into the column
# What Flink 2.3's JSON format reads, value by column type: a filesystem table of format `json`
# over `{"id": n, "v": VALUE}` records, each column type in turn.
FLINK_READS = {
    "STRING": [
        (b"true", "true"),
        (b'{"a":1}', '{"a":1}'),
        (b"[1]", "[1]"),
        (b"1.10", "1.10"),
        (b"1E2", "1E2"),
        (b"-1.50E+3", "-1.50E+3"),
        (b"12345678901234567890.5", "12345678901234567890.5"),
        (b"1e400", "1e400"),
        (
            b'{"a": 1e20, "b": [1.10, 1e-5, 12345678.0, 0.001, 9999999.0, -0.0], "c": 5e-324}',
            '{"a":1.0E20,"b":[1.1,1.0E-5,1.2345678E7,0.001,9999999.0,-0.0],"c":4.9E-324}',
        ),
        (b'["a\\nb", "\\u001f", "\\u00e9", null]', '["a\\nb","\\u001F","\u00e9",null]'),
    ],
    "INT": [(b"1.5", 1), (b"-0.0", 0), (b"1e2", 100), (b"2147483648", REFUSED)],
    "BIGINT": [(b"1.5", 1)],
    "TINYINT": [(b"1.5", REFUSED)],
    "DOUBLE": [(b"true", REFUSED), (b'"1_000"', REFUSED), (b'"Infinity"', float("inf"))],
    "FLOAT": [(b"false", REFUSED)],
    "BOOLEAN": [
        (b'"TRUE"', True),
        (b'"True"', True),
        (b'"yes"', False),
        (b"1", False),
        (b"{}", False),
    ],
    "DECIMAL(10,2)": [(b'" 1 "', Decimal("1.00")), (b'"1_000"', REFUSED)],
}


@pytest.mark.parametrize(
    ("column", "value", "flink"),
    [(column, value, flink) for column, reads in FLINK_READS.items() for value, flink in reads],
)
def test_a_json_value_is_read_into_its_column_as_flink_reads_it(
    column: str, value: bytes, flink: object
) -> None:
    """A boolean, object or array into a STRING is its JSON text; a number with a fraction into
    an INT or BIGINT is truncated; a BOOLEAN is true where its text is `true` in any case and
    false otherwise, never refused; a boolean is no DOUBLE; `1_000` is no number (Python's own
    readings took or refused these otherwise)."""
    fmt = JsonFormat(parse_schema(f"id INT, v {column}"), [])
    record = b'{"id": 1, "v": %s}' % value
    if flink is REFUSED:
        with pytest.raises(DecodeError):
            fmt.decode(None, record)
    else:
        assert fmt.decode(None, record) == [("+I", (1, flink))]


WIDE = b"12345678901234567890.123456789012345678"


@pytest.mark.parametrize("fmt_class", [JsonFormat, UpsertJsonFormat, DebeziumJsonFormat])
def test_a_wide_decimal_gets_every_digit_of_its_json_number(fmt_class: type) -> None:
    """Where a row has a DECIMAL, Flink's JSON formats read its numbers as `BigDecimal`: a
    DECIMAL(38,18) gets all 38 digits, not the 17 of a double; the other columns read the
    number as before."""
    columns = parse_schema("id STRING, big DECIMAL(38,18), v DOUBLE, s STRING")
    row = b'{"id": "a", "big": %s, "v": 0.1000000000000000055511151231257827, "s": 1.25}' % WIDE
    value = b'{"op": "c", "after": %s}' % row if fmt_class is DebeziumJsonFormat else row
    [(_, decoded)] = fmt_class(columns, ["id"]).decode(b'"a"', value)
    assert decoded == ("a", Decimal(WIDE.decode()), 0.1, "1.25")


@pytest.mark.parametrize("fmt_class", [JsonFormat, UpsertJsonFormat, DebeziumJsonFormat])
def test_a_json_number_read_into_a_string_column_is_its_text_as_written(fmt_class: type) -> None:
    """Flink's STRING holds a JSON number as the record writes it (`1.10`, `1E2`), in a value
    and in an upsert key, where ours held Python's float text (`1.1`, `100.0`)."""
    columns = parse_schema("id STRING, s STRING, v DOUBLE")
    row = b'{"id": 1.50, "s": 1E2, "v": 1.10}'
    value = b'{"op": "c", "after": %s}' % row if fmt_class is DebeziumJsonFormat else row
    [(_, decoded)] = fmt_class(columns, ["id"]).decode(b"1.50", value)
    assert decoded == ("1.50", "1E2", 1.1)


def test_an_upsert_key_that_is_a_number_is_its_text_in_a_string_column() -> None:
    """A delete's key `1.50` is the key column's `1.50`, as its updates' values give it; a key
    `NaN` (which Python's `json` reads, and Flink refuses) is the text `NaN`, not a failed task."""
    fmt = UpsertJsonFormat(parse_schema("id STRING, s STRING"), ["id"])
    assert fmt.decode(b"1.50", None) == [("-D", ("1.50", None))]
    assert fmt.decode(b"NaN", b'{"s": "x"}') == [("+U", ("NaN", "x"))]
    assert fmt.decode(b"NaN", None) == [("-D", ("NaN", None))]


def test_a_connect_decimal_is_read_at_the_scale_its_schema_gives() -> None:
    """Debezium's `precise` decimals are unscaled bytes at the database column's scale, which
    the Connect schema gives: 123456 at scale 4 is 12.3456, rounded to 12.35 for a
    DECIMAL(10,2) (it was read at the column's scale, 1234.56)."""
    amount = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "field": "amount"}
    after = {
        "type": "struct",
        "field": "after",
        "fields": [{"type": "int32", "field": "id"}, amount | {"parameters": {"scale": "4"}}],
    }
    unscaled = base64.b64encode((123456).to_bytes(3, "big", signed=True)).decode()
    event = {
        "schema": {"type": "struct", "fields": [after]},
        "payload": {"op": "c", "after": {"id": 1, "amount": unscaled}},
    }
    fmt = DebeziumJsonFormat(parse_schema("id INT, amount DECIMAL(10,2)"), ["id"])
    assert fmt.decode(None, json.dumps(event).encode()) == [("+I", (1, Decimal("12.35")))]


def test_a_debezium_date_read_into_a_timestamp_column_is_its_midnight() -> None:
    """Debezium writes a DATE as days since the epoch (`io.debezium.time.Date`); read into a
    TIMESTAMP column (a time attribute) it is that day's midnight in UTC, where it was the day
    count read as milliseconds (1970-01-01 00:00:19.723 for 2024-01-01)."""
    day = {"type": "int32", "name": "io.debezium.time.Date", "field": "shipped"}
    after = {"type": "struct", "field": "after", "fields": [{"type": "int32", "field": "id"}, day]}
    event = {
        "schema": {"type": "struct", "fields": [after]},
        "payload": {"op": "c", "after": {"id": 1, "shipped": 19723}},
    }
    fmt = DebeziumJsonFormat(parse_schema("id INT, shipped TIMESTAMP(3)"), ["id"])
    expected = (1, datetime(2024, 1, 1, tzinfo=UTC))
    assert fmt.decode(None, json.dumps(event).encode()) == [("+I", expected)]


def test_an_unbounded_numeric_of_debezium_is_read_at_its_own_scale() -> None:
    """PostgreSQL's `numeric` without a precision reaches Debezium's JSON as a
    VariableScaleDecimal, `{"scale": s, "value": base64 of the unscaled bytes}`, each value at
    a scale of its own: fitted to the column as any decimal (every such record was a dead
    letter). A scale far beyond any column's makes 0.00 or NULL, not a failed task."""

    def numeric(unscaled: int, scale: int) -> dict:
        raw = unscaled.to_bytes(8, "big", signed=True)
        return {"scale": scale, "value": base64.b64encode(raw).decode()}

    fmt = DebeziumJsonFormat(parse_schema("id INT, amount DECIMAL(10,2)"), ["id"])
    cases = [
        (numeric(123456, 4), Decimal("12.35")),
        (numeric(-5, 0), Decimal("-5.00")),
        (numeric(7, 10**9), Decimal("0.00")),
        (numeric(7, -(10**6)), None),
    ]
    for amount, expected in cases:
        event = {"op": "c", "after": {"id": 1, "amount": amount}}
        assert fmt.decode(None, json.dumps(event).encode()) == [("+I", (1, expected))]


@pytest.mark.parametrize(
    ("where", "kept", "skipped"),
    [
        (
            (("event_type", 1),),
            [
                b'{"event_type": 1}',
                b'{"event_type": "1"}',
                b'{"event_type": 1.0}',
                b'{"event_type": " 1"}',
            ],
            [b'{"event_type": 2}', b'{"event_type": "x"}', b'{"event_type": true}', b"{}"],
        ),
        (
            (("code", "7"),),
            [b'{"code": "7"}', b'{"code": 7}'],
            [b'{"code": "07"}', b'{"code": " 7"}', b'{"code": 7.0}', b'{"code": null}'],
        ),
        (
            (("n", 123456789012345678901),),
            [b'{"n": 123456789012345678901}'],
            [b'{"n": 123456789012345678902}', b'{"n": 123456789012345683968}'],
        ),
    ],
    ids=["int-column", "string-column", "beyond-64-bits"],
)
def test_a_views_where_reads_the_field_as_its_column_does(
    where: tuple, kept: list[bytes], skipped: list[bytes]
) -> None:
    """A view keeps a record whose field reads, as Flink's JSON format reads it into the
    column, as the WHERE's literal: `"1"` and `" 1"` are the INT 1, `7` the STRING '7' (and
    `7.0` is '7.0'), as Flink 2.3 kept them; a whole number beyond 64 bits is compared whole,
    not as the nearest float."""
    fmt = JsonFormat(parse_schema("id STRING"), [], where=where)
    assert [len(fmt.decode(None, value)) for value in kept] == [1] * len(kept)
    assert [len(fmt.decode(None, value)) for value in skipped] == [0] * len(skipped)


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (b'{"id": 123456789012345678901234567890, "v": 1}', "1.0"),
        (b'{"id": 18446744073709551616, "v": -1e400}', "-inf"),
        (b'{"id": -9223372036854775809, "v": 2.5}', "2.5"),
        (b'{"id": 7, "v": NaN, "s": "\\ud83d"}', "nan"),
    ],
    ids=["beyond-64-bits", "beyond-unsigned-64-bits-and-infinity", "below-64-bits", "nan"],
)
def test_json_reads_big_numbers_and_nan_as_the_standard_library_does(
    value: bytes, number: str
) -> None:
    """Whole numbers beyond 64 bits stay whole (a DECIMAL(38,0) gets every digit), NaN and
    Infinity are numbers, as Python's `json` reads them; a record with an escaped lone
    surrogate is read too."""
    fmt = JsonFormat(parse_schema("id DECIMAL(38,0), v DOUBLE, s STRING"), ["id"])
    [(_, (key, v, _))] = fmt.decode(None, value)
    assert key == json.loads(value, parse_float=Decimal)["id"]
    assert str(v) == number


KEYS = sorted(FIXTURES.glob("*.key.json"))


@pytest.mark.parametrize("path", KEYS, ids=[p.name for p in KEYS])
def test_each_debezium_key_file_decodes_as_an_upsert_key(path: Path) -> None:
    fmt = UpsertJsonFormat(parse_schema("id INT, name STRING"), ["id"])
    key = json.loads(path.read_text())
    assert fmt.decode(path.read_bytes(), None) == [("-D", (key["payload"]["id"], None))]


@pytest.mark.parametrize(
    ("schema", "key", "expected"),
    [
        ("id STRING, name STRING", b"p17", "p17"),  # a bare key, not JSON
        ("id STRING, name STRING", b'"p17"', "p17"),  # the same as a JSON string
        ("id STRING, name STRING", b"temp", "temp"),  # starts as `true` would, is not JSON
        ("id INT, name STRING", b"17", 17),
        ("id INT, name STRING", b" 17\n", 17),  # JSON with whitespace around
        ("id INT, name STRING", b"\xef\xbb\xbf17", 17),  # UTF-8 with a byte-order mark
        ("id INT, name STRING", b'{"id": 17}', 17),
        ("id DOUBLE, name STRING", b"-Infinity", float("-inf")),
    ],
)
def test_an_upsert_key_is_read_as_json_where_it_is_json_else_as_its_text(
    schema: str, key: bytes, expected: object
) -> None:
    fmt = UpsertJsonFormat(parse_schema(schema), ["id"])
    assert fmt.decode(key, None) == [("-D", (expected, None))]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"id": "1", "at": 100000000000000000000000000000}', "wrong-type"),
        (b'{"id": "1", "at": 253402300800000}', "wrong-type"),  # year 10000, in epoch ms
        (b'{"id": "1", "at": "9999-12-31 23:59:59-01:00"}', "wrong-type"),  # 10000 in UTC
        (b'{"id": "1", "at": "0001-01-01 00:00:00+01:00"}', "wrong-type"),  # year 0 in UTC
        (b'{"id": "1", "day": 100000000000000000000000000000}', "wrong-type"),
        (b'{"id": "1", "n": "\xc2\xb2"}', "wrong-type"),  # a digit to `isdigit`, not to `int`
        (b'{"id": "1", "n": "%s"}' % (b"1" * 5000), "wrong-type"),
        (b'{"id": "1", "n": %s}' % (b"1" * 5000), "bad-json"),  # beyond Python's 4,300 digits
    ],
    ids=[
        "epoch-beyond-64-bits",
        "epoch-past-9999",
        "offset-past-9999",
        "offset-before-year-1",
        "days-beyond-64-bits",
        "superscript-digit",
        "digits-past-python-limit",
        "number-past-python-limit",
    ],
)
def test_a_value_beyond_its_columns_range_is_a_dead_letter_not_a_failed_task(
    value: bytes, reason: str
) -> None:
    """Values Python's conversions cannot hold raise the decoder's error, which dead-letters
    the record; any other error fails the task and stops the query."""
    fmt = JsonFormat(parse_schema("id STRING, at TIMESTAMP(3), day DATE, n BIGINT"), ["id"])
    with pytest.raises(DecodeError) as caught:
        fmt.decode(None, value)
    assert caught.value.reason == reason


def test_a_whole_number_beyond_a_double_is_infinite_as_flink_reads_it() -> None:
    fmt = JsonFormat(parse_schema("id STRING, v DOUBLE"), ["id"])
    big = b"1" + b"0" * 400
    assert fmt.decode(None, b'{"id": "a", "v": %s}' % big) == [("+I", ("a", float("inf")))]
    assert fmt.decode(None, b'{"id": "a", "v": -%s}' % big) == [("+I", ("a", float("-inf")))]


def test_an_upsert_key_that_is_neither_json_nor_utf8_is_a_dead_letter() -> None:
    fmt = UpsertJsonFormat(parse_schema("id STRING, name STRING"), ["id"])
    for key in (b"a\xff", b"\xff\xfe"):
        with pytest.raises(DecodeError) as caught:
            fmt.decode(key, b'{"name": "x"}')
        assert caught.value.reason == "bad-key"
