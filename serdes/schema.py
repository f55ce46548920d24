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
    """One declared column: its name, its type as written, and the Spark type it maps to."""

    name: str
    declared: str
    spark_type: T.DataType


def _spark_type(name: str, kind: exp.DataType) -> T.DataType:
    if kind.this == _D.DECIMAL:
        params = [int(p.sql()) for p in kind.expressions]
        precision, scale = (params + [10, 0][len(params) :])[:2]
        return T.DecimalType(precision, scale)
    if kind.this in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind.this]
    if kind.this == _D.USERDEFINED and str(kind.args.get("kind", "")).upper() == "BYTES":
        return T.BinaryType()
    raise SchemaError(f"column {name}: unsupported type {kind.sql()}")


def parse_schema(text: str) -> tuple[Column, ...]:
    """Parse `name TYPE, name TYPE, ...`; raise SchemaError naming the part that is wrong."""
    if not text.strip():
        raise SchemaError("an empty column list")
    try:
        table = sqlglot.parse_one(f"CREATE TABLE t ({text})")
    except ParseError as err:
        first = err.errors[0]
        raise SchemaError(f"{first['description']} near {first['highlight']!r}") from None
    columns = []
    for definition in table.this.expressions:
        kind = definition.args.get("kind")
        if not isinstance(definition, exp.ColumnDef) or kind is None:
            raise SchemaError(f"column {definition.sql()!r} has no type")
        columns.append(Column(definition.name, kind.sql(), _spark_type(definition.name, kind)))
    names = [c.name for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaError(f"column {duplicates[0]} declared twice")
    return tuple(columns)
