"""Input formats: one Kafka record in, zero or more typed change rows `(op, row)` out.

- `json`: one JSON object per record, insert-only.
- `upsert`: the record key is the primary key (a JSON object, also inside Kafka Connect's
  schema envelope, or the bare value of a one-column key), the value the whole row as JSON, a
  null value a delete: +U(row) or -D(key columns).
- `debezium-json`: Debezium's envelope, with (`{"schema", "payload"}`) or without the Connect
  schema: `c`/`r` -> +I(after), `u` -> -U(before) +U(after), `d` -> -D(before); the tombstone
  after a delete is skipped. An update without a `before` image (REPLICA IDENTITY DEFAULT) comes
  out as +U alone, and a delete whose `before` holds only the key as -D: the changelog
  normalizer (keyed by the primary key) completes them from the last row it saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from pyspark.sql import types as T

from serdes.records.schema import Column
from serdes.records.values import (
    Converter,
    DecodeError,
    ExactNumber,
    converter,
    literal_reader,
)
from serdes.records.view_filter import view_filter
from state.changes import RowKind

DecodedChange = tuple[str, tuple[Any, ...]]  # a record decoded: its kind and its row


def _json_text(value: bytes) -> str | bytes:
    """The text `json.loads` would read in `value`: decoded here when it starts as an object in
    UTF-8 (what `json.detect_encoding` concludes from a `{` and a second byte that is not 0),
    which skips its detection per record; anything else is left to it."""
    if value[:1] == b"{" and value[1:2] != b"\x00":
        return value.decode("utf-8", "surrogatepass")  # as json.loads decodes UTF-8
    return value


# orjson reads an integer beyond 64 bits as a float, where `json` keeps it whole (a DECIMAL or
# STRING column would get another value): a record with a run of 19 digits or more is read by
# `json`. Mapping every digit to one makes that run one substring to look for, at C speed.
_DIGITS = bytes.maketrans(b"012345678", b"999999999")
_LONG_NUMBER = b"9" * 19
# Where the row has a DECIMAL column, its numbers are read exactly (`ExactNumber`). A double
# holds 15 significant digits of a decimal, and its shortest text gives them back; a whole
# number of up to 18 digits both read alike. So only a record with a number of 16 digits or
# more and a point or an exponent is read by `json` for that.
_LONG_FRACTION = re.compile(rb"(?=[\d.]{17})\d*\.|\d{16,}[eE]")


def _long_number(value: bytes, exact: bool = False) -> bool:
    """Whether `value` holds a run of 19 digits or more, which orjson may read otherwise, or
    with `exact`, a number a double may not hold exactly."""
    if _LONG_NUMBER in value.translate(_DIGITS):
        return True
    return exact and _LONG_FRACTION.search(value) is not None


def _reads_exactly(columns: Sequence[Column]) -> bool:
    """Whether a row of `columns` has its JSON numbers read exactly: where it has a DECIMAL,
    as Flink's JSON formats do (`USE_BIG_DECIMAL_FOR_FLOATS`)."""
    return any(isinstance(c.spark_type, T.DecimalType) for c in columns)


# An escaped lone surrogate (`"\\ud83d"`), or one read from bytes, is text no UTF-8 holds: the
# row's Arrow column would refuse it and fail the task. Flink's strings hold "?" in its place.
_MAY_HOLD_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its strings replaced by "?", as Java encodes it."""
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "replace").decode()
    if isinstance(value, dict):
        return {name: _without_surrogates(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    return value


def _json_object(
    value: bytes | None, exact: bool = False, texts: bool = False
) -> dict[str, Any] | None:
    """The JSON object of `value`, as `json.loads` reads it. orjson reads it, at a third of the
    cost, when the record is an object in UTF-8 without a long number; whatever orjson refuses
    (NaN, Infinity, an escaped lone surrogate, bad UTF-8, another encoding) `json` reads, or
    refuses with its error. `exact`: its long numbers read as `ExactNumber`s; `texts`: all of
    its numbers with a fraction or an exponent."""
    if value is None:
        return None
    if value[:1] == b"{" and not texts and not _long_number(value, exact):
        try:
            return orjson.loads(value)  # an object: it starts with one
        except orjson.JSONDecodeError:
            pass
    try:
        text = _json_text(value)
        if texts:  # `NaN` and `Infinity` too: no float without its text
            data = json.loads(text, parse_float=ExactNumber, parse_constant=ExactNumber)
        else:
            data = json.loads(text, parse_float=ExactNumber if exact else None)
    except ValueError as err:  # bad JSON or UTF-8, a number beyond Python's 4,300 digits
        raise DecodeError("bad-json", str(err)) from None
    if isinstance(text, bytes) or _MAY_HOLD_SURROGATE.search(text):
        data = _without_surrogates(data)
    if not isinstance(data, dict):
        raise DecodeError("bad-json", f"expected a JSON object, got {type(data).__name__}")
    return data


def _unchecked_object(value: bytes) -> dict[str, Any] | None:
    """What orjson reads in a record starting with `{`, without the check for long numbers;
    None where it cannot read it. Enough to tell most of a view's records from another view's
    (`JsonFormat._where_verdict`), which is what most of them are."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


# The bytes a text `json.loads` reads can start with (whitespace, a value's first character,
# `NaN` and `Infinity` included), and NUL and the non-ASCII bytes, which it may take for another
# encoding or a byte-order mark.
_MAY_START_JSON = frozenset(b' \t\n\r{["-0123456789tfnNI\x00') | frozenset(range(0x80, 0x100))


def _json_key(key: bytes) -> Any:
    """A record key's JSON value, or None where it is none: a bare key (`p17`, an id of any
    kind) is told from its first byte, without raising and catching the parser's error per
    record, a cost like the rest of the record's decoding (`docs/performance.md`). Its numbers
    keep their text, for a DECIMAL or STRING key column."""
    if key[:1] and key[0] not in _MAY_START_JSON:
        return None
    try:
        parsed = json.loads(key, parse_float=ExactNumber, parse_constant=ExactNumber)
    except ValueError:  # not JSON (bad UTF-8, a number beyond Python's 4,300 digits)
        return None
    return parsed if key.isascii() and b"\\u" not in key else _without_surrogates(parsed)


def _nested(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value at `path` in nested JSON objects; None where a step is missing or no object."""
    value: Any = data
    for step in path:
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


class NumberWithoutText(Exception):
    """A STRING column's value is a JSON number read without its text (by orjson, as a float):
    Flink's STRING holds the number as written (`1.10`, `1E2`), so the record is read again,
    its numbers keeping their text. Rare, so the common reading does not keep them."""


def _text_of_number(read: Converter) -> Converter:
    """A STRING column's converter that asks for the record to be read again (`NumberWithoutText`)
    where its value is a number without its text."""

    def convert(value: Any) -> Any:
        if type(value) is str:  # the common case first, at a call's cost
            return value
        if type(value) is float:
            raise NumberWithoutText
        return read(value)

    return convert


class RowBuilder:
    """Builds a typed row tuple from a JSON object, in the declared column order. `from_json`:
    the object is JSON, whose numbers into a STRING column need their text (`NumberWithoutText`)."""

    def __init__(self, columns: Sequence[Column], required: Sequence[str], from_json: bool) -> None:
        self.columns = tuple(columns)
        self.names = tuple(c.name for c in self.columns)
        self.required = set(required)
        self.from_json = from_json
        self.plain = [self._converter(c) for c in self.columns]
        self._by_connect_schema: dict[str, list[Converter]] = {}

    def _converter(self, column: Column, connect: dict[str, Any] | None = None) -> Converter:
        read = converter(column.spark_type, connect)
        if self.from_json and isinstance(column.spark_type, T.StringType):
            return _text_of_number(read)
        return read

    def converters(self, connect_fields: list[dict[str, Any]] | None) -> list[Converter]:
        """Per-column converters, refined by the Connect schema of the fields when present."""
        if not connect_fields:
            return self.plain
        cache_key = json.dumps(connect_fields, sort_keys=True)
        found = self._by_connect_schema.get(cache_key)
        if found is None:
            by_name = {f.get("field"): f for f in connect_fields}
            found = [self._converter(c, by_name.get(c.name)) for c in self.columns]
            self._by_connect_schema[cache_key] = found
        return found

    def build(self, data: dict[str, Any], converters: list[Converter]) -> tuple[Any, ...]:
        values = []
        for name, convert in zip(self.names, converters, strict=True):
            raw = data.get(name)
            if raw is None:
                if name in self.required:
                    raise DecodeError("missing-field", f"required field {name!r} is missing")
                values.append(None)
            else:
                values.append(convert(raw))
        return tuple(values)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kept(value: Any, kept: Any, read: Converter) -> bool:
    """Whether a record's field holds the view's literal, read as Flink reads JSON into the
    column: `"1"` into an INT column is 1, `1` into a STRING column is `'1'`; a field the
    column cannot read is not kept."""
    if type(value) is type(kept):  # the common case: the JSON value the literal is
        return value == kept
    if value is None or kept is None:
        return value is kept
    if _is_number(value) and _is_number(kept) and not isinstance(kept, int):
        return value == kept
    try:
        return read(value) == kept
    except DecodeError:
        return False


class JsonFormat:
    """One JSON object per record; every record is an insert. A view of the records (a Flink
    `CREATE VIEW` over the topic): `paths`, its columns of nested fields, and `where`, the
    top-level fields and values of the records it keeps; the others are skipped. `unreadable`:
    a record that is no JSON object is this view's to dead-letter (False: another view of the
    topic's, so that it is dead-lettered once, not once per view)."""

    def __init__(
        self,
        columns: Sequence[Column],
        required: Sequence[str],
        paths: Sequence[tuple[str, tuple[str, ...]]] = (),
        where: Sequence[tuple[str, Any]] = (),
        unreadable: bool = True,
    ) -> None:
        self.rows = RowBuilder(columns, required, from_json=True)
        self.exact = _reads_exactly(columns)
        self.paths = tuple(paths)
        # every column a nested field: the row reads only them, not the record's own fields
        self.nested_only = bool(paths) and {c for c, _ in paths} >= set(self.rows.names)
        # each kept value with the reader of the record's field as a column of the literal's type
        self.where = tuple((field, kept, literal_reader(kept)) for field, kept in where)
        self.unreadable = unreadable
        # another view's records skipped unparsed, a batch at a time; the view that dead-letters
        # the topic's unreadable records parses every one
        self.may_keep = None if unreadable else view_filter(where)

    def decode(self, key: bytes | None, value: bytes | None) -> list[DecodedChange]:
        data, kept = None, None
        if self.where and value is not None and value[:1] == b"{":
            quick = _unchecked_object(value)
            if quick is not None:
                kept = self._where_verdict(quick)
                if kept is False:
                    return []
                if _long_number(value, self.exact):
                    kept = None  # read again as `json` reads it, and judged on that
                else:
                    data = quick  # what `json` reads too
        if data is None:
            try:
                data = _json_object(value, self.exact)
                if data is None:
                    raise DecodeError("null-value", "an insert-only JSON input has no deletes")
            except DecodeError:
                if self.unreadable:
                    raise
                return []
        if kept is None and not all(_kept(data.get(f), k, read) for f, k, read in self.where):
            return []
        try:
            return [(RowKind.INSERT, self.rows.build(self._fields(data), self.rows.plain))]
        except NumberWithoutText:
            data = self._fields(_json_object(value, texts=True) or {})
            return [(RowKind.INSERT, self.rows.build(data, self.rows.plain))]

    def _fields(self, data: dict[str, Any]) -> dict[str, Any]:
        """The record's fields with the view's columns of nested fields, as the row's own."""
        if not self.paths:
            return data
        nested = {column: _nested(data, path) for column, path in self.paths}
        return nested if self.nested_only else {**data, **nested}

    def _where_verdict(self, data: dict[str, Any]) -> bool | None:
        """Whether the view keeps a record read by orjson unchecked (False: another view's);
        None where a `WHERE` field holds a float, which may be how orjson reads an integer
        beyond 64 bits (the only value it reads otherwise than `json`): the checked reading
        decides."""
        for field, kept, read in self.where:
            found = data.get(field)
            if isinstance(found, float):
                return None
            if not _kept(found, kept, read):
                return False
        return True


class DebeziumJsonFormat:
    """Debezium change events as JSON, with or without the Connect schema envelope.
    `from_json`: False where a subclass reads the envelope from another encoding."""

    def __init__(
        self, columns: Sequence[Column], required: Sequence[str], from_json: bool = True
    ) -> None:
        self.rows = RowBuilder(columns, required, from_json)
        # A delete's `before` may hold only the key (REPLICA IDENTITY DEFAULT): the other
        # columns are then not checked, the normalizer replaces the row.
        self.key_only = RowBuilder(columns, (), from_json)
        self.exact = _reads_exactly(columns)
        self.source_ts_ms: int | None = None

    @staticmethod
    def _row_schema(envelope_schema: dict[str, Any] | None, side: str) -> list | None:
        for field in (envelope_schema or {}).get("fields", []):
            if field.get("field") == side:
                return field.get("fields")
        return None

    def decode(self, key: bytes | None, value: bytes | None) -> list[DecodedChange]:
        data = _json_object(value, self.exact)
        if data is None:
            return []  # the tombstone that follows a delete, for log compaction
        try:
            return self._envelope(data)
        except NumberWithoutText:
            return self._envelope(_json_object(value, texts=True) or {})

    def _envelope(self, data: dict[str, Any]) -> list[DecodedChange]:
        payload = data.get("payload", data)
        if not isinstance(payload, dict):
            raise DecodeError("bad-envelope", "the Debezium payload is not an object")
        schema = data.get("schema") if "payload" in data else None
        return self.changes(payload, lambda side: self._row_schema(schema, side))

    def changes(self, payload: dict[str, Any], connect_fields: Callable) -> list[DecodedChange]:
        """The changes of one Debezium envelope; `connect_fields(side)` gives the Connect
        schema of the `before` or `after` fields, if known. Keeps the envelope's
        `source.ts_ms` (when the change happened in the database) for event time."""
        source = payload.get("source")
        self.source_ts_ms = source.get("ts_ms") if isinstance(source, dict) else None
        op = payload.get("op")
        before, after = payload.get("before"), payload.get("after")
        if op in ("c", "r"):
            return [(RowKind.INSERT, self._image(after, "after", connect_fields, self.rows))]
        if op == "u":
            updated = (RowKind.UPDATE_AFTER, self._image(after, "after", connect_fields, self.rows))
            if before is None:
                return [updated]
            return [
                (RowKind.UPDATE_BEFORE, self._image(before, "before", connect_fields, self.rows)),
                updated,
            ]
        if op == "d":
            return [(RowKind.DELETE, self._image(before, "before", connect_fields, self.key_only))]
        raise DecodeError("unknown-op", f"Debezium op {op!r} is not one of c, r, u, d")

    @staticmethod
    def _image(image: Any, side: str, connect_fields: Callable, rows: RowBuilder) -> tuple:
        if not isinstance(image, dict):
            raise DecodeError("missing-field", f"the {side!r} image is missing")
        return rows.build(image, rows.converters(connect_fields(side)))


class UpsertJsonFormat:
    """An upsert topic: key = primary key, value = row (JSON), null value = delete."""

    def __init__(self, columns: Sequence[Column], required: Sequence[str]) -> None:
        self.rows = RowBuilder(columns, required, from_json=True)
        self.key_columns = list(required)
        self.exact = _reads_exactly(columns)

    def _key(self, key: bytes | None) -> dict[str, Any]:
        if key is None:
            raise DecodeError("missing-key", "an upsert record needs its primary key as key")
        parsed = _json_key(key)
        if isinstance(parsed, dict):
            # Kafka Connect's JsonConverter with schemas: {"schema": ..., "payload": {...}}
            inner = parsed.get("payload") if "schema" in parsed else None
            return inner if isinstance(inner, dict) else parsed
        if len(self.key_columns) == 1:
            if parsed is not None:
                return {self.key_columns[0]: parsed}
            try:
                return {self.key_columns[0]: key.decode("utf-8")}
            except UnicodeDecodeError:
                raise DecodeError("bad-key", "the key is neither JSON nor UTF-8 text") from None
        raise DecodeError("bad-key", f"expected a JSON object with {self.key_columns}")

    def decode(self, key: bytes | None, value: bytes | None) -> list[DecodedChange]:
        key_fields = self._key(key)
        data = _json_object(value, self.exact)
        if data is None:
            return [(RowKind.DELETE, self.rows.build(key_fields, self.rows.plain))]
        try:
            row = self.rows.build({**key_fields, **data}, self.rows.plain)
        except NumberWithoutText:
            data = _json_object(value, texts=True) or {}
            row = self.rows.build({**key_fields, **data}, self.rows.plain)
        return [(RowKind.UPDATE_AFTER, row)]
