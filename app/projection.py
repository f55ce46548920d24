"""`JOIN_SELECT`: a Flink-style select list over `L` and `R`, applied to the joined changelog.

The joined rows carry every column as `L_<col>` / `R_<col>`; the list is parsed with sqlglot,
its `L.x` / `R.y` references rewritten to those columns, and handed to Spark as expressions.
The change kind column `op` is always kept in front.
"""

from __future__ import annotations

import sqlglot
from pyspark.sql import DataFrame
from sqlglot import exp
from sqlglot.errors import ParseError

from state.condition import ALIASES, ConditionError


def _qualified_to_flat(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Column) and node.table.upper() in ALIASES:
        return exp.column(f"{node.table.upper()}_{node.name}", quoted=True)
    return node


def select_expressions(select: str) -> list[str]:
    """Spark SQL expressions, each aliased to its output column name."""
    try:
        tree = sqlglot.parse_one(f"SELECT {select}")
    except ParseError as err:
        raise ConditionError(f"select list: {err.errors[0]['description']}") from None
    expressions = []
    for item in tree.expressions:
        name = item.alias_or_name
        inner = item.this if isinstance(item, exp.Alias) else item
        rewritten = inner.transform(_qualified_to_flat)
        expressions.append(f"{rewritten.sql(dialect='spark')} AS `{name}`")
    return expressions


def project(joined: DataFrame, select: str, keep: list[str] | None = None) -> DataFrame:
    """`op`, the columns named in `keep`, then the select list."""
    kept = [f"`{c}`" for c in keep or ()]
    return joined.selectExpr("op", *kept, *select_expressions(select))
