"""`JOIN_SELECT`: a Flink-style select list over `L` and `R`, applied to the joined changelog.

The joined rows carry every column as `L_<col>` / `R_<col>`; the list is parsed with sqlglot,
every node of it checked against the function library shared with `JOIN_ON`
(`state.expr.functions`: columns, literals, operators and Flink's scalar built-ins, nothing else, so
no configuration value reaches Spark's SQL parser unchecked), its `L.x` / `R.y` references
rewritten to those columns, and handed to Spark as expressions. Output names follow Flink's:
an alias, else the column's name, else `EXPR$<position>`; a name taken already gets the first
free suffix `0`, `1`, ... (`L.c, R.c` gives `c`, `c0`). The change kind `op` is kept in front.
"""

from __future__ import annotations

import sqlglot
from pyspark.sql import DataFrame
from sqlglot import exp
from sqlglot.errors import ParseError

from state.expr.condition import ALIASES, FLINK_LEXICON, ConditionError
from state.expr.functions import describe, unsupported


def _qualified_to_flat(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Column) and node.table.upper() in ALIASES:
        return exp.column(f"{node.table.upper()}_{node.name}", quoted=True)
    return node


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    return next(f"{name}{i}" for i in range(len(taken) + 1) if f"{name}{i}" not in taken)


def parse_select(select: str) -> exp.Expression:
    """The select list as one SELECT's tree; ConditionError if it does not parse."""
    try:
        return sqlglot.parse_one(f"SELECT {select}", read=FLINK_LEXICON)
    except ParseError as err:
        raise ConditionError(f"select list: {err.errors[0]['description']}") from None


def _select_items(
    select: str, columns: dict[str, tuple[str, ...]] | None
) -> list[tuple[str, exp.Expression]]:
    """Each item of the list: its output name and its expression over `L_`/`R_` columns."""
    tree = parse_select(select)
    items, taken = [], set()
    for position, item in enumerate(tree.expressions):
        inner = item.this if isinstance(item, exp.Alias) else item
        refused = unsupported(inner)
        if refused is not None:
            raise ConditionError(f"select list: {describe(refused)} is not supported")
        for column in inner.find_all(exp.Column):
            alias = column.table.upper()
            if alias not in ALIASES:
                raise ConditionError(
                    f"select list: column {column.sql()!r} must be qualified by L. or R."
                )
            if columns is not None and column.name not in columns[alias]:
                raise ConditionError(f"select list: {column.sql()!r}: no such column")
        if isinstance(item, exp.Alias) or isinstance(inner, exp.Column):
            name = item.alias_or_name
        else:
            name = f"EXPR${position}"
        name = _unique(name, taken)
        taken.add(name)
        items.append((name, inner.transform(_qualified_to_flat)))
    return items


def select_expressions(select: str, columns: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """Spark SQL expressions, each aliased to its output column name; ConditionError names
    what the list may not hold, or (given each alias' `columns`) a column that does not exist."""
    return [f"{e.sql(dialect='spark')} AS `{name}`" for name, e in _select_items(select, columns)]


def selected_columns(select: str) -> dict[str, str | None]:
    """Each output column's name, and the joined column (`L_<col>` / `R_<col>`) it is, if it
    is a bare column (None if computed): what says whether an output key holds the join key."""
    return {
        name: e.name if isinstance(e, exp.Column) else None
        for name, e in _select_items(select, None)
    }


def project(joined: DataFrame, select: str, keep: list[str] | None = None) -> DataFrame:
    """`op`, the columns named in `keep`, then the select list."""
    kept = [f"`{c}`" for c in keep or ()]
    return joined.selectExpr("op", *kept, *select_expressions(select))
