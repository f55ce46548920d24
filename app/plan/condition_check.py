"""`JOIN_ON` against the inputs' declared types: a boolean condition, comparing like with like.

`state.expr.condition` parses and compiles a condition by column names alone. Without the types, a
condition that Flink refuses ran anyway: `L.product_id` (a string, not a condition) or `1`, and
`L.qty = R.product_id` (INT = STRING) or `L.qty = 'abc'`, which match nothing or everything
depending on Python's comparisons. Flink's planner refuses both kinds; so does this, at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import types as T
from sqlglot import exp

from serdes.records.schema import Column
from state.expr.functions import FUNCTIONS, OPERATORS

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ)
Columns = Mapping[str, Mapping[str, Column]]  # alias (L, R) -> column name -> column


def _family(data_type: T.DataType) -> str:
    """What a type compares with: Flink compares numbers with numbers, and so on."""
    if isinstance(data_type, T.NumericType):
        return "number"
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType | T.DateType):
        return "time"
    if isinstance(data_type, T.BooleanType):
        return "boolean"
    if isinstance(data_type, T.BinaryType):
        return "bytes"
    return "string"


def _operand(node: exp.Expression, columns: Columns) -> tuple[str, str] | None:
    """The family of an operand and how to name it, None if not known without evaluating."""
    node = node.unnest()
    if isinstance(node, exp.Column):
        column = columns.get(node.table.upper(), {}).get(node.name)
        if column is None:
            return None
        return _family(column.spark_type), f"{node.sql()} ({column.declared})"
    if isinstance(node, exp.Literal):
        if node.is_string:
            return "string", f"the string {node.sql()}"
        return "number", f"the number {node.sql()}"
    if isinstance(node, exp.Boolean):
        return "boolean", node.sql()
    if isinstance(node, exp.Neg):
        return _operand(node.this, columns)
    if isinstance(node, OPERATORS):
        left, right = _operand(node.this, columns), _operand(node.expression, columns)
        if left and right and left[0] == right[0] == "number":
            return "number", node.sql()
    function = FUNCTIONS.get(type(node))
    if function is not None and function.gives is not None:
        return function.gives, f"{node.sql()} (a {function.gives})"
    return None


def function_problem(tree: exp.Expression, columns: Columns) -> str | None:
    """A function of the library applied to an argument of a type it does not take, as Flink's
    planner refuses it (`UPPER(L.qty)` of an INT, `GREATEST(L.qty, L.name)`), or None."""
    for node in sorted(tree.walk(), key=lambda n: -n.depth):  # the innermost mistake first
        function = FUNCTIONS.get(type(node))
        if isinstance(node, exp.Greatest | exp.Least):
            pair = _incomparable([node.this, *node.expressions], columns)
            if pair is not None:
                return f"{node.sql()} orders {pair[0]} with {pair[1]}"
        if function is None or function.takes is None:
            continue
        arguments = function.arguments(node)
        for argument in arguments if function.all_args else arguments[:1]:
            found = None if argument is None else _operand(argument, columns)
            if found is not None and found[0] != function.takes:
                return (
                    f"{node.sql()} applies {function.name} to {found[1]}: it takes a "
                    f"{function.takes}"
                )
    return None


def _comparable(a: tuple[str, str], b: tuple[str, str], nodes: tuple[exp.Expression, ...]) -> bool:
    if a[0] == b[0]:
        return True
    # a string literal reads as a time ('2024-01-31 00:00:00'), as Flink casts it implicitly
    literal = any(isinstance(n.unnest(), exp.Literal) for n in nodes)
    return literal and {a[0], b[0]} == {"string", "time"}


def _incomparable(operands: list[exp.Expression], columns: Columns) -> tuple[str, str] | None:
    """The names of the first of `operands` and of one that Flink does not compare it with
    (a number with a string), or None."""
    known = [(o, f) for o in operands if (f := _operand(o, columns)) is not None]
    for node_b, b in known[1:]:
        node_a, a = known[0]
        if not _comparable(a, b, (node_a, node_b)):
            return a[1], b[1]
    return None


def _not_boolean(node: exp.Expression, columns: Columns) -> str | None:
    node = node.unnest()
    if isinstance(node, exp.Connector):
        return _not_boolean(node.this, columns) or _not_boolean(node.expression, columns)
    if isinstance(node, exp.Not):
        return _not_boolean(node.this, columns)
    if isinstance(node, exp.Predicate | exp.Boolean | exp.Func):
        return None  # a function's result type is checked when it runs
    operand = _operand(node, columns)
    if operand is not None and operand[0] == "boolean":
        return None
    what = operand[1] if operand else repr(node.sql())
    return f"{what} is not a condition: compare it, e.g. {node.sql()} = R.x"


def condition_problem(tree: exp.Expression, columns: Columns) -> str | None:
    """Why the condition cannot be a join condition over these columns, or None."""
    problem = _not_boolean(tree, columns) or function_problem(tree, columns)
    if problem:
        return problem
    for node in tree.find_all(*_COMPARISONS, exp.In, exp.Between):
        if isinstance(node, exp.In):
            operands = (node.this, *node.expressions)
        elif isinstance(node, exp.Between):
            operands = (node.this, node.args["low"], node.args["high"])
        else:
            operands = (node.this, node.expression)
        pair = _incomparable(list(operands), columns)
        if pair is not None:
            return f"{node.sql()} compares {pair[0]} with {pair[1]}"
    return None
