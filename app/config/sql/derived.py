"""A derived table in FROM, `(SELECT … FROM t [AS x] [WHERE p]) AS a`, as the table it reads.

Flink plans such a subquery as a projection and a filter of `t` below the join. Here the query
is rewritten to join `t AS a` itself: each column of `a` the outer query names becomes the
expression the subquery computes it by (`a.total` → `a.price * a.qty`), and the filter `p`
becomes a condition where it keeps the same rows:

- `a` an INNER join's input: its join's `ON` (an inner join's condition on one input is a
  filter of that input);
- `a` the padded side of an outer join (`x LEFT JOIN a`): its join's `ON` (a row of `a` that
  fails it joins nothing, as one filtered out);
- `a` the kept side of an outer join (`a LEFT JOIN y`), which no later join pads: the `WHERE`
  (the joined rows of `a`'s failing rows are dropped after the join, the others are as they
  were);
- `a` a FULL join's input, which no later join pads: both, its join's `ON` (no row of the
  other input meets a failing row of `a`, and is padded as Flink pads it) and the `WHERE`
  `m IS NULL OR p` (a failing row of `a`, padded, is dropped; `m`, NULL exactly on the rows
  where `a` is padded, is its table's primary key or a column declared NOT NULL: without one,
  refused);
- `a` a kept side that a later RIGHT or FULL join pads: refused (no condition of the joined
  rows keeps the same rows).

In Flink a column the subquery computes is NULL on a row an outer join pads; computed over the
padded row's NULLs, a column that is not NULL wherever its own columns are (a CASE, COALESCE,
IS NULL, a literal) would not be. Such a column is computed as `CASE WHEN m IS NULL THEN NULL
ELSE … END`, `m` being NULL exactly on the padded rows: the table's primary key or a column
declared NOT NULL (Flink's planner holds it never NULL too), or a side of an
equality in its own join's ON where that join does not keep its unmatched rows (an equality
holds on no NULL). Without one it is refused.

A subquery of a subquery is inlined first. What else a derived table may say in Flink (joins,
GROUP BY, DISTINCT, a subquery in its WHERE, column aliases after its name) is refused.
"""

from __future__ import annotations

from sqlglot import exp

from app.config.sql.ddl import SqlError, Table
from state.expr.condition import FLINK_LEXICON
from state.expr.functions import COMPARISONS, FUNCTIONS, OPERATORS

# clauses a derived table may have: its columns, its one table, its WHERE
_PLAIN = {"expressions", "from_", "from", "where"}


def _requalified(
    line: int, node: exp.Expression, inner: set[str], alias: str, said: str
) -> exp.Expression:
    """`node`, an expression over the subquery's table (by `inner` names, or unqualified), as
    one over the outer query's `alias` for it."""

    def requalify(n: exp.Expression) -> exp.Expression:
        if not isinstance(n, exp.Column) or isinstance(n.this, exp.Star):
            return n
        if n.table and n.table.lower() not in inner:
            raise SqlError(line, f"{said}: {n.sql()} is not a column of its table")
        return exp.column(n.this.copy(), table=exp.to_identifier(alias))

    return node.copy().transform(requalify)


def _derived(
    line: int, node: exp.Subquery, tables: dict[str, Table], said: str
) -> tuple[exp.Table, dict[str, exp.Expression], exp.Expression | None]:
    """The table a derived table reads, as the outer query's alias for it; each of its columns
    by name as an expression over that alias; its filter over that alias, if any. `said`: how
    errors name it."""
    alias_node = node.args.get("alias")
    if alias_node is None or alias_node.args.get("columns"):
        raise SqlError(line, f"{said}: a derived table is supported with an alias (… ) AS a")
    alias = alias_node.name
    select = inlined(line, node.this, tables)
    assert isinstance(select, exp.Select)
    extra = [k.upper() for k, v in select.args.items() if v and k not in _PLAIN]
    source = select.args.get("from_") or select.args.get("from")
    where = select.args.get("where")
    if (
        extra
        or source is None
        or not isinstance(source.this, exp.Table)
        or source.this.args.get("db")
        or source.this.name not in tables
        or (where is not None and where.find(exp.Select))
    ):
        raise SqlError(
            line,
            f"{said} is not supported: a derived table is SELECT <columns> FROM <table> "
            "[WHERE <condition>]",
        )
    table = tables[source.this.name]
    inner = {source.this.name.lower(), source.this.alias_or_name.lower()}
    columns: dict[str, exp.Expression] = {}
    for item in select.expressions:
        value = item.this if isinstance(item, exp.Alias) else item
        if isinstance(value, exp.Star) or (
            isinstance(value, exp.Column) and isinstance(value.this, exp.Star)
        ):
            for name in table.columns():
                columns[name] = exp.column(name, table=exp.to_identifier(alias))
            continue
        columns[item.alias_or_name] = _requalified(line, value, inner, alias, said)
    condition = _requalified(line, where.this, inner, alias, said) if where is not None else None
    read = exp.Table(
        this=exp.to_identifier(table.name), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
    return read, columns, condition


def _placed(place: int, kinds: list[str]) -> int | None:
    """Where the filter of the input at `place` (0: FROM, n: the n-th join's table) goes: the
    number of the join whose ON takes it (an inner join's input, an outer join's padded one, a
    FULL join's input), or None for the WHERE alone (the module's list)."""
    if kinds and kinds[max(place, 1) - 1] == "full":
        return max(place, 1)
    return max(place, 1) if kinds and not _kept(place, kinds) else None


def inlined(line: int, query: exp.Expression, tables: dict[str, Table]) -> exp.Expression:
    """`query` with each derived table in its FROM clause replaced by the table it reads."""
    if not isinstance(query, exp.Select):
        return query
    source = query.args.get("from_") or query.args.get("from")
    joins = query.args.get("joins") or []
    places = [source, *joins] if source is not None else []
    kinds = [(join.side or "inner").lower() for join in joins]
    columns: dict[str, dict[str, exp.Expression]] = {}  # by alias, lower case
    markers: dict[str, exp.Expression] = {}  # by alias: NULL exactly on its padded rows
    filters: list[tuple[int, exp.Expression, str]] = []
    for number, place in enumerate(places):
        node = place.this
        if not (isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select)):
            continue
        said = node.sql(FLINK_LEXICON)[:120]
        read, named, condition = _derived(line, node, tables, said)
        place.set("this", read)
        columns[read.alias.lower()] = named
        table = tables[read.name]
        # a primary key, a column declared NOT NULL, is never NULL: NULL exactly on a padded row
        never_null = [*table.primary_key, *(c for c in table.declared if c in table.not_null)]
        if never_null:
            markers[read.alias.lower()] = exp.column(never_null[0], table=read.alias)
        if condition is not None:
            filters.append((number, condition, said))
    if not columns:
        return query
    others = {  # the columns of the tables joined as they are
        name
        for place in places
        if place.this.alias_or_name.lower() not in columns and place.this.name in tables
        for name in tables[place.this.name].columns()
    }

    aliases = [place.this.alias_or_name.lower() for place in places]
    padded = {a for n, a in enumerate(aliases) if a in columns and _paddable(n, kinds)}

    def substitute(node: exp.Expression, present: set[str]) -> exp.Expression:
        """`node` with the derived tables' columns as what computes them; `present`: the
        aliases whose rows are there (in their own join's ON)."""

        def one(column: exp.Expression) -> exp.Expression:
            if not isinstance(column, exp.Column) or isinstance(column.this, exp.Star):
                return column
            if not column.table and column.find_ancestor(exp.Select) is not None:
                return column  # a subquery's own (`IN (SELECT k FROM t)`)
            owners = [a for a, named in columns.items() if column.name in named]
            alias = column.table.lower() or (owners[0] if len(owners) == 1 else "")
            if alias not in columns or (not column.table and column.name in others):
                return column
            if column.name not in columns[alias]:
                raise SqlError(line, f"{column.sql()}: {alias} has no such column")
            value = columns[alias][column.name].copy()
            if alias in present or alias not in padded or _null_when_absent(value):
                return value
            if alias not in markers:
                raise SqlError(
                    line,
                    f"{column.sql()}: a derived table's column computed as "
                    f"{value.sql(FLINK_LEXICON)} is not NULL on the rows an outer join pads, "
                    "as in Flink: supported where its table has a PRIMARY KEY or a NOT NULL "
                    "column, or its own join's ON equates a column of it",
                )
            absent = exp.Is(this=markers[alias].copy(), expression=exp.Null())
            return exp.Case(ifs=[exp.If(this=absent, true=exp.Null())], default=value)

        return node.transform(one)

    everywhere = set(aliases)
    for number, join in enumerate(joins, start=1):
        own = {aliases[number]} | ({aliases[0]} if number == 1 else set())
        if join.args.get("on") is not None:
            join.set("on", substitute(join.args["on"], own))
            for alias in own & padded:
                kept = _kept(0 if alias == aliases[0] and number == 1 else number, kinds)
                marker = None if kept else _marker(join.args["on"], alias)
                if marker is not None and alias not in markers:
                    markers[alias] = marker
        version = join.this.args.get("version")
        if version is not None:  # a time attribute: a column as it is
            version.set("expression", substitute(version.args["expression"], everywhere))
    expressions: list[exp.Expression] = []
    for item in query.expressions:
        if isinstance(item, exp.Star):
            for place in places:
                expressions += _star(place.this.alias_or_name, columns)
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            expressions += _star(item.table, columns)
        else:  # under the name it had: `a.total` stays `total`
            value = item.this if isinstance(item, exp.Alias) else item
            named = isinstance(item, exp.Alias) or isinstance(value, exp.Column)
            expressions.append(exp.alias_(value, item.alias_or_name) if named else value)
    query.set("expressions", [substitute(item, set()) for item in expressions])
    where = query.args.get("where")
    if where is not None:
        where.set("this", substitute(where.this, set()))
    for place, condition, said in filters:
        number = _placed(place, kinds)
        if number is not None and joins[number - 1].args.get("on") is not None:
            join = joins[number - 1]
            join.set("on", exp.and_(join.args["on"], condition.copy()))
            if kinds[number - 1] != "full":
                continue
            if _paddable(0, kinds[number:]):
                raise SqlError(
                    line,
                    f"{said}: a derived table's WHERE on a FULL join's input that a later RIGHT "
                    "or FULL join pads",
                )
            condition = _unless_padded(line, aliases[place], markers, condition, said)
        elif _paddable(place, kinds):  # after the joins is too late: padded rows fail it
            kept = "an outer join's kept" if _kept(place, kinds) else "an inner join's"
            raise SqlError(
                line,
                f"{said}: a derived table's WHERE on {kept} input that a later RIGHT or FULL "
                "join pads",
            )
        if where is not None:
            where.set("this", exp.and_(where.this, condition))
        else:
            where = exp.Where(this=condition)
            query.set("where", where)
    return query


def _unless_padded(
    line: int, alias: str, markers: dict[str, exp.Expression], condition: exp.Expression, said: str
) -> exp.Expression:
    """A FULL join's input's filter over the joined rows: a row where that input is padded
    passes it, as no row of the input it reads."""
    if alias not in markers:
        raise SqlError(
            line,
            f"{said}: a derived table's WHERE on a FULL join's input: supported where its table "
            "has a PRIMARY KEY or a NOT NULL column (NULL only on the rows the join pads)",
        )
    absent = exp.Is(this=markers[alias].copy(), expression=exp.Null())
    return exp.or_(absent, exp.paren(condition, copy=False))


def _star(alias: str, columns: dict[str, dict[str, exp.Expression]]) -> list[exp.Expression]:
    """`alias.*`: a derived table's columns by their names, a table's as it is."""
    if alias.lower() not in columns:
        return [exp.Column(this=exp.Star(), table=exp.to_identifier(alias))]
    return [exp.alias_(exp.column(name, table=alias), name) for name in columns[alias.lower()]]


def _paddable(place: int, kinds: list[str]) -> bool:
    """Whether an outer join may pad the input at `place` (0: FROM, n: the n-th join's table)
    with NULLs: its own join, or any later RIGHT or FULL join (which pads all before it)."""
    if place == 0:
        return any(kind in ("right", "full") for kind in kinds)
    return kinds[place - 1] in ("left", "full") or _paddable(0, kinds[place:])


def _kept(place: int, kinds: list[str]) -> bool:
    """Whether its own join keeps every row of the input at `place` (an outer join's kept
    side): a row of it may then be there with any column NULL."""
    if place == 0:
        return bool(kinds) and kinds[0] in ("left", "full")
    return kinds[place - 1] in ("right", "full")


# NULL where any operand is NULL: what a padded row's columns make NULL
_STRICT = (*OPERATORS, *COMPARISONS, exp.Neg, exp.Not, exp.Cast, exp.Paren, exp.Extract)


def _null_when_absent(node: exp.Expression) -> bool:
    """Whether `node` is NULL when every column it names is (on a padded row)."""
    if isinstance(node, exp.Column | exp.Null):
        return True
    if isinstance(node, exp.Like | exp.Between | exp.In):
        return _null_when_absent(node.this)
    return _strict(node) and any(_null_when_absent(n) for n in node.iter_expressions())


def null_wherever_a_column_is(node: exp.Expression) -> bool:
    """Whether `node` is NULL wherever any column it names is: strict all the way down (a
    type or a unit names none)."""
    if isinstance(node, exp.Column | exp.Literal | exp.Null | exp.DataType | exp.Var):
        return True
    return _strict(node) and all(null_wherever_a_column_is(n) for n in node.iter_expressions())


def _strict(node: exp.Expression) -> bool:
    """Whether `node` is NULL where any operand is (an operator, a comparison, a strict
    function of the library)."""
    function = FUNCTIONS.get(type(node))
    return isinstance(node, _STRICT) or (function is not None and function.strict)


def _marker(on: exp.Expression, alias: str) -> exp.Expression | None:
    """A side of an equality of `on` over `alias`'s columns alone that is NULL on its padded
    rows: an equality holds on no NULL, so it is not NULL on a row that joined."""
    node = on.unnest()
    parts = list(node.flatten()) if isinstance(node, exp.And) else [node]
    for part in parts:
        part = part.unnest()
        if not isinstance(part, exp.EQ):
            continue
        for side, other in ((part.this, part.expression), (part.expression, part.this)):
            named = {c.table.lower() for c in side.find_all(exp.Column)}
            others = {c.table.lower() for c in other.find_all(exp.Column)}
            if named == {alias} and alias not in others and _null_when_absent(side):
                return side
    return None
