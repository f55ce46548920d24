"""Typed column values from what JSON and Kafka Connect put on the wire.

A converter is chosen once per column (from its declared Spark type and, for Debezium, the
Connect schema of the field) and then applied to every value. A value that does not fit raises
`DecodeError`, which sends the whole record to the dead-letter topic.
"""

from __future__ import annotations

import base64
import calendar
import math
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from pyspark.sql import types as T

from state.changes import EPOCH
from state.decimals import decimal_fitting
from state.java_text import double_text, json_text

Converter = Callable[[Any], Any]


class DecodeError(ValueError):
    """A record that cannot be decoded; `reason` is a short, countable category."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _wrong(value: Any, expected: str) -> DecodeError:
    return DecodeError("wrong-type", f"expected {expected}, got {value!r}"[:300])


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):  # Avro promotes `bytes` to `string` as UTF-8 text
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise _wrong(value, "UTF-8 text") from None
    if isinstance(value, ExactNumber):  # a JSON number as written, as Flink's STRING holds it
        return value.text
    if isinstance(value, bool):  # as Flink reads a JSON boolean into a STRING
        return "true" if value else "false"
    if isinstance(value, float):  # an Avro float or double, as Java writes it
        return double_text(value)
    if isinstance(value, dict | list):  # as Flink reads an object or an array: its JSON text
        return json_text(value)
    return str(value)


def _integer(bits: int) -> Converter:
    """A whole number that fits the column's `bits` (as Flink's JSON format, which fails to
    parse 2^31 for an INT column, instead of letting it wrap or fail the query later). An INT
    or BIGINT also takes a number with a fraction within its range, truncated, as Flink's
    does (1.5 is 1); a TINYINT or SMALLINT refuses it, as Flink's does."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    truncates = bits >= 32

    def convert(value: Any) -> int:
        if type(value) is int and low <= value <= high:  # the common case first (not a bool)
            return value
        if truncates and isinstance(value, float) and low <= value <= high:
            return int(value)  # toward zero; NaN is in no range
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            try:
                value = int(value)  # Flink trims the text it reads as a number
            except ValueError:  # a digit `int` does not read ("²"), beyond 4,300 digits
                raise _wrong(value, f"an integer of {bits} bits") from None
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        raise _wrong(value, f"an integer of {bits} bits")

    return convert


_INTEGER_BITS = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64}


# The text Java's `Double.parseDouble` reads (Flink's reading of a string into a DOUBLE), less
# its hexadecimal forms; Python's `float` also takes `inf`, `nan` in any case and `1_000`.
_DOUBLE_TEXT = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if isinstance(value, float):  # an `ExactNumber`: the column holds the plain float
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # beyond a double: infinite, as `1e400` reads and Flink reads it
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        text = value.strip().rstrip("dDfF")  # Java's type suffixes (`1.5d`)
        if _DOUBLE_TEXT.fullmatch(text):
            return float(text)
    if isinstance(value, Decimal):  # Avro's decimals
        return float(value)
    raise _wrong(value, "a number")


def _boolean(value: Any) -> bool:
    """As Flink reads a BOOLEAN: a JSON boolean, else whether its text is `true` in any case
    (Java's `Boolean.parseBoolean`): `"TRUE"` is true, `"yes"`, `1` and `{}` are false."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() == "true"


class ExactNumber(float):
    """A JSON number read as a float that keeps its text: where an input has a DECIMAL column,
    a number of more digits than a double holds is read this way (`serdes.records.formats`),
    so that the column gets its exact value, as Flink's JSON formats read numbers as
    `BigDecimal` when the row has a DECIMAL; every other column reads it as the float."""

    text: str

    def __new__(cls, text: str) -> ExactNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _decimal(precision: int, scale: int, unscaled_scale: int | None) -> Converter:
    """A DECIMAL(precision, scale) value, as Flink's `DecimalData.fromBigDecimal` makes it:
    rounded to `scale` half up, NULL where it then has more than `precision` digits.
    `unscaled_scale`: text is Kafka Connect's Decimal (`_unscaled`) at that scale, the writer's,
    where the field's schema says so."""
    fit = decimal_fitting(precision, scale)

    def fitted(number: Decimal, value: Any) -> Decimal | None:
        if not number.is_finite():
            raise _wrong(value, "a decimal")
        return fit(number)

    def convert(value: Any) -> Decimal | None:
        if unscaled_scale is not None and isinstance(value, str):
            return fitted(_scaled(_unscaled(value), unscaled_scale, value), value)
        if isinstance(value, dict):  # Debezium's VariableScaleDecimal: a numeric of any scale
            scale_of, unscaled = value.get("scale"), value.get("value")
            if type(scale_of) is not int or not isinstance(unscaled, str | bytes):
                raise _wrong(value, "a decimal")
            return fitted(_scaled(_unscaled(unscaled), scale_of, value), value)
        if isinstance(value, bool):
            raise _wrong(value, "a decimal")
        if isinstance(value, str) and "_" in value:
            raise _wrong(value, "a decimal")  # `1_000`: Python's `Decimal` reads it, Java's not
        text = value.text if isinstance(value, ExactNumber) else str(value)
        try:
            number = Decimal(text)
        except InvalidOperation:
            raise _wrong(value, "a decimal") from None
        return fitted(number, value)

    return convert


def _unscaled(value: str | bytes) -> Decimal:
    """A Kafka Connect Decimal's unscaled value: the big-endian two's-complement integer of its
    bytes, base64 in JSON, as they are in Avro."""
    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else value
    except ValueError:
        raise _wrong(value, "base64 Connect Decimal bytes") from None
    return Decimal(int.from_bytes(raw, "big", signed=True))


def _scaled(unscaled: Decimal, scale: int, value: Any) -> Decimal:
    """`unscaled` at `scale`, exactly: a scale from the data may be any, which `scaleb` would
    round, or raise for, at the context's limits."""
    sign, digits, exponent = unscaled.as_tuple()
    try:
        return Decimal((sign, digits, int(exponent) - scale))
    except (ArithmeticError, ValueError):
        raise _wrong(value, "a decimal of a scale Python can hold") from None


def _connect_scale(connect: dict[str, Any], column_scale: int) -> int | None:
    """The scale of a Connect Decimal field's unscaled bytes: its `scale` parameter, or the
    column's for a `bytes` field without one; None where the field is no Connect Decimal."""
    scale = (connect.get("parameters") or {}).get("scale")
    if scale is None:
        return column_scale if connect.get("type") == "bytes" else None
    try:
        return int(scale)
    except (TypeError, ValueError):
        raise DecodeError("bad-envelope", f"a Connect Decimal's scale {scale!r}") from None


def _parse_timestamp_text(text: str) -> datetime:
    """`yyyy-MM-dd HH:mm:ss[.fff]` (Flink's SQL format) or ISO-8601, with or without offset."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        parsed = _resolved_smartly(text)
        if parsed is None:
            raise _wrong(text, "a timestamp like 2024-01-31 12:00:00.000") from None
    return _in_range(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC), text)


# Flink's SQL format, as its CAST of a text reads it too (a part of one digit, a date alone),
# `Z` after it as a TIMESTAMP_LTZ's text has it
_SQL_TIMESTAMP = re.compile(
    r"(\d{4})-(\d\d?)-(\d\d?)(?: (\d\d?):(\d\d?):(\d\d?)(?:\.(\d{0,9}))?)?Z?"
)


def _resolved_smartly(text: str) -> datetime | None:
    """A time in Flink's SQL format that `fromisoformat` refuses, as Flink's json format and its
    CAST read it: a part of one digit, a point with no digits after it, and what they resolve
    as java.time's SMART style does, a day past its month's end (up to the 31st) being the
    month's last day, and 24:00:00 the next day's midnight."""
    match = _SQL_TIMESTAMP.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part or 0) for part in match.groups()[:6])
    fraction = (match[7] or "").ljust(6, "0")[:6]
    midnight_after = hour == 24 and minute == second == 0 and not int(match[7] or 0)
    if not (1 <= month <= 12 and 1 <= day <= 31 and (hour < 24 or midnight_after)):
        return None
    if midnight_after:
        hour = 0
    try:
        last = calendar.monthrange(year, month)[1]
        parsed = datetime(year, month, min(day, last), hour, minute, second)
        return parsed + timedelta(days=midnight_after, microseconds=int(fraction))
    except (ValueError, OverflowError):  # a minute or second out of range; beyond the year 9999
        return None


def _in_range(moment: datetime, value: Any) -> datetime:
    """`moment`, if it falls in years 1-9999 in UTC, as a TIMESTAMP column holds it (a time
    beyond would overflow where a later step reads it back)."""
    if moment.year in (1, 9999):  # only there can an offset take it beyond
        try:
            moment.astimezone(UTC)
        except OverflowError:
            raise _wrong(value, "a timestamp between the years 1 and 9999") from None
    return moment


# Kafka Connect / Debezium logical time types, by the unit of their integer value.
_EPOCH_UNITS = {
    "io.debezium.time.Timestamp": 1_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}


# Kafka Connect / Debezium dates: a count of days since the epoch
_DAY_COUNTS = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}


def _timestamp(connect_name: str | None) -> Converter:
    if connect_name in _DAY_COUNTS:  # a date column read as a TIMESTAMP: its midnight, UTC
        return lambda value: datetime.combine(_date(value), time(), UTC)
    per_second = _EPOCH_UNITS.get(connect_name or "", 1_000)

    def convert(value: Any) -> datetime:
        if type(value) is int:  # the common case first (not a bool)
            seconds, rest = divmod(value, per_second)
            try:
                return EPOCH + timedelta(
                    seconds=seconds, microseconds=rest * 1_000_000 // per_second
                )
            except OverflowError:
                raise _wrong(value, "a timestamp between the years 1 and 9999") from None
        if isinstance(value, datetime):  # Avro timestamp logical types arrive decoded
            return _in_range(value if value.tzinfo else value.replace(tzinfo=UTC), value)
        if isinstance(value, str):
            return _parse_timestamp_text(value)
        raise _wrong(value, "a timestamp")

    return convert


def _date(value: Any) -> date:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return (EPOCH + timedelta(days=value)).date()  # Connect Date: days since the epoch
        except OverflowError:
            raise _wrong(value, "a date between the years 1 and 9999") from None
    if isinstance(value, str):
        try:
            return date.fromisoformat(value[:10])
        except ValueError:
            pass
    raise _wrong(value, "a date")


def _binary(value: Any) -> bytes:
    if isinstance(value, bytes):  # Avro's `bytes` and `fixed` arrive decoded
        return value
    if isinstance(value, str):  # JSON carries bytes as base64 text, as Connect writes them
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            pass
    raise _wrong(value, "base64 bytes")


def converter(spark_type: T.DataType, connect: dict[str, Any] | None = None) -> Converter:
    """The converter for a column of `spark_type`; `connect` is its Connect field schema."""
    connect = connect or {}
    if isinstance(spark_type, T.StringType):
        return _string
    if type(spark_type) in _INTEGER_BITS:
        return _integer(_INTEGER_BITS[type(spark_type)])
    if isinstance(spark_type, T.FloatType | T.DoubleType):
        return _float
    if isinstance(spark_type, T.BooleanType):
        return _boolean
    if isinstance(spark_type, T.DecimalType):
        scale = spark_type.scale
        return _decimal(spark_type.precision, scale, _connect_scale(connect, scale))
    if isinstance(spark_type, T.TimestampType):
        return _timestamp(connect.get("name"))
    if isinstance(spark_type, T.DateType):
        return _date
    if isinstance(spark_type, T.BinaryType):
        return _binary
    raise ValueError(f"no converter for {spark_type.simpleString()}")


def literal_reader(literal: Any) -> Converter:
    """The converter of a column of the literal's type (a view's `WHERE` compares a record's
    field with it): a bool, a whole number, a number or a string, as JSON holds them."""
    if isinstance(literal, bool):
        return _boolean
    if isinstance(literal, int):
        return _integer(64)
    if isinstance(literal, float):
        return _float
    return _string
