"""A JSON input's field read into its declared column as Flink 2.3's json format reads it: each
of 1,600 pairs of a declared type and a field's JSON text, against what Flink read, and a text
read into a time as Flink's CAST reads it (`fixtures/functions/flink_json_reads.json`)."""

from __future__ import annotations

import math
import struct
from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import StructField, StructType

from serdes.kafka.decode import arrow_schema, decoded_schema
from serdes.records.formats import JsonFormat
from serdes.records.json_batch import JsonBatchReader
from serdes.records.schema import parse_schema
from serdes.records.values import DecodeError
from tests.flink_readings import FLINK_JSON_READS

# Where Flink's job fails on a time it cannot parse, the service reads more: an epoch count,
# ISO-8601 with a `T` or an offset, a date alone, a TIMESTAMP_LTZ without its `Z`, a time into a
# DATE.
READ_MORE = ("DATE", "TIMESTAMP")
# a year past 9999, which Flink reads (and prints as the year 0000) and Spark's times do not
# hold: a dead letter here
BEYOND_9999 = '"+10000-01-01"'


def as_flink_casts(kind: str, value: object) -> object:
    """A value as Flink's `CAST(value AS STRING)` writes it; a FLOAT or DOUBLE as its number."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return struct.unpack("f", struct.pack("f", value))[0] if kind == "FLOAT" else value
    if isinstance(value, datetime):
        digits = int(kind.partition("(")[2].rstrip(")"))
        fraction = f"{value.microsecond:06d}000"[:digits]
        return f"{value.year:04d}-{value:%m-%d %H:%M:%S}" + (f".{fraction}" if digits else "")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return str(value + 0)  # no sign on a zero
    return value if value is None or isinstance(value, str) else str(value)


def flinks(kind: str, text: str | None) -> object:
    if text is None or text == "error":
        return text
    if kind in ("FLOAT", "DOUBLE"):
        number = float(text)
        return struct.unpack("f", struct.pack("f", number))[0] if kind == "FLOAT" else number
    return text


def same(ours: object, flink: object) -> bool:
    if isinstance(ours, float) and isinstance(flink, float) and math.isnan(ours):
        return math.isnan(flink)
    return ours == flink


def read_one(fmt: JsonFormat, fragment: str) -> object:
    try:
        [(_op, row)] = fmt.decode(None, f'{{"id": 1, "a": {fragment}}}'.encode())
    except DecodeError:
        return "error"
    return row[1]


@pytest.mark.parametrize("kind", FLINK_JSON_READS["types"])
def test_a_field_reads_as_flinks_json_format_reads_it(kind: str) -> None:
    columns = parse_schema(f"id INT, a {kind}")
    fmt = JsonFormat(columns, ["id"])
    row_type = StructType([StructField(c.name, c.spark_type) for c in columns])
    at_once = JsonBatchReader.of(fmt, arrow_schema(decoded_schema(row_type)).field("row").type)
    for fragment, flink_text in FLINK_JSON_READS["read"][kind].items():
        flink = flinks(kind, flink_text)
        value = read_one(fmt, fragment)
        ours = "error" if value == "error" else as_flink_casts(kind, value)
        if flink in (None, "error") and kind.startswith(READ_MORE):
            continue
        if flink in (None, "error") or (kind, fragment) == ("DATE", BEYOND_9999):
            # NULL, or what Flink fails on (reads as NULL to go on): no value here either
            assert ours in (None, "error"), (kind, fragment, ours)
            continue
        assert same(ours, flink), (kind, fragment, ours, flink)
        record = pa.array([f'{{"id": 1, "a": {fragment}}}'.encode()], pa.binary())
        read = at_once.read(record, pa.array([None], pa.binary())) if at_once else None
        if read is not None:  # read at once by Arrow where it reads as the path above
            assert same(as_flink_casts(kind, read[1].to_pylist()[0]["a"]), flink), fragment


@pytest.mark.parametrize("kind", sorted(FLINK_JSON_READS["cast"]))
def test_a_computed_cast_of_a_text_to_a_time_reads_as_flinks_cast(kind: str) -> None:
    """`t AS CAST(s AS TIMESTAMP(3))` reads the record's `s` as the time: each text Flink's CAST
    turns into a time is that time here (`2024-1-2 3:4:5`, `2024-02-30` as February 29)."""
    fmt = JsonFormat(parse_schema(f"id INT, a {kind}"), ["id"])
    for fragment, flink in FLINK_JSON_READS["cast"][kind].items():
        if flink is not None and fragment != BEYOND_9999:
            assert as_flink_casts(kind, read_one(fmt, fragment)) == flink, (kind, fragment)
