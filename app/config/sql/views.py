"""`CREATE VIEW v AS SELECT … FROM t WHERE …`: a view that picks one kind of record out of a
Kafka table, as Nexmark's `person`, `auction` and `bid` views pick theirs out of its one topic.

The view is read as an input of its own: the table's topic and options, the columns it selects
(a `ROW` column's fields, `person.id`, read from the record's nested JSON object), and only the
records its WHERE keeps (`event_type = 0`: each condition a top-level field equal to a literal,
checked before a record is decoded). A `c AS CASE WHEN f = 0 THEN … END` column of the table is
the branch the view's WHERE decides; the table's WATERMARK, on a column the view selects, is the
view's. Anything else a view may say in Flink (joins, expressions, aggregates) is refused.
"""

from __future__ import annotations

import re

import sqlglot
from pyspark.sql import types as T
from sqlglot import exp
from sqlglot.errors import ParseError

from app.config.sql.ddl import SqlError, Table, unquote
from serdes.records.schema import parse_schema
from state.expr.condition import FLINK_LEXICON

CREATE_VIEW = re.compile(
    r"^CREATE\s+(?:TEMPORARY\s+)?VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?(`[^`]+`|\w+)\s+AS\s+", re.I
)


def create_view(line: int, text: str, tables: dict[str, Table]) -> Table:
    """The view as a table of the records it keeps."""
    match = CREATE_VIEW.match(text)
    assert match is not None
    name, where_said = unquote(match[1]), f"CREATE VIEW {unquote(match[1])}"
    try:
        query = sqlglot.parse_one(text[match.end() :], read=FLINK_LEXICON)
    except ParseError as err:
        raise SqlError(line, f"{where_said}: {err.errors[0]['description']}") from None
    source = query.args.get("from_") if isinstance(query, exp.Select) else None
    if source is None or query.args.get("joins") or not isinstance(source.this, exp.Table):
        raise SqlError(line, f"{where_said}: only SELECT <columns> FROM <table> [WHERE …]")
    if source.this.name not in tables:
        raise SqlError(line, f"{where_said}: no table {source.this.name} (CREATE TABLE it first)")
    table = tables[source.this.name]
    view = Table(name, line, options=dict(table.options))
    view.where = _kept(line, where_said, table, query.args.get("where"))
    for item in query.expressions:
        column = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(column, exp.Column) or isinstance(column.this, exp.Star):
            raise SqlError(
                line, f"{where_said}: {item.sql()} is not supported (columns, a ROW's fields)"
            )
        path, kind = _field(line, where_said, table, column, view.where)
        view.physical.append((item.alias_or_name, kind))
        view.declared.append(item.alias_or_name)
        if column.name in table.metadata and not column.table:  # from the record, not its value
            view.metadata[item.alias_or_name] = table.metadata[column.name]
        elif path != item.alias_or_name:
            view.paths[item.alias_or_name] = path
        if table.watermark and column.name == table.watermark[0] and not column.table:
            view.watermark = (item.alias_or_name, table.watermark[1])
    return view


def _kept(
    line: int, where_said: str, table: Table, condition: exp.Expression | None
) -> dict[str, object]:
    """The view's WHERE as `field -> value`: the records it keeps."""
    kept: dict[str, object] = {}
    node = condition.this if condition is not None else None
    parts = list(node.flatten()) if isinstance(node, exp.And) else [node] if node else []
    types = dict(table.physical)
    for part in parts:
        part = part.unnest()
        if not (
            isinstance(part, exp.EQ)
            and isinstance(part.this, exp.Column)
            and not part.this.table
            and part.this.name in types
            and part.this.name not in table.rows
            and part.this.name not in table.metadata  # no field of the value
            and isinstance(part.expression, exp.Literal)
        ):
            raise SqlError(
                line,
                f"{where_said}: WHERE {part.sql()} is not supported (only a column of "
                f"{table.name} = a literal, ANDed)",
            )
        kept[part.this.name] = _typed(line, where_said, part, types[part.this.name])
    return kept


def _typed(line: int, where_said: str, part: exp.EQ, kind: str) -> object:
    """The WHERE's literal as a value of its column's type. As in Flink, a string literal is no
    number's and a number no string's (Flink: "implicit type conversion between INTEGER and
    CHAR is not supported"); the records are then kept by how their field reads as the column."""
    literal, column = part.expression, parse_schema(f"c {kind}")[0].spark_type
    value = _json_value(literal)
    if (
        isinstance(column, T.StringType) != literal.is_string
        and isinstance(column, T.StringType | T.NumericType)
    ) or (isinstance(column, T.IntegralType) and not isinstance(value, int)):
        raise SqlError(
            line,
            f"{where_said}: WHERE {part.sql()}: {literal.sql()} is no {kind.upper()} value "
            "(Flink casts no string to a number here, nor a number to a string)",
        )
    return value


def _json_value(literal: exp.Literal) -> object:
    """A SQL literal as the JSON value a record holds for it."""
    if literal.is_string:
        return literal.this
    return int(literal.this) if re.fullmatch(r"-?\d+", literal.this) else float(literal.this)


def _field(
    line: int, where_said: str, table: Table, column: exp.Column, kept: dict[str, object]
) -> tuple[str, str]:
    """The dotted path a selected column is read from, and its type."""
    if column.table:  # a ROW column's field: `person.id`
        fields = dict(table.rows.get(column.table, []))
        if column.name not in fields:
            raise SqlError(line, f"{where_said}: {table.name} has no field {column.sql()}")
        return f"{column.table}.{column.name}", fields[column.name]
    if column.name in table.cases:
        chosen = _branch(line, where_said, table.cases[column.name], kept)
        return _field(line, where_said, table, chosen, kept)
    types = dict(table.physical)
    if column.name not in types or column.name in table.rows:
        raise SqlError(
            line, f"{where_said}: {column.sql()} is not a column of {table.name} the view reads"
        )
    return column.name, types[column.name]


def _branch(line: int, where_said: str, case: str, kept: dict[str, object]) -> exp.Column:
    """The column a `CASE WHEN f = literal THEN column … ELSE column END` is, for the records
    the view keeps."""
    node = sqlglot.parse_one(case, read=FLINK_LEXICON)
    for branch in node.args.get("ifs", []):
        condition = branch.this
        if (
            isinstance(condition, exp.EQ)
            and isinstance(condition.this, exp.Column)
            and condition.this.name in kept
            and isinstance(condition.expression, exp.Literal)
        ):
            if _json_value(condition.expression) == kept[condition.this.name]:
                return _chosen(line, where_said, branch.args["true"])
            continue
        raise SqlError(
            line,
            f"{where_said}: the view's WHERE does not decide WHEN {condition.sql()} (a CASE "
            "column is read where the WHERE fixes the fields it tests)",
        )
    return _chosen(line, where_said, node.args.get("default"))


def _chosen(line: int, where_said: str, node: exp.Expression | None) -> exp.Column:
    if not isinstance(node, exp.Column):
        raise SqlError(line, f"{where_said}: a CASE branch is read when it is a column")
    return node
