"""Flink's windowing table functions in a FROM clause, as a window join takes them.

`TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) AS a` (or `(SELECT * FROM …) a`)
is the table `t` with its rows' windows: the query is read as a join of `t AS a`, `t` given the
window's columns (`window_start`, `window_end`, `window_time`), and the windows kept aside for
the join (`JOIN_WINDOW`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from sqlglot import exp

from app.config.sql.ddl import SqlError, Table
from app.config.windows import WINDOW_ARGUMENTS, Windowing, windowing
from state.expr.condition import interval_ms
from state.joins.specs import WINDOW_COLUMNS

# `TABLE t` as a windowing function's first argument: sqlglot reads no table argument
_TABLE_ARGUMENT = re.compile(r"(\b(?:TUMBLE|HOP|CUMULATE)\s*\(\s*)TABLE\s+", re.I)
_SESSION = re.compile(r"\bTABLE\s*\(\s*SESSION\s*\(", re.I)


def readable(line: int, text: str) -> str:
    """The SQL (of line `line`) with `TABLE t` inside a windowing function's arguments written
    `t`; a SESSION window refused."""
    session = _SESSION.search(text)
    if session is not None:
        raise SqlError(
            line + text[: session.start()].count("\n"),
            "the window function SESSION is not supported (TUMBLE, HOP, CUMULATE)",
        )
    return _TABLE_ARGUMENT.sub(r"\1", text)


def _call(node: exp.Expression) -> exp.Anonymous | None:
    """The windowing function of `TABLE(f(…))` as a FROM item, if it is one."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Anonymous):
        return None
    wrapper = node.this
    if wrapper.name.upper() != "TABLE" or len(wrapper.expressions) != 1:
        return None
    call = wrapper.expressions[0]
    return call if isinstance(call, exp.Anonymous) else None


def _windows(line: int, call: exp.Anonymous, tables: dict[str, Table]) -> tuple[str, Windowing]:
    """The table a windowing function reads, and its windows."""
    function = call.name.upper()
    if function not in WINDOW_ARGUMENTS:
        raise SqlError(
            line, f"the window function {function} is not supported (TUMBLE, HOP, CUMULATE)"
        )
    if len(call.expressions) < 2 + len(WINDOW_ARGUMENTS[function]):
        raise SqlError(
            line,
            f"{call.sql()}: expected TABLE t, DESCRIPTOR(its rowtime), then "
            + ", ".join(WINDOW_ARGUMENTS[function]),
        )
    table, descriptor, *intervals = call.expressions
    name = table.name
    if not isinstance(table, exp.Column) or name not in tables:
        raise SqlError(line, f"{function}({table.sql()}, …): no table {name}")
    rowtime = tables[name].watermark[0] if tables[name].watermark else None
    described = descriptor.expressions if isinstance(descriptor, exp.Anonymous) else []
    if len(described) != 1 or described[0].name != rowtime:
        raise SqlError(
            line,
            f"{function}({name}, {descriptor.sql()}, …): the window's time is "
            f"{name}'s rowtime (its WATERMARK column)",
        )
    if not all(isinstance(i, exp.Interval) for i in intervals):
        raise SqlError(line, f"{function}({name}, …): its sizes are INTERVALs")
    sizes = ", ".join(f"{interval_ms(i)}ms" for i in intervals)
    try:
        return name, windowing(f"{function}({sizes})")
    except ValueError:
        raise SqlError(
            line,
            f"{call.sql()}: expected "
            + ", ".join(WINDOW_ARGUMENTS[function])
            + " (and an offset), a size a whole number of steps",
        ) from None


def _grouping(line: int, select: exp.Select) -> tuple[tuple[str, ...], dict[str, str]]:
    """A window aggregate without aggregate functions (`SELECT cols, window_start AS s, …
    GROUP BY cols, window_start, window_end`): its grouping columns, the window's bounds aside,
    and the names its select list gives columns (`s` -> `window_start`)."""
    grouped = [g.name for g in select.args["group"].expressions if isinstance(g, exp.Column)]
    if len(grouped) != len(select.args["group"].expressions) or not set(WINDOW_COLUMNS[:2]) <= set(
        grouped
    ):
        raise SqlError(
            line,
            f"GROUP BY {select.args['group'].sql()}: a window aggregate groups by columns and "
            "by window_start and window_end, to be joined on its windows",
        )
    renames = {}
    for item in select.expressions:
        column = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(column, exp.Column) or column.name not in grouped:
            raise SqlError(
                line,
                f"{item.sql()}: a window aggregate before a window join selects its grouping "
                "columns (aggregate functions are not supported)",
            )
        renames[item.alias_or_name] = column.name
    return tuple(g for g in grouped if g not in WINDOW_COLUMNS), renames


def unwrapped(
    line: int, query: exp.Expression, tables: dict[str, Table]
) -> tuple[exp.Expression, dict[str, Table], dict[str, Windowing], dict[str, tuple[str, ...]]]:
    """The query with each windowing function as the table it reads, the tables with those
    given their windows' columns, each windowed table's windows, and the grouping columns of
    each that is a window aggregate first (its columns' other names in the query undone)."""
    windows: dict[str, Windowing] = {}
    groups: dict[str, tuple[str, ...]] = {}
    renames: dict[str, dict[str, str]] = {}  # by the alias of a window aggregate

    def table_of(node: exp.Expression) -> exp.Expression:
        inner, grouping = node, None
        if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
            select = node.this
            source = select.args.get("from_") or select.args.get("from")
            extra = [
                k
                for k, v in select.args.items()
                if v and k not in ("expressions", "from_", "from", "group")
            ]
            star = [type(e) for e in select.expressions] == [exp.Star]
            if source is None or extra or not (star or select.args.get("group")):
                return node
            inner = source.this
            if select.args.get("group") and _call(inner) is not None:
                grouping = _grouping(line, select)
        call = _call(inner)
        if call is None:
            return node
        name, found = _windows(line, call, tables)
        if windows.setdefault(name, found) != found:
            raise SqlError(line, f"{name} through two windowing functions is not supported")
        alias_name = node.alias or inner.alias or name
        if grouping is not None:
            groups[name], renames[alias_name.lower()] = grouping
        alias = exp.TableAlias(this=exp.to_identifier(alias_name))
        return exp.Table(this=exp.to_identifier(name), alias=alias)

    def renamed(node: exp.Expression) -> exp.Expression:
        names = renames.get(node.table.lower()) if isinstance(node, exp.Column) else None
        if names and node.name in names:
            return exp.column(names[node.name], table=node.table)
        return node

    unwrapped_query = query.transform(table_of).transform(renamed)
    windowed = dict(tables)
    for name in windows:
        table = tables[name]
        added = [c for c in WINDOW_COLUMNS if c not in table.declared]
        windowed[name] = replace(
            table,
            physical=[*table.physical, *((c, "TIMESTAMP(3)") for c in added)],
            declared=[*table.declared, *added],
        )
    return unwrapped_query, windowed, windows, groups
