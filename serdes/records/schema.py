"""Declared row schemas: Flink-style column lists parsed with a real SQL parser.

Operators describe an input the way they would in a Flink DDL
(`order_id STRING, order_time TIMESTAMP(3), price DECIMAL(10,2)`); this module turns that text
into typed columns with their Spark types, so decoders and the join agree on one description.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from pyspark.sql import types as T
from sqlglot import exp
from sqlglot.errors import ParseError

_D = exp.DataType.Type
_SIMPLE_TYPES: dict[exp.DataType.Type, T.DataType] = {
    _D.TEXT: T.StringType(),
    _D.VARCHAR: T.StringType(),
    _D.CHAR: T.StringType(),
    _D.BOOLEAN: T.BooleanType(),
    _D.TINYINT: T.ByteType(),
    _D.SMALLINT: T.ShortType(),
    _D.INT: T.IntegerType(),
    _D.BIGINT: T.LongType(),
    _D.FLOAT: T.FloatType(),
    _D.DOUBLE: T.DoubleType(),
    _D.DATE: T.DateType(),
    # Flink's TIMESTAMP(p) and TIMESTAMP_LTZ(p) both become instants: the session is UTC.
    _D.TIMESTAMP: T.TimestampType(),
    _D.TIMESTAMPLTZ: T.TimestampType(),
    _D.VARBINARY: T.BinaryType(),
    _D.BINARY: T.BinaryType(),
}


class SchemaError(ValueError):
    """A column list that cannot be used; the message says which part and why."""


@dataclass(frozen=True)
class Column:
    """One declared column: its name, its type as written, and the Spark type it maps to;
    `zoned` if a TIMESTAMP_LTZ, an instant that Flink's JSON writes with a `Z`."""

    name: str
    declared: str
    spark_type: T.DataType
    zoned: bool = False


def _spark_type(name: str, kind: exp.DataType, written: str) -> T.DataType:
    if kind.this == _D.DECIMAL:
        params = [int(p.sql()) for p in kind.expressions]
        precision, scale = (params + [10, 0][len(params) :])[:2]
        return T.DecimalType(precision, scale)
    if kind.this in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind.this]
    if kind.this == _D.USERDEFINED and str(kind.args.get("kind", "")).upper() == "BYTES":
        return T.BinaryType()
    raise SchemaError(f"column {name}: unsupported type {written}")


def _definitions(text: str) -> list[str]:
    """The column definitions as written: the text split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += 1 if char in "(<[" else -1 if char in ")>]" else 0
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def _written_types(text: str) -> dict[str, str]:
    """Each column's type as the user wrote it (what a message should quote), by name."""
    written = {}
    for definition in _definitions(text):
        name, _, kind = definition.partition(" ")
        written[name.strip('`"')] = kind.strip()
    return written


def parse_schema(text: str) -> tuple[Column, ...]:
    """Parse `name TYPE, name TYPE, ...`; raise SchemaError naming the part that is wrong."""
    if not text.strip():
        raise SchemaError("an empty column list")
    written = _written_types(text)
    try:
        statements = sqlglot.parse(f"CREATE TABLE t ({text})")
    except ParseError as err:
        for name, kind in written.items():  # a type the parser does not know: name it
            try:
                sqlglot.parse(f"CREATE TABLE t (x {kind})")
            except ParseError:
                raise SchemaError(f"column {name}: unsupported type {kind}") from None
        if not err.errors:
            raise SchemaError(str(err)) from None
        first = err.errors[0]
        raise SchemaError(f"{first['description']} near {first['highlight']!r}") from None
    table = statements[0] if len(statements) == 1 else None
    if not isinstance(table, exp.Create) or not isinstance(table.this, exp.Schema):
        raise SchemaError("one list of columns, nothing after it")
    columns = []
    for definition in table.this.expressions:
        kind = definition.args.get("kind")
        if not isinstance(definition, exp.ColumnDef) or kind is None:
            raise SchemaError(f"column {definition.sql()!r} has no type")
        declared = written.get(definition.name) or kind.sql()
        spark_type = _spark_type(definition.name, kind, declared)
        zoned = kind.this == _D.TIMESTAMPLTZ
        columns.append(Column(definition.name, declared, spark_type, zoned))
    names = [c.name for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaError(f"column {duplicates[0]} declared twice")
    return tuple(columns)
