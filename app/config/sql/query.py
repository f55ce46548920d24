"""Flink SQL as the configuration: `STREAMJOIN_SQL` (the text) or `STREAMJOIN_SQL_FILE` (a path).

A script as Flink's SQL client takes it: `SET 'table.exec.state.ttl' = …`, a `CREATE [TEMPORARY]
TABLE … WITH (…)` for each input and for the output (Flink's `kafka`, `upsert-kafka` and `jdbc`
connectors), and one `INSERT INTO out SELECT … FROM a … JOIN b …`. It is compiled into the
environment variables it stands for (`LEFT_TOPIC`, `JOIN_TYPE`, `JOIN_ON`, …), so SQL and
variables share one code path after this module: the same checks, plan, `check` and `explain`.

The join's form follows from the SQL as Flink's planner decides it: `FOR SYSTEM_TIME AS OF` the
left's rowtime is an event-time temporal join, as of a `PROCTIME()` column a processing-time one
(a lookup join when the table is `jdbc`); a condition bounding one input's rowtime by the
other's is an interval join; anything else a regular join; `IN` / `EXISTS` subqueries are semi
joins, `NOT EXISTS` and `NOT IN` anti joins (`NOT IN` null-aware, as Flink's: over nullable
columns its condition is `L.a = R.d OR L.a IS NULL OR R.d IS NULL`, which has no join key).
Aliases and table names become `L` / `R`, unqualified columns are qualified by the table that
has them, and the select list takes the output table's column names by position, as Flink's
INSERT does.

Three or more tables are a chain of joins, planned as Flink plans a FROM clause (left-deep, in
the written order): the first join's variables are the variables above; each later join, of
the result so far (`L`, its columns `t<i>_<name>`) with its table (`R`), gets a set of its own
(`Compiled.chain`: its table's `RIGHT_*` or, a jdbc table's, `LOOKUP_*`, its `JOIN_*`, and
`LEFT_TIME`, the result's column a time join takes as its left's time). Its form follows
Flink's rules on time attributes (`_chained_join`); an `IN` / `EXISTS` beside the joins is a
semi or anti join of their result.

What Flink accepts and streamjoin does not run (GROUP BY, window functions, most nested joins,
an option it does not know, a secret in the text) is refused, naming the construct and its
line.
Secrets stay variables (a ConfigMap holds this text): `'password'`, `'properties.sasl.jaas.config'`
and the like are refused with the variable to use instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from app.config.sql.ddl import (
    CREATE_TABLE,
    Compiled,
    SqlError,
    Table,
    create_table,
    duration,
    input_table,
    jdbc_table,
    output_table,
    sql_string,
    starting_offsets,
    statements,
)
from app.config.sql.derived import inlined, null_wherever_a_column_is
from app.config.sql.views import CREATE_VIEW, create_view
from app.config.sql.windows import readable, unwrapped
from state.columns import chained_column
from state.expr.condition import FLINK_LEXICON
from state.expr.functions import describe, unsupported

SQL_TEXT = "STREAMJOIN_SQL"
SQL_VARIABLES = (SQL_TEXT, "STREAMJOIN_SQL_FILE")


# --- the query -----------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinQuery:
    """A SELECT over two tables as the join variables say it."""

    type: str
    kind: str
    left: str
    right: str
    on: str
    select: str
    left_time: str | None = None  # the left's time attribute, where the join names it
    # a WHERE after an outer join: a condition over the joined rows (`JOIN_WHERE`)
    where: str = ""
    window: str | None = None  # a window join's windows, as `JOIN_WINDOW` takes them
    # a window join's inputs' grouping columns, each a window aggregate first
    groups: tuple[str | None, str | None] = (None, None)


class _Sides:
    """Resolves a query's names to `L` / `R`: the table joined last is `R`, the tables before it
    `L` (in a chain of joins, the result so far, whose columns are `chained_column(i, name)`
    for its i-th table's)."""

    def __init__(
        self, line: int, tables: list[Table], aliases: list[set[str]], prefer: str | None = None
    ) -> None:
        """`prefer`: the side an unqualified name both sides have is (a subquery's own)."""
        self.line, self.members, self.prefer = line, tables, prefer
        self.last = len(tables) - 1
        self.visible = "LR"  # the sides the query's own names may be of
        self.written = list(range(len(tables)))  # the tables' places, in the order written
        self.names: dict[str, int] = {}
        for i, names in reversed(list(enumerate(aliases))):  # the first table wins a clash
            self.names |= {n.lower(): i for n in names}

    @property
    def tables(self) -> dict[str, Table]:
        """The two tables of a join of two."""
        return {"L": self.members[0], "R": self.members[self.last]}

    def inner(self) -> _Sides:
        """The same names, read inside a subquery over the right table."""
        sides = _Sides(self.line, self.members, [], prefer="R")
        sides.names = self.names
        return sides

    def side(self, index: int) -> str:
        return "R" if index == self.last else "L"

    def index_of(self, column: exp.Column) -> int:
        """The position of the table a column is of."""
        qualifier = column.table.lower()
        if qualifier:
            if qualifier not in self.names:
                raise SqlError(self.line, f"{column.sql()}: no table or alias {column.table}")
            index = self.names[qualifier]
            table = self.members[index]
            if column.name not in [*table.columns(), table.proctime]:
                raise SqlError(
                    self.line, f"{column.sql()}: {table.name} has no column {column.name}"
                )
            return index
        found = [
            i
            for i, table in enumerate(self.members)
            if self.side(i) in self.visible and column.name in table.columns()
        ]
        if len(found) > 1 and self.prefer:
            return self.last
        if len(found) != 1:
            several = "both tables" if len(self.members) == 2 else "more than one table"
            why = f"is in {several}: qualify it" if found else "is in no table"
            raise SqlError(self.line, f"column {column.name} {why}")
        return found[0]

    def side_of(self, column: exp.Column) -> str:
        return self.side(self.index_of(column))

    def column(self, index: int, name: str) -> exp.Column:
        """`L.x` / `R.y` for the column `name` of the table at `index`, as stored."""
        stored = self.members[index].stored(name)
        if self.last > 1 and index < self.last:
            stored = chained_column(index, stored)
        return _column_of(self.side(index), stored)

    def rewrite(self, node: exp.Expression) -> exp.Expression:
        """Columns as `L.x` / `R.y` (a computed column as the column it converts)."""

        def one(part: exp.Expression) -> exp.Expression:
            if isinstance(part, exp.Column) and not isinstance(part.this, exp.Star):
                index = self.index_of(part)
                if part.name == self.members[index].proctime:
                    raise SqlError(
                        self.line,
                        f"{part.sql()}: the processing-time column is "
                        "only for FOR SYSTEM_TIME AS OF",
                    )
                return self.column(index, part.name)
            return part

        return node.copy().transform(one)


def _identifier(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def _column_of(side: str, name: str) -> exp.Column:
    return exp.column(name, table=side, quoted=_identifier(name) != name)


def _refuse_clauses(line: int, select: exp.Select) -> None:
    for key, what in (
        ("group", "GROUP BY"),
        ("having", "HAVING"),
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("distinct", "DISTINCT"),
        ("with", "WITH"),
        ("windows", "WINDOW"),
        ("qualify", "QUALIFY"),
    ):
        if select.args.get(key):
            raise SqlError(line, f"{what} is not supported: streamjoin runs joins only")
    for node in select.expressions:
        if node.find(exp.AggFunc):
            raise SqlError(line, f"{node.find(exp.AggFunc).sql()}: aggregates are not supported")
        if node.find(exp.Window):
            raise SqlError(line, "OVER windows are not supported")


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _and(parts: list[exp.Expression]) -> exp.Expression | None:
    return exp.and_(*parts) if parts else None


def _table_of(line: int, node: exp.Expression, tables: dict[str, Table]) -> tuple[Table, str]:
    if not isinstance(node, exp.Table) or node.args.get("db") or not node.name:
        raise SqlError(
            line,
            f"{node.sql()} is not supported: only a table is joined (no "
            "subquery, table function or window)",
        )
    if node.name not in tables:
        raise SqlError(line, f"no table {node.name} (CREATE TABLE it first)")
    return tables[node.name], node.alias or node.name


def compile_query(
    line: int, query: exp.Expression, tables: dict[str, Table], outputs: list[str] | None
) -> tuple[list[JoinQuery], list[Table], dict[str, int]]:
    """The joins a SELECT is, and the tables it joins in order: the first join's of the first
    two, each next one's of the result so far (`L`) and the next table (`R`), as Flink plans a
    FROM clause (left-deep, in the written order). The last join carries the select list;
    `outputs`: the output table's columns (the select list's names); and each table's name
    and alias (lower case) -> its place in that order. Two tables through the same windowing
    function are a window join (`app.config.sql.windows`)."""
    query, windowed, windows, groups = unwrapped(line, query, tables)
    query = inlined(line, query, windowed)
    queries, members, names = _compiled_joins(line, query, windowed, outputs)
    if windows:
        first = queries[0]
        same = windows.get(first.left) == windows.get(first.right) is not None
        if len(queries) > 1 or not same or set(windows) != {first.left, first.right}:
            raise SqlError(
                line,
                "a windowing function (TUMBLE, HOP, CUMULATE) is supported in a window join "
                "of two tables through the same one, alone in its query",
            )
        window = str(windows[first.left])
        grouped = tuple(
            ",".join(groups[t]) if t in groups else None for t in (first.left, first.right)
        )
        queries = [replace(first, type="window", window=window, groups=grouped)]
    return queries, [tables[m.name] for m in members], names


def _compiled_joins(
    line: int, query: exp.Expression, tables: dict[str, Table], outputs: list[str] | None
) -> tuple[list[JoinQuery], list[Table], dict[str, int]]:
    """`compile_query`'s joins, windows aside."""
    if not isinstance(query, exp.Select):
        raise SqlError(line, f"{query.key.upper()} is not supported: one SELECT … JOIN")
    _refuse_clauses(line, query)
    source = query.args.get("from_") or query.args.get("from")
    if source is None:
        raise SqlError(line, "a SELECT without FROM")
    left, left_alias = _table_of(line, source.this, tables)
    joins = query.args.get("joins") or []
    where = _conjuncts(query.args.get("where").this if query.args.get("where") else None)
    if not joins:
        subquery, right, sides = _subquery_join(
            line, tables, [left], [{left_alias, left.name}], where
        )
        select = _select_list(line, query, sides, outputs)
        return [replace(subquery, select=select)], [left, right], sides.names
    # IN / EXISTS beside joins: a semi or anti join of their result, as Flink plans the filter
    subqueries = [part for part in where if part.find(exp.Select)]
    where = [part for part in where if not part.find(exp.Select)]
    if len(subqueries) > 1:
        raise SqlError(line, "more than one IN / EXISTS (SELECT …) beside JOINs is not supported")
    joins = _flattened(line, joins)
    members, aliases, function_times = [left], [{left_alias, left.name}], []
    for join in joins:
        if isinstance(join.this, exp.Lateral):
            right, right_alias, function_time = _temporal_function(line, join.this, tables)
        else:
            (right, right_alias), function_time = _table_of(line, join.this, tables), None
        members.append(right)
        aliases.append({right_alias, right.name})
        function_times.append(function_time)
    kinds = [(join.side or "inner").lower() for join in joins]
    order = _run_order(line, joins, members, aliases, function_times, kinds)
    joins, function_times, kinds = (
        [items[n] for n in order] for items in (joins, function_times, kinds)
    )
    written = [0, *(1 + order.index(n) for n in range(len(order)))]  # each table's new place
    members, aliases = ([items[0], *(items[1 + n] for n in order)] for items in (members, aliases))
    # A WHERE after an outer join filters its rows, padded ones included: a condition of the
    # joined rows, not of a join (Flink pushes what it can into the joins; the rows are these)
    after, where = (where, []) if any(kind != "inner" for kind in kinds) else ([], where)
    # a WHERE conjunct is a condition of the first join that has all the tables it names
    placed: dict[int, list[exp.Expression]] = {n: [] for n in range(1, len(members))}
    everything = _Sides(line, members, aliases)
    for part in where:
        placed[max([everything.index_of(c) for c in part.find_all(exp.Column)] + [1])].append(part)
    queries: list[JoinQuery] = []
    for number, join in enumerate(joins, start=1):
        sides = _Sides(line, members[: number + 1], aliases[: number + 1])
        on = _conjuncts(join.args.get("on")) + placed[number]
        queries.append(
            _join_query(
                line, sides, join, kinds[number - 1], on, function_times[number - 1], queries
            )
        )
    if subqueries:
        subquery, right, sides = _subquery_join(line, tables, members, aliases, subqueries)
        queries.append(subquery)
        members.append(right)
        written.append(len(written))
    sides.written = written
    filtered = _and([sides.rewrite(part) for part in after])
    last = replace(
        queries[-1],
        select=_select_list(line, query, sides, outputs),
        where=filtered.sql(FLINK_LEXICON) if filtered is not None else "",
    )
    return [*queries[:-1], last], members, sides.names


def _flattened(line: int, joins: list[exp.Join]) -> list[exp.Join]:
    """The joins with a nested join (`a JOIN (b LEFT JOIN c ON p) ON q`) flattened into the
    chain (`a JOIN b ON q LEFT JOIN c ON p`): the same rows where the outer join is INNER, the
    nested ones INNER or LEFT, and `q` names no table of the nested join but its first (an
    INNER join is associative, and a LEFT join keeps every row of its left, whatever was
    joined to that left before). Flink joins the nested result instead; its final tables are
    these (the replay fixtures hold them). Other nestings are refused."""
    flat: list[exp.Join] = []
    for join in joins:
        group = join.this
        if not (
            isinstance(group, exp.Subquery)
            and isinstance(group.this, exp.Table)
            and group.this.args.get("joins")
        ):
            flat.append(join)
            continue
        nested = group.this.args["joins"]
        kinds = [(join.side or "inner").lower(), *((j.side or "inner").lower() for j in nested)]
        if join.kind or kinds[0] != "inner" or any(k not in ("inner", "left") for k in kinds):
            raise SqlError(
                line,
                f"{group.sql(FLINK_LEXICON)}: a nested join is supported as "
                "an INNER JOIN of INNER and LEFT joins (a JOIN (b LEFT JOIN c ON …) "
                "ON …)",
            )
        later = {name.lower() for j in nested for name in (j.this.alias_or_name, j.this.name)}
        on = join.args.get("on")
        named = {c.table.lower() for c in on.find_all(exp.Column)} if on is not None else set()
        if named & later:
            raise SqlError(
                line,
                f"{group.sql(FLINK_LEXICON)}: the condition of a nested join "
                "(ON …) may name only its first table among the nested ones",
            )
        first = group.this.copy()
        first.set("joins", None)
        flat.append(exp.Join(this=first, on=on))
        flat += _flattened(line, nested)
    return flat


def _run_order(
    line: int,
    joins: list[exp.Join],
    members: list[Table],
    aliases: list[set[str]],
    function_times: list[exp.Expression | None],
    kinds: list[str],
) -> list[int]:
    """The joins in the order they run: as written, but for a temporal or lookup join after
    regular INNER or LEFT joins that names only the first table's columns (in its condition and
    its AS OF): it runs first, on the first table's rows, an append-only input where the
    written order would give it a changelog to probe and retract. The result is the same (the
    joins in between keep every row of the first table it reads), as Flink's fixtures show."""
    order = list(range(len(joins)))

    def as_of(n: int) -> exp.Expression | None:
        version = joins[n].this.args.get("version")
        return function_times[n] or (version.args.get("expression") if version else None)

    if as_of(0) is not None:
        return order
    for n in range(1, len(joins)):
        at = as_of(n)
        if at is None or any(kind not in ("inner", "left") for kind in kinds[:n]):
            continue
        sides = _Sides(line, members[: n + 2], aliases[: n + 2])
        parts = [at, *_conjuncts(joins[n].args.get("on"))]
        named = {sides.index_of(c) for part in parts for c in part.find_all(exp.Column)}
        if named <= {0, n + 1}:
            return [n, *(m for m in order if m != n)]
    return order


def _join_query(
    line: int,
    sides: _Sides,
    join: exp.Join,
    kind: str,
    on: list[exp.Expression],
    function_time: exp.Expression | None,
    before: list[JoinQuery],
) -> JoinQuery:
    """One join of a FROM clause, the joins `before` it already compiled."""
    left, right = sides.tables["L"], sides.tables["R"]
    if join.kind and join.kind.upper() in ("SEMI", "ANTI", "NATURAL"):
        raise SqlError(line, f"{join.kind.upper()} JOIN is not supported")
    if join.args.get("using"):
        raise SqlError(line, "JOIN … USING is not supported: write ON")
    if not on:
        raise SqlError(line, "a join without a condition (a cross join) is not supported")
    version = join.this.args.get("version")
    join_type, left_time = "regular", None
    if before and function_time is not None:
        raise SqlError(
            line,
            f"{right.name}: a temporal table function (LATERAL TABLE) after "
            "another join is not supported: write FOR SYSTEM_TIME AS OF",
        )
    if before:
        join_type, left_time = _chained_join(line, sides, right, before, version, on, kind)
    elif function_time is not None:
        join_type, left_time = "temporal-function", _function_time(line, sides, function_time, kind)
    elif version is not None:
        join_type = _temporal_type(line, sides, version, right, kind)
    elif _bounds_time(sides, on, left, right):
        join_type = "interval"
    condition = _and([sides.rewrite(part) for part in on])
    assert condition is not None
    return JoinQuery(
        join_type, kind, left.name, right.name, condition.sql(FLINK_LEXICON), "", left_time
    )


def _chained_join(
    line: int,
    sides: _Sides,
    right: Table,
    before: list[JoinQuery],
    version: exp.Expression | None,
    on: list[exp.Expression],
    kind: str,
) -> tuple[str, str | None]:
    """The type of a join after another, and the result's column it takes as its left time.
    Flink's rules: a regular join gives up its inputs' time attributes, so after one a
    condition between two rowtimes is a plain condition; an interval, temporal or lookup join
    keeps its left's, so after them two rowtimes bound an interval join. A temporal join
    probes as of a left rowtime after any join (Flink takes the value the regular joins
    carried, and the watermark that passes through them), a lookup join as of the first
    table's processing time."""
    if version is not None:
        at = version.args.get("expression")
        if kind not in ("inner", "left"):
            raise SqlError(
                line, f"a {kind.upper()} temporal join is not supported (INNER, LEFT), as in Flink"
            )
        if not isinstance(at, exp.Column) or sides.side_of(at) != "L":
            raise SqlError(
                line, "FOR SYSTEM_TIME AS OF must name a time column of a table before it"
            )
        index = sides.index_of(at)
        table = sides.members[index]
        if at.name == table.proctime:
            if right.options.get("connector") != "jdbc":
                raise SqlError(
                    line,
                    f"{right.name}: a processing-time temporal join after "
                    "another join is not supported: join a jdbc table (a lookup "
                    "join)",
                )
            if index != 0:
                raise SqlError(
                    line,
                    f"FOR SYSTEM_TIME AS OF {at.sql()}: a lookup join after "
                    "another is made as of the first table's PROCTIME() column",
                )
            return "lookup", None
        if table.watermark is None or table.watermark[0] != at.name:
            raise SqlError(
                line,
                f"FOR SYSTEM_TIME AS OF {at.sql()}: a rowtime (a WATERMARK "
                "column) or a PROCTIME() column",
            )
        if right.options.get("connector") == "jdbc":
            raise SqlError(line, "a jdbc table is joined as of a PROCTIME() column (a lookup join)")
        _never_padded(line, sides, before, index, at)
        return "temporal", sides.column(index, at.name).name
    if right.options.get("connector") == "jdbc":
        raise SqlError(
            line,
            f"{right.name} is a jdbc table: join it FOR SYSTEM_TIME AS OF a "
            "PROCTIME() column of the left (a lookup join)",
        )
    if right.watermark is None or any(q.type == "regular" for q in before):
        return "regular", None
    rowtimes = {(i, t.watermark[0]) for i, t in enumerate(sides.members[:-1]) if t.watermark}
    for part in on:
        if isinstance(part, exp.EQ | exp.NEQ):
            continue
        columns = {(sides.index_of(c), c.name) for c in part.find_all(exp.Column)}
        bounded = columns & rowtimes
        if (sides.last, right.watermark[0]) in columns and bounded:
            index, name = min(bounded)
            _never_padded(line, sides, before, index, None)
            return "interval", sides.column(index, name).name
    return "regular", None


def _never_padded(
    line: int, sides: _Sides, before: list[JoinQuery], index: int, at: exp.Column | None
) -> None:
    """Refuse a time join over a table whose rows an outer join before it may pad with NULLs
    (their time would be NULL)."""
    for number, query in enumerate(before, start=1):
        pads = (index < number and query.kind in ("right", "full")) or (
            index == number and query.kind in ("left", "full")
        )
        if pads:
            what = f"FOR SYSTEM_TIME AS OF {at.sql()}" if at is not None else "an interval join"
            raise SqlError(
                line,
                f"{what}: the {query.kind.upper()} JOIN before it may pad "
                f"the columns of {sides.members[index].name} with NULLs, its time "
                "too: time it by a table no join pads",
            )


def _temporal_function(
    line: int, lateral: exp.Lateral, tables: dict[str, Table]
) -> tuple[Table, str, exp.Expression]:
    """`LATERAL TABLE (Rates(o.t))`: the table the temporal table function is over, its alias,
    and the time it is called with. Flink defines the function in the Table API
    (`createTemporalTableFunction(time, key)` over a history table); here its name is that
    table's, whose WATERMARK and PRIMARY KEY are the function's time and key."""
    call = lateral.this
    inner = call.expressions[0] if isinstance(call, exp.Anonymous) and call.expressions else None
    if (
        not isinstance(call, exp.Anonymous)
        or call.name.upper() != "TABLE"
        or len(call.expressions) != 1
        or not isinstance(inner, exp.Anonymous)
    ):
        raise SqlError(
            line,
            f"{lateral.sql(FLINK_LEXICON)} is not supported: LATERAL TABLE "
            "joins a temporal table function (Rates(o.rowtime))",
        )
    name = inner.name
    table = tables.get(name) or next(
        (t for n, t in tables.items() if n.lower() == name.lower()), None
    )
    if table is None:
        raise SqlError(
            line,
            f"LATERAL TABLE ({name}(…)): no table {name}: declare the history "
            f"it is over as CREATE TABLE {name} (…, PRIMARY KEY (…) NOT ENFORCED, "
            "WATERMARK FOR …): the function is named as its table",
        )
    if not table.primary_key:
        raise SqlError(
            line,
            f"LATERAL TABLE ({name}(…)): {table.name} needs a PRIMARY KEY "
            "(… NOT ENFORCED): the temporal table function's key",
        )
    if len(inner.expressions) != 1 or not isinstance(inner.expressions[0], exp.Column):
        raise SqlError(line, f"LATERAL TABLE ({name}(…)) takes one time column of the left table")
    alias = lateral.alias or name
    return table, alias, inner.expressions[0]


def _function_time(line: int, sides: _Sides, at: exp.Expression, kind: str) -> str:
    """The left's time attribute a temporal table function is called with: its rowtime (the
    WATERMARK column), or a PROCTIME() column."""
    if kind != "inner":
        raise SqlError(
            line,
            f"a {kind.upper()} join of a temporal table function is not "
            "supported: join it INNER (FROM o, LATERAL TABLE (…) WHERE …)",
        )
    assert isinstance(at, exp.Column)
    left = sides.tables["L"]
    if sides.side_of(at) != "L":
        raise SqlError(line, f"LATERAL TABLE (…({at.sql()})): a time column of the left table")
    if at.name == left.proctime:
        return "proctime"
    if left.watermark is None or left.watermark[0] != at.name:
        raise SqlError(
            line,
            f"LATERAL TABLE (…({at.sql()})): the left's rowtime (its WATERMARK "
            "column) or a PROCTIME() column",
        )
    return left.stored(at.name)


def _temporal_type(
    line: int, sides: _Sides, version: exp.Expression, right: Table, kind: str
) -> str:
    at = version.args.get("expression")
    if kind not in ("inner", "left"):
        raise SqlError(
            line, f"a {kind.upper()} temporal join is not supported (INNER, LEFT), as in Flink"
        )
    if not isinstance(at, exp.Column) or sides.side_of(at) != "L":
        raise SqlError(line, "FOR SYSTEM_TIME AS OF must name a time column of the left table")
    left = sides.tables["L"]
    if at.name == left.proctime:
        return "lookup" if right.options.get("connector") == "jdbc" else "temporal-proctime"
    if left.watermark is None or left.watermark[0] != at.name:
        raise SqlError(
            line,
            f"FOR SYSTEM_TIME AS OF {at.sql()}: the left's rowtime (its "
            "WATERMARK column) or a PROCTIME() column",
        )
    if right.options.get("connector") == "jdbc":
        raise SqlError(line, "a jdbc table is joined as of a PROCTIME() column (a lookup join)")
    return "temporal"


def _bounds_time(sides: _Sides, on: list[exp.Expression], left: Table, right: Table) -> bool:
    """Whether a conjunct compares the two rowtimes (Flink's interval join)."""
    if left.watermark is None or right.watermark is None:
        return False
    times = {("L", left.watermark[0]), ("R", right.watermark[0])}
    for part in on:
        if isinstance(part, exp.EQ | exp.NEQ):
            continue
        columns = {(sides.side_of(c), c.name) for c in part.find_all(exp.Column)}
        if times <= columns:
            return True
    return False


def _select_list(line: int, query: exp.Select, sides: _Sides, outputs: list[str] | None) -> str:
    items: list[tuple[str, exp.Expression]] = []
    for item in query.expressions:
        star = (
            item
            if isinstance(item, exp.Star)
            else item.this
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
            else None
        )
        if star is not None:
            qualifier = item.table.lower() if isinstance(item, exp.Column) else ""
            chosen = (
                [sides.names[qualifier]]
                if qualifier
                else [i for i in sides.written if sides.side(i) in sides.visible]
            )
            for index in chosen:
                items.extend(
                    (name, sides.column(index, name)) for name in sides.members[index].columns()
                )
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        refused = unsupported(inner)
        if refused is not None:
            raise SqlError(line, f"{describe(refused)} is not supported in the select list")
        name = item.alias_or_name if isinstance(item, exp.Alias | exp.Column) else ""
        items.append((name, sides.rewrite(inner)))
    if outputs is not None:
        if len(outputs) != len(items):
            raise SqlError(
                line, f"the SELECT gives {len(items)} columns, the output table has {len(outputs)}"
            )
        items = [(name, expression) for name, (_, expression) in zip(outputs, items, strict=True)]
    return ", ".join(
        expression.sql(FLINK_LEXICON) + (f" AS {_identifier(name)}" if name else "")
        for name, expression in items
    )


def _aliases(node: exp.Expression) -> set[str]:
    return {column.table for column in node.find_all(exp.Column)}


def _as_decorrelated(
    line: int, written: exp.Expression, conjunct: exp.Expression, not_in: bool
) -> list[exp.Expression]:
    """A conjunct of a correlated subquery's WHERE (`written`; `conjunct` over `L`, the outer
    row, and `R`, the subquery's) as the semi or anti join Flink's planner makes of it.

    A conjunct of one of them alone, or an equality of an expression of each, joins as
    written. Flink's decorrelation evaluates any other over both (an `IS NOT DISTINCT FROM`,
    an OR, a comparison) over the outer rows' distinct values of the columns it names, joined
    back to them by `=`: in `EXISTS`, `NOT EXISTS` and `IN`, an outer row NULL in one of those
    meets no row, whatever the conjunct says of NULLs (checked against Flink 2.3: `L.k IS NOT
    DISTINCT FROM R.k` matches no NULL `L.k` there, in a window's join as in a regular one).
    Under `NOT IN`, whose NULLs Flink's null-aware anti join treats apart, only a conjunct NULL
    wherever a column is runs (the same there either way); another is refused rather than
    answered otherwise."""
    node = conjunct.unnest()
    if _aliases(node) != {"L", "R"}:
        return [conjunct]
    if isinstance(node, exp.EQ) and {
        frozenset(_aliases(node.this)),
        frozenset(_aliases(node.expression)),
    } == {frozenset({"L"}), frozenset({"R"})}:
        return [conjunct]
    if not_in:
        if null_wherever_a_column_is(node):
            return [conjunct]
        raise SqlError(
            line,
            f"NOT IN (SELECT … WHERE {written.sql(FLINK_LEXICON)}): a condition over both "
            "tables that is not NULL wherever a column is, under NOT IN, is not supported "
            "(Flink's NULLs there are not reproduced); NOT EXISTS is",
        )
    named = dict.fromkeys(c.name for c in node.find_all(exp.Column) if c.table == "L")
    present = [exp.column(name, table="L").is_(exp.null()).not_() for name in named]
    return [*present, conjunct]


def _subquery_join(
    line: int,
    tables: dict[str, Table],
    members: list[Table],
    aliases: list[set[str]],
    where: list[exp.Expression],
) -> tuple[JoinQuery, Table, _Sides]:
    """`WHERE x IN (SELECT …)` / `EXISTS (…)` over `members` (one table, or the result of their
    joins): a semi join; negated, an anti join (its select list to fill); the subquery's
    table; the names of the join."""
    found = [
        p
        for p in where
        if isinstance(p.unnest(), exp.In | exp.Exists | exp.Not)
        and p.find(exp.Subquery, exp.Exists)
    ]
    if len(found) != 1:
        raise SqlError(
            line, "a SELECT from one table: a join, IN (SELECT …) or EXISTS (…) is needed"
        )
    part = found[0].unnest()
    negated = isinstance(part, exp.Not)
    part = part.this.unnest() if negated else part
    rest = [p for p in where if p is not found[0]]
    if negated and rest:
        raise SqlError(
            line, "NOT IN / NOT EXISTS beside other conditions in WHERE is not supported"
        )
    inner = part.this if isinstance(part, exp.Exists) else part.args.get("query")
    inner = inner.this if isinstance(inner, exp.Subquery) else inner
    if not isinstance(inner, exp.Select) or inner.args.get("joins"):
        raise SqlError(line, "the subquery must be a SELECT from one table")
    _refuse_clauses(line, inner)
    inner_from = inner.args.get("from_") or inner.args.get("from")
    right, right_alias = _table_of(line, inner_from.this, tables)
    sides = _Sides(line, [*members, right], [*aliases, {right_alias, right.name}])
    within = sides.inner()
    sides.visible = "L"  # the subquery's table is not the outer query's
    not_in = negated and isinstance(part, exp.In)
    on = [
        kept
        for p in _conjuncts(inner.args["where"].this if inner.args.get("where") else None)
        for kept in _as_decorrelated(line, p, within.rewrite(p), not_in)
    ]
    if isinstance(part, exp.In):
        if len(inner.expressions) != 1 or not isinstance(part.this, exp.Column):
            raise SqlError(line, "IN (SELECT …) compares one column with one column")
        [selected] = inner.expressions
        outer, chosen = sides.rewrite(part.this), within.rewrite(selected)
        equal: exp.Expression = exp.EQ(this=outer, expression=chosen)
        pairs = ((part.this, sides.index_of(part.this)), (selected, within.index_of(selected)))
        nullable = [c for c, index in pairs if c.name not in sides.members[index].not_null]
        if negated and nullable:
            # Flink's NOT IN is null-aware (Calcite: `(a = d) IS NOT FALSE` under the anti
            # join): a NULL on either side matches, so no left row passes a right NULL
            checks = [exp.Is(this=c, expression=exp.Null()) for c in (outer, chosen)]
            equal = exp.or_(equal, *checks)
        on.insert(0, equal)
    if not on:
        raise SqlError(line, "the subquery needs a condition on the outer table")
    condition = _and(on + [sides.rewrite(p) for p in rest])
    assert condition is not None
    kind = "anti" if negated else "semi"
    return (
        JoinQuery("regular", kind, members[0].name, right.name, condition.sql(FLINK_LEXICON), ""),
        right,
        sides,
    )


# --- the script ----------------------------------------------------------------------------

_SET = re.compile(r"^SET\s+('(?:[^']|'')*'|[\w.-]+)\s*=\s*('(?:[^']|'')*'|\S+)$", re.I | re.S)


_PARALLELISM = {
    "parallelism.default": "STATE_PARTITIONS",
    "pipeline.max-parallelism": "JOIN_STATE_BUCKETS",
}


def _set(line: int, statement: str, out: Compiled) -> None:
    match = _SET.match(statement)
    if match is None:
        raise SqlError(line, "SET is written SET 'key' = 'value'")
    key, value = (sql_string(v) if v.startswith("'") else v for v in (match[1], match[2]))
    if key == "table.exec.state.ttl":
        out.set("STATE_TTL", duration(value, line), line)
    elif key == IDLE_TIMEOUT_OPTION:
        out.set("SOURCE_IDLE_TIMEOUT", duration(value, line), line)
    elif key in _PARALLELISM:  # a key group is a bucket, a subtask a state partition
        out.set(_PARALLELISM[key], value, line)
    elif key == MULTI_JOIN_OPTION:
        if value.lower() == "true":
            out.multi_way = f"line {line} (SET '{MULTI_JOIN_OPTION}')"
    elif key == MINI_BATCH_OPTION:
        out.set("JOIN_MINI_BATCH", value.lower(), line)
    elif key in MINI_BATCH_BOUNDS:  # Flink's bundle, here the micro-batch (TRIGGER_INTERVAL)
        pass
    elif key == "table.local-time-zone":
        if value.upper() not in ("UTC", "Z", "GMT", "+00:00"):
            raise SqlError(line, f"'table.local-time-zone' {value!r}: streamjoin's session is UTC")
    else:
        raise SqlError(
            line,
            f"SET '{key}' is not supported (table.exec.state.ttl, {IDLE_TIMEOUT_OPTION}, "
            f"table.local-time-zone, {', '.join(_PARALLELISM)}, "
            f"{MULTI_JOIN_OPTION}, {MINI_BATCH_OPTION}, {', '.join(MINI_BATCH_BOUNDS)})",
        )


IDLE_TIMEOUT_OPTION = "table.exec.source.idle-timeout"
MULTI_JOIN_OPTION = "table.optimizer.multi-join.enabled"
MINI_BATCH_OPTION = "table.exec.mini-batch.enabled"
# Flink closes a mini-batch after this long or this many records; here each micro-batch is one
MINI_BATCH_BOUNDS = ("table.exec.mini-batch.allow-latency", "table.exec.mini-batch.size")
_MULTI_JOIN_HINT = re.compile(r"/\*\+\s*MULTI_JOIN\b", re.I)
_HINT_OPTION = re.compile(r"\s*'([^']*)'\s*=\s*'([^']*)'\s*(,|$)")


def _hints(text: str, name: str, form: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """Each `/*+ NAME('key' = 'value', …) */` hint of `text`: its line and its options, in
    order; `form` is what the hint's text must look like, said where it does not."""
    pattern = re.compile(rf"/\*\+[^*]*?\b{name}\s*\(([^)]*)\)", re.I)
    for hint in pattern.finditer(text):
        line = 1 + text[: hint.start()].count("\n")
        body, at, options = hint[1].strip(), 0, []
        while at < len(body):
            option = _HINT_OPTION.match(body, at)
            if option is None:
                raise SqlError(line, form)
            options.append((option[1], option[2]))
            at = option.end()
        yield line, options


def _named_input(line: int, hint: str, name: str, names: dict[str, int]) -> int:
    """The place in the joins of the table or alias a hint names (`compile_query`)."""
    place = names.get(name.lower())
    if place is None:
        raise SqlError(line, f"{hint} names {name!r}, which is no table or alias the SELECT joins")
    return place


def _input_ttls(text: str, names: dict[str, int]) -> dict[int, tuple[str, int]]:
    """Flink's `/*+ STATE_TTL('table or alias' = 'duration', …) */`: each named input's own
    retention and the hint's line, by the input's place in the joins (`compile_query`)."""
    ttls: dict[int, tuple[str, int]] = {}
    for line, options in _hints(text, "STATE_TTL", "STATE_TTL('table or alias' = 'duration', …)"):
        for name, value in options:
            ttls[_named_input(line, "STATE_TTL", name, names)] = (duration(value, line), line)
    return ttls


def _early_fire(text: str, queries: list[JoinQuery], out: Compiled) -> None:
    """Flink's `/*+ EARLY_FIRE('delay' = …[, 'time_mode' = …]) */` (FLIP-497): each interval
    join of the SELECT pads its unmatched outer rows that long after their time
    (`JOIN_EARLY_FIRE_DELAY`), in the join's own time, as Flink's default `time_mode`."""
    form = "EARLY_FIRE('delay' = 'duration'[, 'time_mode' = 'rowtime' | 'proctime'])"
    for line, options in _hints(text, "EARLY_FIRE", form):
        given = {key.lower(): value for key, value in options}
        if "delay" not in given or given.keys() - {"delay", "time_mode"}:
            raise SqlError(line, form)
        stages = [
            out if number == 0 else out.chain[number - 1]
            for number, query in enumerate(queries)
            if query.type == "interval"
        ]
        if not stages:
            raise SqlError(line, "EARLY_FIRE is an interval join's: the SELECT has none")
        for compiled in stages:
            own = "proctime" if compiled.variables.get("RIGHT_TIME") == "proctime" else "rowtime"
            if given.get("time_mode", own).lower() != own:
                raise SqlError(
                    line,
                    f"EARLY_FIRE 'time_mode' = '{given['time_mode']}' is not supported: the "
                    f"interval join runs on {own} (Flink's default)",
                )
            compiled.set("JOIN_EARLY_FIRE_DELAY", duration(given["delay"], line), line)


# Flink's LOOKUP hint options this service runs, as the variables they set ('retry-predicate'
# and 'retry-strategy' take one value each, and 'output-mode' any: a micro-batch's output keeps
# its input's order, which 'allow_unordered' allows too)
_LOOKUP_HINT = {
    "max-attempts": "LOOKUP_MISS_RETRIES",
    "fixed-delay": "LOOKUP_MISS_RETRY_DELAY",
    "async": "LOOKUP_ASYNC",
    "capacity": "LOOKUP_MAX_CONCURRENT",
}
_LOOKUP_HINT_FIXED = {"retry-predicate": "lookup_miss", "retry-strategy": "fixed_delay"}


def _lookup_hints(
    text: str, names: dict[str, int], queries: list[JoinQuery]
) -> dict[int, list[tuple[str, str, int]]]:
    """Flink's `/*+ LOOKUP('table' = …, 'retry-predicate' = 'lookup_miss', 'retry-strategy' =
    'fixed_delay', 'fixed-delay' = …, 'max-attempts' = …) */`: the variables it sets (name,
    value, line) by the place of its lookup table in the joins."""
    found: dict[int, list[tuple[str, str, int]]] = {}
    form = "LOOKUP('table' = 'name', 'option' = 'value', …)"
    for line, options in _hints(text, "LOOKUP", form):
        given = dict(options)
        if "table" not in given:
            raise SqlError(line, "the LOOKUP hint needs 'table' = the lookup table's name")
        table = given.pop("table")
        place = _named_input(line, "LOOKUP", table, names)
        if place == 0 or queries[place - 1].type != "lookup":
            raise SqlError(line, f"LOOKUP names {table!r}, which is no lookup join's table")
        retry = {"max-attempts", "fixed-delay", *_LOOKUP_HINT_FIXED}
        if retry & given.keys() and not retry <= given.keys():
            raise SqlError(
                line,
                "a lookup retry needs 'retry-predicate' = 'lookup_miss', 'retry-strategy' = "
                "'fixed_delay', 'fixed-delay' and 'max-attempts'",
            )
        variables = []
        for key, value in given.items():
            if key in _LOOKUP_HINT_FIXED:
                if value.lower() != _LOOKUP_HINT_FIXED[key]:
                    raise SqlError(
                        line,
                        f"LOOKUP '{key}' = '{value}' is not supported ({_LOOKUP_HINT_FIXED[key]})",
                    )
            elif key in _LOOKUP_HINT:
                value = duration(value, line) if key == "fixed-delay" else value
                variables.append((_LOOKUP_HINT[key], value, line))
            elif key != "output-mode":
                raise SqlError(
                    line,
                    f"LOOKUP '{key}' is not supported (table, retry-predicate, retry-strategy, "
                    f"fixed-delay, max-attempts, async, capacity, output-mode)",
                )
        found.setdefault(place, []).extend(variables)
    return found


def _time_of(table: Table, join_type: str, side: str) -> str:
    """The time attribute a side is read with for `join_type`."""
    if side == "LEFT" and join_type in ("temporal-proctime", "lookup"):
        return "proctime"
    return table.watermark[0] if table.watermark else "proctime"


def compile_script(text: str) -> Compiled:
    """The variables a Flink SQL script stands for, or `SqlError` naming the line."""
    out, tables, insert = Compiled(), {}, None
    last = 1
    for line, statement in statements(text):
        last = line
        words = statement.split()
        head = words[0].upper()
        if head == "SET":
            _set(line, statement, out)
        elif CREATE_TABLE.match(statement):
            table = create_table(line, statement)
            tables[table.name] = table
        elif CREATE_VIEW.match(statement):
            view = create_view(line, statement, tables)
            tables[view.name] = view
        elif head == "INSERT":
            if insert is not None:
                raise SqlError(line, "a second INSERT: streamjoin runs one INSERT per deployment")
            insert = (line, statement)
        elif head == "SELECT":
            raise SqlError(
                line, "a SELECT alone writes nowhere: INSERT INTO <output table> SELECT …"
            )
        else:
            raise SqlError(
                line,
                f"{' '.join(words[:3])} … is not supported "
                "(SET, CREATE TABLE, CREATE VIEW, INSERT INTO)",
            )
    if insert is None:
        raise SqlError(last, "no INSERT INTO <output table> SELECT … JOIN …")
    line, statement = insert
    try:
        tree = sqlglot.parse_one(readable(line, statement), read=FLINK_LEXICON)
    except ParseError as err:
        first = err.errors[0] if err.errors else {"line": 1, "description": str(err)}
        raise SqlError(line + (first.get("line") or 1) - 1, first["description"]) from None
    if not isinstance(tree, exp.Insert) or not isinstance(tree.this, exp.Table):
        raise SqlError(line, "INSERT INTO <output table> SELECT … (no column list)")
    output = tables.get(tree.this.name)
    if output is None:
        raise SqlError(line, f"no table {tree.this.name} to insert into (CREATE TABLE it first)")
    queries, members, names = compile_query(line, tree.expression, tables, output.columns())
    hint = _MULTI_JOIN_HINT.search(text)  # hints are comments: `statements` drops them
    if hint is not None and out.multi_way is None:
        out.multi_way = f"line {1 + text[: hint.start()].count(chr(10))} (the MULTI_JOIN hint)"
    input_ttls = _input_ttls(text, names)
    lookup_hints = _lookup_hints(text, names, queries)
    first, (left, right) = queries[0], members[:2]
    input_table(left, "LEFT", out, first.left_time or _time_of(left, first.type, "LEFT"))
    if first.type == "lookup":
        jdbc_table(right, out)
    elif right.options.get("connector") == "jdbc":
        raise SqlError(
            line,
            f"{right.name} is a jdbc table: join it FOR SYSTEM_TIME AS OF a "
            "PROCTIME() column of the left (a lookup join)",
        )
    else:
        input_table(right, "RIGHT", out, _time_of(right, first.type, "RIGHT"))
    for query, table in zip(queries[1:], members[2:], strict=True):
        out.chain.append(_chained(line, query, table, out))
    for place, (ttl, hint_line) in input_ttls.items():
        compiled = out if place < 2 else out.chain[place - 2]
        compiled.set(f"{'LEFT' if place == 0 else 'RIGHT'}_STATE_TTL", ttl, hint_line)
    _early_fire(text, queries, out)
    for place, variables in lookup_hints.items():
        compiled = out if place < 2 else out.chain[place - 2]
        for name, value, hint_line in variables:
            compiled.set(name, value, hint_line)
    starting_offsets(out)
    output_table(output, out)
    if all(query.type != "regular" for query in queries):
        # Flink's TTL for every operator; the others' is their time
        out.variables.pop("STATE_TTL", None)
        out.lines.pop("STATE_TTL", None)
    for name, value in (
        ("JOIN_TYPE", first.type),
        ("JOIN_KIND", first.kind),
        ("JOIN_ON", first.on),
        ("JOIN_SELECT", queries[-1].select),
    ):
        out.set(name, value, line)
    if queries[-1].where:
        out.set("JOIN_WHERE", queries[-1].where, line)
    if first.window is not None:
        out.set("JOIN_WINDOW", first.window, line)
    for side, grouped in zip(("LEFT", "RIGHT"), first.groups, strict=True):
        if grouped is not None:
            out.set(f"{side}_WINDOW_GROUP_BY", grouped, line)
    return out


def _chained(line: int, query: JoinQuery, table: Table, out: Compiled) -> Compiled:
    """A join after the first: its table's variables as a join's right input, its own join
    variables; what its table sets for the whole job (Kafka properties, the registry, its start)
    set in `out`, where it must agree with the other tables."""
    own = Compiled()
    if query.type == "lookup":
        jdbc_table(table, own)
    else:
        input_table(table, "RIGHT", own, _time_of(table, query.type, "RIGHT"))
    for name in [n for n in own.variables if not n.startswith(("RIGHT_", "LOOKUP_"))]:
        out.set(name, own.variables.pop(name), own.lines.pop(name))
    out.starts |= own.starts
    for name, value in (
        ("JOIN_TYPE", query.type),
        ("JOIN_KIND", query.kind),
        ("JOIN_ON", query.on),
    ):
        own.set(name, value, line)
    if query.left_time is not None:  # the result's column a time join takes as its left time
        own.set("LEFT_TIME", query.left_time, line)
    for name in ("LEFT_FORMAT", "LEFT_SCHEMA"):  # the result so far's: told at this join
        own.lines.setdefault(name, line)
    return own
