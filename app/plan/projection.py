"""`JOIN_SELECT`: a Flink-style select list over `L` and `R`, applied to the joined changelog.

The joined rows carry every column as `L_<col>` / `R_<col>`; the list is parsed with sqlglot,
every node of it checked against the function library shared with `JOIN_ON`
(`state.expr.functions`: columns, literals, operators and Flink's scalar built-ins, nothing else, so
no configuration value reaches Spark's SQL parser unchecked), its `L.x` / `R.y` references
rewritten to those columns, and handed to Spark as expressions. Output names follow Flink's:
an alias, else the column's name, else `EXPR$<position>`; a name taken already gets the first
free suffix `0`, `1`, ... (`L.c, R.c` gives `c`, `c0`). The change kind `op` is kept in front.

Spark computes them as Flink does where the session's non-ANSI arithmetic and the rewrites of
`app.plan.flink_arithmetic` make it: integer division, overflow, casts between numbers.

A CAST that cannot convert a row's value (`CAST('abc' AS INT)`) fails Flink's job: for a
service, a crash loop on one bad value. Here it is NULL (Spark's CAST outside ANSI mode), and a
row on which one failed (its value not NULL, its cast NULL, where the CASE, IF or COALESCE
around it evaluates it) is marked with the failure (`CAST_ERROR`) and carries its joined row
(`FAILED_ROW`), which the output sends to the dead-letter topic instead of the row. TRY_CAST
stays NULL.
"""

from __future__ import annotations

import sqlglot
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from sqlglot import exp
from sqlglot.errors import ParseError

from app.plan.flink_arithmetic import Types, as_flink_computes, type_of
from serdes.records.encode import CAST_ERROR, FAILED_ROW, json_text
from state.expr.condition import ALIASES, FLINK_LEXICON, ConditionError
from state.expr.functions import TEXT_TYPES, describe, unsupported


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


def _failing_casts(tree: exp.Expression, types: Types) -> list[exp.Cast]:
    """The CASTs of `tree` that can fail on a row: of a column's or an expression's text (or
    of what `types` do not say) to another type, not TRY_CAST (sqlglot parses it as a CAST
    marked `safe`). A number's CAST narrows, or is NULL beyond a DECIMAL's precision, a time's
    to DATE is its day, as in Flink; a literal's (`TIMESTAMP '2024-01-31 00:00:00'`) is the
    same on every row."""
    return [
        c
        for c in tree.find_all(exp.Cast)
        if not c.args.get("safe")
        and c.args["to"].this.name not in TEXT_TYPES
        and not isinstance(c.this, exp.Literal | exp.Null)
        and type_of(c.this.transform(_qualified_to_flat), types) in (None, "STRING")
    ]


def _holds(condition: exp.Expression) -> exp.Expression:
    return exp.Coalesce(this=condition.copy(), expressions=[exp.false()])


def _evaluated_when(node: exp.Expression) -> list[exp.Expression]:
    """The conditions under which Spark evaluates `node`: the branches of the CASE, IF and
    COALESCE around it that lead to it."""
    conditions: list[exp.Expression] = []
    child = node
    while (parent := child.parent) is not None:
        key = child.arg_key
        if isinstance(parent, exp.If) and key in ("true", "false"):
            case = parent.parent if isinstance(parent.parent, exp.Case) else None
            test = parent.this
            if case is not None and case.this is not None:  # CASE x WHEN v: x = v
                test = exp.EQ(this=case.this.copy(), expression=test.copy())
            conditions.append(_holds(test) if key == "true" else exp.Not(this=_holds(test)))
        elif isinstance(parent, exp.Case) and key in ("ifs", "default"):
            earlier = parent.args["ifs"][: child.index] if key == "ifs" else parent.args["ifs"]
            for branch in earlier:
                test = branch.this
                if parent.this is not None:
                    test = exp.EQ(this=parent.this.copy(), expression=test.copy())
                conditions.append(exp.Not(this=_holds(test)))
        elif isinstance(parent, exp.Coalesce) and key == "expressions":
            for before in [parent.this, *parent.expressions[: child.index]]:
                conditions.append(exp.Is(this=before.copy(), expression=exp.Null()))
        child = parent
    return conditions


def _cast_failures(select: str, types: Types) -> exp.Expression | None:
    """The select list's first CAST that fails on a row, as a message naming it and the value
    (NULL if none failed), over `L_`/`R_` columns of `types`; None if the list holds no CAST
    that can fail."""
    branches = []
    for item in parse_select(select).expressions:
        for cast in _failing_casts(item, types):
            value = cast.this
            failed = exp.and_(
                *_evaluated_when(cast),
                exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())),
                exp.Is(this=cast.copy(), expression=exp.Null()),
            )
            written = cast.sql(dialect=FLINK_LEXICON)
            message = exp.func(
                "CONCAT",
                exp.Literal.string(f"{written} failed on the value "),
                exp.TryCast(this=value.copy(), to=exp.DataType.build("STRING"), safe=True),
            )
            branches.append(exp.If(this=failed, true=message))
    if not branches:
        return None
    return as_flink_computes(exp.Case(ifs=branches).transform(_qualified_to_flat), types)


def _select_items(
    select: str,
    columns: dict[str, tuple[str, ...]] | None,
    types: Types | None = None,
    what: str = "select list",
) -> list[tuple[str, exp.Expression]]:
    """Each item of the list: its output name and its expression over `L_`/`R_` columns, as
    Flink computes it where their `types` are given (`app.plan.flink_arithmetic`); `what` the
    list is, for the errors (none: the errors name no list)."""
    said = f"{what}: " if what else ""
    tree = parse_select(select)
    items, taken = [], set()
    for position, item in enumerate(tree.expressions):
        inner = item.this if isinstance(item, exp.Alias) else item
        refused = unsupported(inner)
        if refused is not None:
            raise ConditionError(f"{said}{describe(refused)} is not supported")
        for column in inner.find_all(exp.Column):
            alias = column.table.upper()
            if alias not in ALIASES:
                raise ConditionError(f"{said}column {column.sql()!r} must be qualified by L. or R.")
            if columns is not None and column.name not in columns[alias]:
                raise ConditionError(f"{said}{column.sql()!r}: no such column")
        if isinstance(item, exp.Alias) or isinstance(inner, exp.Column):
            name = item.alias_or_name
        else:
            name = f"EXPR${position}"
        name = _unique(name, taken)
        taken.add(name)
        flat = inner.transform(_qualified_to_flat)
        items.append((name, flat if types is None else as_flink_computes(flat, types)))
    return items


def select_expressions(
    select: str, columns: dict[str, tuple[str, ...]] | None = None, types: Types | None = None
) -> list[str]:
    """Spark SQL expressions, each aliased to its output column name; ConditionError names
    what the list may not hold, or (given each alias' `columns`) a column that does not exist.
    `types`: the joined columns' (`L_<col>`), which the expressions are computed as Flink
    computes them over."""
    items = _select_items(select, columns, types)
    return [f"{e.sql(dialect='spark')} AS `{name}`" for name, e in items]


def selected_columns(select: str) -> dict[str, str | None]:
    """Each output column's name, and the joined column (`L_<col>` / `R_<col>`) it is, if it
    is a bare column (None if computed): what says whether an output key holds the join key."""
    return {
        name: e.name if isinstance(e, exp.Column) else None
        for name, e in _select_items(select, None)
    }


def zoned_selected(select: str, zoned: set[str]) -> frozenset[str]:
    """The output columns of the select list that are TIMESTAMP_LTZ: a joined column of
    `zoned` as it is or moved by an interval, or a CAST to TIMESTAMP_LTZ."""

    def is_zoned(e: exp.Expression) -> bool:
        if isinstance(e, exp.Add | exp.Sub) and isinstance(e.expression, exp.Interval):
            return is_zoned(e.this.unnest())
        if isinstance(e, exp.Cast):
            return e.to.this == exp.DataType.Type.TIMESTAMPLTZ
        return isinstance(e, exp.Column) and e.name in zoned

    return frozenset(name for name, e in _select_items(select, None) if is_zoned(e))


def where_predicate(
    where: str, columns: dict[str, tuple[str, ...]] | None = None, types: Types | None = None
) -> str:
    """`JOIN_WHERE` as a Spark SQL predicate over `L_`/`R_` columns of `types` (where given),
    checked as `select_expressions` checks a select list. A CAST that can fail on a row's text
    is refused here, not dead-lettered: a row a filter drops has no output record to divert."""
    [(_, predicate)] = _select_items(where, columns, types, what="")
    if _failing_casts(parse_select(where), types or {}):  # as written, not as Spark computes it
        raise ConditionError("a CAST of a text is not supported: write TRY_CAST")
    return predicate.sql(dialect="spark")


def filtered(joined: DataFrame, where: str) -> DataFrame:
    """The joined changes whose row `where` holds for (TRUE, not NULL), as Flink filters a
    changelog: each change is kept or dropped alone, so an update whose new row fails is a
    retraction of its old row alone, and one whose old row failed an insert of its new."""
    types = {field.name: field.dataType for field in joined.schema.fields}
    return joined.where(F.expr(where_predicate(where, types=types)))


def _joined_row(joined: DataFrame) -> Column:
    """The joined row as JSON: `{"op": …, "L": {column: value, …}, "R": {…}}`."""
    sides = [
        F.struct(
            *[F.col(f"`{c}`").alias(c[2:]) for c in joined.columns if c.startswith(f"{a}_")]
        ).alias(a)
        for a in ALIASES
    ]
    return json_text(joined, F.struct("op", *sides))


def project(joined: DataFrame, select: str, keep: list[str] | None = None) -> DataFrame:
    """`op`, the columns named in `keep`, then the select list; with a CAST in the list, then
    `CAST_ERROR` and `FAILED_ROW` (NULL where no CAST failed)."""
    kept = [F.col(f"`{c}`") for c in keep or ()]
    types = {field.name: field.dataType for field in joined.schema.fields}
    selected = [F.expr(e) for e in select_expressions(select, types=types)]
    failure = _cast_failures(select, types)
    if failure is None:
        return joined.select("op", *kept, *selected)
    error = F.expr(failure.sql(dialect="spark"))
    return joined.select(
        "op",
        *kept,
        *selected,
        error.alias(CAST_ERROR),
        F.when(error.isNotNull(), _joined_row(joined)).alias(FAILED_ROW),
    )
