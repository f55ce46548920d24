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

What Flink accepts and streamjoin does not run (GROUP BY, window functions, a third table, an
option it does not know, a secret in the text) is refused, naming the construct and its line.
Secrets stay variables (a ConfigMap holds this text): `'password'`, `'properties.sasl.jaas.config'`
and the like are refused with the variable to use instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from app.sql.ddl import (
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


class _Sides:
    """Resolves a query's names to `L` / `R`."""

    def __init__(self, line: int, left: Table, right: Table, left_names: set[str],
                 right_names: set[str], prefer: str | None = None) -> None:  # fmt: skip
        """`prefer`: the side an unqualified name both tables have is (a subquery's own)."""
        self.line, self.tables, self.prefer = line, {"L": left, "R": right}, prefer
        self.visible = "LR"  # the tables the query's own names may be of
        self.names = {**{n.lower(): "R" for n in right_names},
                      **{n.lower(): "L" for n in left_names}}  # fmt: skip

    def inner(self) -> _Sides:
        """The same names, read inside a subquery over the right table."""
        sides = _Sides(self.line, self.tables["L"], self.tables["R"], set(), set(), prefer="R")
        sides.names = self.names
        return sides

    def side_of(self, column: exp.Column) -> str:
        qualifier = column.table.lower()
        if qualifier:
            if qualifier not in self.names:
                raise SqlError(self.line, f"{column.sql()}: no table or alias {column.table}")
            side = self.names[qualifier]
            if column.name not in [*self.tables[side].columns(), self.tables[side].proctime]:
                raise SqlError(self.line, f"{column.sql()}: {self.tables[side].name} has no "
                               f"column {column.name}")  # fmt: skip
            return side
        found = [s for s in self.visible if column.name in self.tables[s].columns()]
        if len(found) == 2 and self.prefer:
            return self.prefer
        if len(found) != 1:
            why = "is in both tables: qualify it" if found else "is in neither table"
            raise SqlError(self.line, f"column {column.name} {why}")
        return found[0]

    def rewrite(self, node: exp.Expression) -> exp.Expression:
        """Columns as `L.x` / `R.y` (a computed column as the column it converts)."""

        def one(part: exp.Expression) -> exp.Expression:
            if isinstance(part, exp.Column) and not isinstance(part.this, exp.Star):
                side = self.side_of(part)
                table = self.tables[side]
                if part.name == table.proctime:
                    raise SqlError(self.line, f"{part.sql()}: the processing-time column is "
                                   "only for FOR SYSTEM_TIME AS OF")  # fmt: skip
                return _column_of(side, table.stored(part.name))
            return part

        return node.copy().transform(one)


def _identifier(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def _column_of(side: str, name: str) -> exp.Column:
    return exp.column(name, table=side, quoted=_identifier(name) != name)


def _refuse_clauses(line: int, select: exp.Select) -> None:
    for key, what in (("group", "GROUP BY"), ("having", "HAVING"), ("order", "ORDER BY"),
                      ("limit", "LIMIT"), ("distinct", "DISTINCT"), ("with", "WITH"),
                      ("windows", "WINDOW"), ("qualify", "QUALIFY")):  # fmt: skip
        if select.args.get(key):
            raise SqlError(line, f"{what} is not supported: streamjoin runs one join")
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
        raise SqlError(line, f"{node.sql()} is not supported: only a table is joined (no "
                       "subquery, table function or window)")  # fmt: skip
    if node.name not in tables:
        raise SqlError(line, f"no table {node.name} (CREATE TABLE it first)")
    return tables[node.name], node.alias or node.name


def compile_query(line: int, query: exp.Expression, tables: dict[str, Table],
                  outputs: list[str] | None) -> tuple[JoinQuery, Table, Table]:  # fmt: skip
    """The join a SELECT is; `outputs`: the output table's columns (the select list's names)."""
    if not isinstance(query, exp.Select):
        raise SqlError(line, f"{query.key.upper()} is not supported: one SELECT … JOIN")
    _refuse_clauses(line, query)
    source = query.args.get("from_") or query.args.get("from")
    if source is None:
        raise SqlError(line, "a SELECT without FROM")
    left, left_alias = _table_of(line, source.this, tables)
    joins = query.args.get("joins") or []
    where = _conjuncts(query.args.get("where").this if query.args.get("where") else None)
    if len(joins) > 1:
        raise SqlError(line, f"{len(joins) + 1} tables joined: streamjoin joins two")
    if not joins:
        return _subquery_join(line, query, tables, left, left_alias, where, outputs)
    join = joins[0]
    function_time = None
    if isinstance(join.this, exp.Lateral):
        right, right_alias, function_time = _temporal_function(line, join.this, tables)
    else:
        right, right_alias = _table_of(line, join.this, tables)
    sides = _Sides(line, left, right, {left_alias, left.name}, {right_alias, right.name})
    kind = (join.side or "inner").lower()
    if join.kind and join.kind.upper() in ("SEMI", "ANTI", "NATURAL"):
        raise SqlError(line, f"{join.kind.upper()} JOIN is not supported")
    on = _conjuncts(join.args.get("on"))
    if join.args.get("using"):
        raise SqlError(line, "JOIN … USING is not supported: write ON")
    if where and kind != "inner":
        raise SqlError(line, f"a WHERE after a {kind.upper()} JOIN is not supported: put the "
                       "condition in ON")  # fmt: skip
    on += where
    if not on:
        raise SqlError(line, "a join without a condition (a cross join) is not supported")
    version = join.this.args.get("version")
    join_type, left_time = "regular", None
    if function_time is not None:
        join_type, left_time = "temporal-function", _function_time(line, sides, function_time,
                                                                   kind)  # fmt: skip
    elif version is not None:
        join_type = _temporal_type(line, sides, version, right, kind)
    elif _bounds_time(sides, on, left, right):
        join_type = "interval"
    condition = _and([sides.rewrite(part) for part in on])
    assert condition is not None
    select = _select_list(line, query, sides, outputs)
    return JoinQuery(join_type, kind, left.name, right.name, condition.sql(FLINK_LEXICON),
                     select, left_time), left, right  # fmt: skip


def _temporal_function(line: int, lateral: exp.Lateral, tables: dict[str, Table]
                       ) -> tuple[Table, str, exp.Expression]:  # fmt: skip
    """`LATERAL TABLE (Rates(o.t))`: the table the temporal table function is over, its alias,
    and the time it is called with. Flink defines the function in the Table API
    (`createTemporalTableFunction(time, key)` over a history table); here its name is that
    table's, whose WATERMARK and PRIMARY KEY are the function's time and key."""
    call = lateral.this
    inner = call.expressions[0] if isinstance(call, exp.Anonymous) and call.expressions else None
    if (not isinstance(call, exp.Anonymous) or call.name.upper() != "TABLE"
            or len(call.expressions) != 1 or not isinstance(inner, exp.Anonymous)):  # fmt: skip
        raise SqlError(line, f"{lateral.sql(FLINK_LEXICON)} is not supported: LATERAL TABLE "
                       "joins a temporal table function (Rates(o.rowtime))")  # fmt: skip
    name = inner.name
    table = tables.get(name) or next(
        (t for n, t in tables.items() if n.lower() == name.lower()), None
    )
    if table is None:
        raise SqlError(line, f"LATERAL TABLE ({name}(…)): no table {name}: declare the history "
                       f"it is over as CREATE TABLE {name} (…, PRIMARY KEY (…) NOT ENFORCED, "
                       "WATERMARK FOR …): the function is named as its table")  # fmt: skip
    if not table.primary_key:
        raise SqlError(line, f"LATERAL TABLE ({name}(…)): {table.name} needs a PRIMARY KEY "
                       "(… NOT ENFORCED): the temporal table function's key")  # fmt: skip
    if len(inner.expressions) != 1 or not isinstance(inner.expressions[0], exp.Column):
        raise SqlError(line, f"LATERAL TABLE ({name}(…)) takes one time column of the left "
                       "table")  # fmt: skip
    alias = lateral.alias or name
    return table, alias, inner.expressions[0]


def _function_time(line: int, sides: _Sides, at: exp.Expression, kind: str) -> str:
    """The left's time attribute a temporal table function is called with: its rowtime (the
    WATERMARK column), or a PROCTIME() column."""
    if kind != "inner":
        raise SqlError(line, f"a {kind.upper()} join of a temporal table function is not "
                       "supported: join it INNER (FROM o, LATERAL TABLE (…) WHERE …)")  # fmt: skip
    assert isinstance(at, exp.Column)
    left = sides.tables["L"]
    if sides.side_of(at) != "L":
        raise SqlError(line, f"LATERAL TABLE (…({at.sql()})): a time column of the left table")
    if at.name == left.proctime:
        return "proctime"
    if left.watermark is None or left.watermark[0] != at.name:
        raise SqlError(line, f"LATERAL TABLE (…({at.sql()})): the left's rowtime (its WATERMARK "
                       "column) or a PROCTIME() column")  # fmt: skip
    return left.stored(at.name)


def _temporal_type(line: int, sides: _Sides, version: exp.Expression, right: Table,
                   kind: str) -> str:  # fmt: skip
    at = version.args.get("expression")
    if kind not in ("inner", "left"):
        raise SqlError(line, f"a {kind.upper()} temporal join is not supported (INNER, LEFT), "
                       "as in Flink")  # fmt: skip
    if not isinstance(at, exp.Column) or sides.side_of(at) != "L":
        raise SqlError(line, "FOR SYSTEM_TIME AS OF must name a time column of the left table")
    left = sides.tables["L"]
    if at.name == left.proctime:
        return "lookup" if right.options.get("connector") == "jdbc" else "temporal-proctime"
    if left.watermark is None or left.watermark[0] != at.name:
        raise SqlError(line, f"FOR SYSTEM_TIME AS OF {at.sql()}: the left's rowtime (its "
                       "WATERMARK column) or a PROCTIME() column")  # fmt: skip
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
        star = item if isinstance(item, exp.Star) else item.this if isinstance(item, exp.Column) \
            and isinstance(item.this, exp.Star) else None  # fmt: skip
        if star is not None:
            qualifier = item.table.lower() if isinstance(item, exp.Column) else ""
            chosen = [sides.names[qualifier]] if qualifier else list(sides.visible)
            for side in chosen:
                for name in sides.tables[side].columns():
                    items.append((name, _column_of(side, sides.tables[side].stored(name))))
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        refused = unsupported(inner)
        if refused is not None:
            raise SqlError(line, f"{describe(refused)} is not supported in the select list")
        name = item.alias_or_name if isinstance(item, exp.Alias | exp.Column) else ""
        items.append((name, sides.rewrite(inner)))
    if outputs is not None:
        if len(outputs) != len(items):
            raise SqlError(line, f"the SELECT gives {len(items)} columns, the output table has "
                           f"{len(outputs)}")  # fmt: skip
        items = [(name, expression) for name, (_, expression) in zip(outputs, items, strict=True)]
    return ", ".join(
        expression.sql(FLINK_LEXICON) + (f" AS {_identifier(name)}" if name else "")
        for name, expression in items
    )


def _subquery_join(line: int, query: exp.Select, tables: dict[str, Table], left: Table,
                   left_alias: str, where: list[exp.Expression],
                   outputs: list[str] | None) -> tuple[JoinQuery, Table, Table]:  # fmt: skip
    """`WHERE x IN (SELECT …)` / `EXISTS (…)`: a semi join; negated, an anti join."""
    found = [p for p in where if isinstance(p.unnest(), exp.In | exp.Exists | exp.Not)
             and p.find(exp.Subquery, exp.Exists)]  # fmt: skip
    if len(found) != 1:
        raise SqlError(line, "a SELECT from one table: a join, IN (SELECT …) or EXISTS (…) "
                       "is needed")  # fmt: skip
    part = found[0].unnest()
    negated = isinstance(part, exp.Not)
    part = part.this.unnest() if negated else part
    rest = [p for p in where if p is not found[0]]
    if negated and rest:
        raise SqlError(line, "NOT IN / NOT EXISTS beside other conditions in WHERE is not "
                       "supported")  # fmt: skip
    inner = part.this if isinstance(part, exp.Exists) else part.args.get("query")
    inner = inner.this if isinstance(inner, exp.Subquery) else inner
    if not isinstance(inner, exp.Select) or inner.args.get("joins"):
        raise SqlError(line, "the subquery must be a SELECT from one table")
    _refuse_clauses(line, inner)
    inner_from = inner.args.get("from_") or inner.args.get("from")
    right, right_alias = _table_of(line, inner_from.this, tables)
    sides = _Sides(line, left, right, {left_alias, left.name}, {right_alias, right.name})
    within = sides.inner()
    sides.visible = "L"  # the subquery's table is not the outer query's
    on = [within.rewrite(p) for p in
          _conjuncts(inner.args["where"].this if inner.args.get("where") else None)]  # fmt: skip
    if isinstance(part, exp.In):
        if len(inner.expressions) != 1 or not isinstance(part.this, exp.Column):
            raise SqlError(line, "IN (SELECT …) compares one column with one column")
        [selected] = inner.expressions
        outer, chosen = sides.rewrite(part.this), within.rewrite(selected)
        equal: exp.Expression = exp.EQ(this=outer, expression=chosen)
        pairs = ((part.this, sides.side_of(part.this)), (selected, within.side_of(selected)))
        nullable = [c for c, side in pairs if c.name not in sides.tables[side].not_null]
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
    select = _select_list(line, query, sides, outputs)
    kind = "anti" if negated else "semi"
    return JoinQuery("regular", kind, left.name, right.name, condition.sql(FLINK_LEXICON),
                     select), left, right  # fmt: skip


# --- the script ----------------------------------------------------------------------------

_SET = re.compile(r"^SET\s+('(?:[^']|'')*'|[\w.-]+)\s*=\s*('(?:[^']|'')*'|\S+)$", re.I | re.S)


_PARALLELISM = {"parallelism.default": "STATE_PARTITIONS",
                "pipeline.max-parallelism": "JOIN_STATE_BUCKETS"}  # fmt: skip


def _set(line: int, statement: str, out: Compiled) -> None:
    match = _SET.match(statement)
    if match is None:
        raise SqlError(line, "SET is written SET 'key' = 'value'")
    key, value = (sql_string(v) if v.startswith("'") else v for v in (match[1], match[2]))
    if key == "table.exec.state.ttl":
        out.set("STATE_TTL", duration(value), line)
    elif key in _PARALLELISM:  # a key group is a bucket, a subtask a state partition
        out.set(_PARALLELISM[key], value, line)
    elif key == "table.local-time-zone":
        if value.upper() not in ("UTC", "Z", "GMT", "+00:00"):
            raise SqlError(line, f"'table.local-time-zone' {value!r}: streamjoin's session is UTC")
    else:
        raise SqlError(line, f"SET '{key}' is not supported (table.exec.state.ttl, "
                       f"table.local-time-zone, {', '.join(_PARALLELISM)})")  # fmt: skip


_WINDOW_TVF = re.compile(r"\bTABLE\s*\(\s*(TUMBLE|HOP|CUMULATE|SESSION)\s*\(", re.I)


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
        elif head == "INSERT":
            if insert is not None:
                raise SqlError(line, "a second INSERT: streamjoin runs one join per deployment")
            insert = (line, statement)
        elif head == "SELECT":
            raise SqlError(line, "a SELECT alone writes nowhere: INSERT INTO <output table> "
                           "SELECT …")  # fmt: skip
        else:
            raise SqlError(line, f"{' '.join(words[:3])} … is not supported (SET, CREATE "
                           "TABLE, INSERT INTO)")  # fmt: skip
    if insert is None:
        raise SqlError(last, "no INSERT INTO <output table> SELECT … JOIN …")
    line, statement = insert
    window = _WINDOW_TVF.search(statement)
    if window is not None:
        raise SqlError(line + statement[: window.start()].count("\n"),
                       f"the window function {window[1].upper()} is not supported")  # fmt: skip
    try:
        tree = sqlglot.parse_one(statement, read=FLINK_LEXICON)
    except ParseError as err:
        first = err.errors[0] if err.errors else {"line": 1, "description": str(err)}
        raise SqlError(line + (first.get("line") or 1) - 1, first["description"]) from None
    if not isinstance(tree, exp.Insert) or not isinstance(tree.this, exp.Table):
        raise SqlError(line, "INSERT INTO <output table> SELECT … (no column list)")
    output = tables.get(tree.this.name)
    if output is None:
        raise SqlError(line, f"no table {tree.this.name} to insert into (CREATE TABLE it first)")
    query, left, right = compile_query(line, tree.expression, tables, output.columns())
    input_table(left, "LEFT", out, query.left_time or _time_of(left, query.type, "LEFT"))
    if query.type == "lookup":
        jdbc_table(right, out)
    elif right.options.get("connector") == "jdbc":
        raise SqlError(line, f"{right.name} is a jdbc table: join it FOR SYSTEM_TIME AS OF a "
                       "PROCTIME() column of the left (a lookup join)")  # fmt: skip
    else:
        input_table(right, "RIGHT", out, _time_of(right, query.type, "RIGHT"))
    starting_offsets(out)
    output_table(output, out)
    if query.type != "regular":  # Flink's TTL for every operator; the others' is their time
        out.variables.pop("STATE_TTL", None)
        out.lines.pop("STATE_TTL", None)
    for name, value in (("JOIN_TYPE", query.type), ("JOIN_KIND", query.kind),
                        ("JOIN_ON", query.on), ("JOIN_SELECT", query.select)):  # fmt: skip
        out.set(name, value, line)
    return out
