"""The output table's declared types (`OUTPUT_SCHEMA`, the columns of Flink SQL's output
table): each column of the select list cast to its output column's type, as Flink's INSERT casts
a query's column where it casts implicitly, and refused at start-up where Flink refuses it.

What Flink 2.3's INSERT does with each pair (`tests/fixtures/functions/flink_sink_casts.json`,
its output for every pair of the types below):

| the select list's column | the output columns it is cast to | how |
| --- | --- | --- |
| TINYINT … BIGINT | one as wide or wider, FLOAT, DOUBLE, DECIMAL | NULL beyond its digits |
| FLOAT | FLOAT, DOUBLE, DECIMAL | |
| DOUBLE | DOUBLE, DECIMAL | rounded half up |
| DECIMAL | FLOAT, DOUBLE, DECIMAL | rounded half up, NULL beyond its digits |
| CHAR, VARCHAR, STRING | CHAR(n), VARCHAR(n), STRING | padded to a CHAR's n, cut to a VARCHAR's |
| TIMESTAMP(p) | TIMESTAMP(q), TIMESTAMP_LTZ(q), DATE | cut to q digits of a second |
| TIMESTAMP_LTZ(p) | TIMESTAMP(q), TIMESTAMP_LTZ(q) | |
| BOOLEAN, DATE, BYTES | their own type | |

Every other pair (an INT into a STRING column, a DOUBLE into an INT, a DATE into a TIMESTAMP)
Flink's planner refuses ("Column types of query result and sink … do not match"); so does this.
Where a select column's type is not known before the job runs (a DECIMAL computed by arithmetic,
a function's number), it is cast and not checked.
"""

from __future__ import annotations

import re

from sqlglot import exp

from app.plan.condition_check import Columns
from app.plan.flink_arithmetic import arithmetic_type, literal_type
from app.plan.projection import parse_select
from serdes.records.schema import Column
from state.expr.condition import FLINK_LEXICON
from state.expr.functions import FUNCTIONS, INTEGRAL_BITS, OPERATORS, PREDICATES

_KIND_OF_NAME = {
    **dict.fromkeys(INTEGRAL_BITS, "whole"),
    "INTEGER": "whole",
    "FLOAT": "float",
    "REAL": "float",
    "DOUBLE": "double",
    "DECIMAL": "decimal",
    "NUMERIC": "decimal",
    "DEC": "decimal",
    "CHAR": "text",
    "VARCHAR": "text",
    "STRING": "text",
    "TEXT": "text",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_LTZ": "ltz",
    "BYTES": "bytes",
    "BINARY": "bytes",
    "VARBINARY": "bytes",
}
# the kinds of output column each kind of select column is cast to (a whole number's also by
# width, below)
_CASTS = {
    "whole": {"float", "double", "decimal"},
    "float": {"float", "double", "decimal"},
    "double": {"double", "decimal"},
    "decimal": {"float", "double", "decimal"},
    "number": {"whole", "float", "double", "decimal"},  # a function's number, not known further
    "text": {"text"},
    "boolean": {"boolean"},
    "date": {"date"},
    "timestamp": {"timestamp", "ltz", "date"},
    "ltz": {"timestamp", "ltz"},
    "bytes": {"bytes"},
}


def _normal(written: str) -> str:
    """A type's text as one spelling: upper case, no spaces, INTEGER as INT."""
    text = re.sub(r"\s+", "", written.upper())
    return re.sub(r"^INTEGER\b", "INT", text)


def _kind(written: str) -> str | None:
    if re.match(r"^TIMESTAMP\(?\d*\)?WITHLOCALTIMEZONE", _normal(written)):
        return "ltz"
    name = re.match(r"^[A-Z_]+", _normal(written))
    return _KIND_OF_NAME.get(name[0]) if name else None


def _query_type(node: exp.Expression, columns: Columns) -> str | None:
    """The Flink type of a select column as written (`INT`, `VARCHAR(3)`, `DECIMAL` of a
    precision not worked out), or only its kind (`number`), None where neither is known before
    the job runs."""
    node = node.unnest()
    if isinstance(node, exp.Column):
        column = columns.get(node.table.upper(), {}).get(node.name)
        return column.declared if column is not None else None
    if isinstance(node, exp.Cast):  # TRY_CAST too
        return node.args["to"].sql(FLINK_LEXICON)
    if isinstance(node, exp.Literal):
        return literal_type(node)
    if isinstance(node, (exp.Boolean, *PREDICATES)):
        return "BOOLEAN"
    if isinstance(node, exp.Neg | exp.Abs):
        return _query_type(node.this, columns)
    if isinstance(node, exp.Extract):
        return "BIGINT"
    if isinstance(node, OPERATORS):
        a, b = (_query_type(n, columns) for n in (node.this, node.expression))
        return arithmetic_type(a and _normal(a), b and _normal(b))
    function = FUNCTIONS.get(type(node))
    if function is not None and function.gives in ("string", "number"):
        return "STRING" if function.gives == "string" else "number"
    return None


def _casts(given: str, declared: str) -> bool:
    """Whether Flink's INSERT casts a select column of type `given` to an output column of
    type `declared` (both as written, or `given` only a kind)."""
    given_kind = _kind(given) or given
    declared_kind = _kind(declared)
    if given_kind == "whole" and declared_kind == "whole":
        return INTEGRAL_BITS[_normal(given)] <= INTEGRAL_BITS[_normal(declared)]
    return declared_kind in _CASTS.get(given_kind, set()) or given_kind == declared_kind


def declared_problem(select: str, declared: tuple[Column, ...], columns: Columns) -> str | None:
    """Why the select list cannot be written to the output's `declared` columns, as Flink's
    INSERT would refuse it; None if it can."""
    items = parse_select(select).expressions
    if len(items) != len(declared):
        return f"the select list gives {len(items)} columns, the output {len(declared)}"
    for item, column in zip(items, declared, strict=True):
        if item.alias_or_name != column.name:
            return (
                f"the output's columns by the select list's names, in its order: {column.name} "
                f"where the select list has {item.alias_or_name}"
            )
        given = _query_type(item.this if isinstance(item, exp.Alias) else item, columns)
        if given is not None and not _casts(given, column.declared):
            return (
                f"column {column.name}: the select list gives {given.upper()}, which Flink does "
                f"not cast to {column.declared} on INSERT (write a CAST in the select list)"
            )
    return None


def declared_select(select: str, declared: tuple[Column, ...], columns: Columns) -> str:
    """The select list with each column cast to its output column's `declared` type, where its
    own is not that type already (a text into a STRING column, or a VARCHAR of no length,
    which Flink's DDL reads as a STRING, is one already)."""
    tree = parse_select(select)
    for item, column in zip(list(tree.expressions), declared, strict=True):
        inner = item.this if isinstance(item, exp.Alias) else item
        given = _query_type(inner, columns)
        same = given is not None and (
            _normal(given) == _normal(column.declared)
            or (_kind(given) == "text" and _normal(column.declared) in ("STRING", "VARCHAR"))
        )
        if not same and _kind(column.declared) != "bytes":  # bytes take only bytes, uncast
            to = exp.DataType.build(column.declared, dialect=FLINK_LEXICON)
            cast = exp.Cast(this=inner.copy(), to=to)
            item.replace(exp.alias_(cast, column.name, quoted=True))
    return ", ".join(e.sql(FLINK_LEXICON) for e in tree.expressions)
