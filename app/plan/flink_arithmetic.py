"""A select list's expressions rewritten where Spark's SQL computes otherwise than Flink's.

The select list runs in Spark (`app.plan.projection`), under the session's non-ANSI arithmetic
(`app.run.session`), which wraps a whole number's overflow and narrows a CAST as Java does, as
Flink's generated code does. What the session cannot say, the expression is rewritten for, from
the types of the joined columns:

| Flink | Spark as written | rewritten |
| --- | --- | --- |
| INT / INT an INT, truncated (-7 / 2 = -3) | a DOUBLE (-3.5) | `CAST(a DIV b AS INT)` |
| CAST(boolean AS STRING) `TRUE` | `true` | `UPPER(CAST(…))` |
| FLOOR, CEIL of a DOUBLE a DOUBLE (-8.0) | a BIGINT (-8) | `CAST(FLOOR(x) AS DOUBLE)` |
| SIGN of an INT, DECIMAL(p, s) that type (1, 1.00) | a DOUBLE (1.0) | `CAST(SIGN(x) AS …)` |
| a DOUBLE / 0 `Infinity` or `NaN` | NULL | `IF(y = 0, …, x / y)` |
| TRY_CAST of a number as CAST (-1 for a BIGINT's 2^63-1 as INT) | NULL | `CAST(…)` |
| TRY_CAST('1.5' AS INT) 1, the fraction cut | NULL | `CAST(…)` |
| CAST(TIMESTAMP(3) AS STRING) `…:00.000` | `…:00` | `date_format(…)` |
| EXTRACT, FLOOR(t TO unit), CEIL(t TO unit) | (`app.plan.flink_time`) | |
| INITCAP: ASCII words (`Foo-Bar`, `StraßE`) | after whitespace (`Straße`) | char by char |
| SUBSTR(s, i, n) of a negative `n` NULL | `''` | `IF(n < 0, NULL, …)` |
| REPLACE('abc', '', 'x') `xaxbxcx` | `abc` | `IF(search = '', …)` |
| GREATEST, LEAST of a NULL NULL | the others' | `IF(x IS NULL OR …, NULL, …)` |
| CAST(t AS TIMESTAMP(0)) whole seconds | the microseconds kept | `TIMESTAMP_MICROS(…)` |
| CAST('abcd' AS VARCHAR(2)) `ab`, CAST('a' AS CHAR(2)) `a ` | `abcd`, `a` | `SUBSTRING`, `RPAD` |

(FLOOR and CEIL of a DOUBLE beyond 2^52, NaN or infinite are the value itself, which a BIGINT
cannot hold.)
"""

from __future__ import annotations

from pyspark.sql import types as T
from sqlglot import exp

from app.plan.flink_time import time_rewritten
from app.plan.spark_template import VALUE, spark_template
from state.expr.functions import (
    INTEGRAL_BITS,
    OPERATORS,
    PREDICATES,
    TEXT_TYPES,
    text_length,
    time_unit,
)

_SPARK_NAMES = {
    T.ByteType: "TINYINT",
    T.ShortType: "SMALLINT",
    T.IntegerType: "INT",
    T.LongType: "BIGINT",
    T.FloatType: "DOUBLE",
    T.DoubleType: "DOUBLE",
    T.BooleanType: "BOOLEAN",
    T.StringType: "STRING",
    T.TimestampType: "TIMESTAMP",
    T.DateType: "DATE",
}
_SAME_TYPE = (exp.Paren, exp.Neg, exp.Abs, exp.Floor, exp.Ceil, exp.Sign, exp.Round)
_TIMESTAMP_TEXT = "yyyy-MM-dd HH:mm:ss.SSS"
# Beyond 2^52 every double is whole: its FLOOR and CEIL are itself
_WHOLE_DOUBLES = exp.Literal.number(2**52)

# Flink's INITCAP (Calcite's): a run of ASCII letters and digits is a word, its first character
# upper case and the others lower; any other character is left as it is. Spark's capitalizes
# after whitespace only, and cases any letter. Each character against the one before it.
_INITCAP = (
    f"ARRAY_JOIN(ZIP_WITH(SPLIT({VALUE}, ''), CONCAT(ARRAY(' '), SPLIT({VALUE}, '')), (c, p) ->"
    " IF(p RLIKE '[A-Za-z0-9]', IF(c RLIKE '[A-Z]', LOWER(c), c),"
    " IF(c RLIKE '[a-z]', UPPER(c), c))), '')"
)

# Flink's REPLACE of '' puts the replacement before, between and after the characters, as Java's
# `String.replace` (Spark's returns the text as it is)
_REPLACE = (
    "IF(__search = '', IF(__text = '', __by, CONCAT(__by, ARRAY_JOIN(SPLIT(__text, ''), __by),"
    " __by)), REPLACE(__text, __search, __by))"
)

# A CAST to TIMESTAMP(p) truncates to p digits of a second (Spark's keeps the microseconds)
_D = exp.DataType.Type
_TIMESTAMPS = {_D.TIMESTAMP, _D.TIMESTAMPTZ, _D.TIMESTAMPLTZ}
_TRUNCATED = f"TIMESTAMP_MICROS(UNIX_MICROS({VALUE}) - PMOD(UNIX_MICROS({VALUE}), __unit))"

Types = dict[str, T.DataType]


def type_name(spark: T.DataType) -> str | None:
    """The Flink type a Spark type holds (`INT`, `DECIMAL(10, 2)`), None where not known."""
    if isinstance(spark, T.DecimalType):
        return f"DECIMAL({spark.precision}, {spark.scale})"
    return _SPARK_NAMES.get(type(spark))


def type_of(node: exp.Expression, types: Types) -> str | None:
    """The Flink type of `node` as far as the rewrites need it (`INT`, `DOUBLE`, `DECIMAL(p, s)`,
    `DECIMAL` of a precision not worked out, `BOOLEAN`, `STRING`); None where not known."""
    if isinstance(node, exp.Column):
        spark = types.get(node.name)
        return type_name(spark) if spark is not None else None
    if isinstance(node, exp.Literal):
        return literal_type(node)
    if isinstance(node, (exp.Boolean, *PREDICATES)):
        return "BOOLEAN"
    if isinstance(node, exp.Cast):
        name = node.args["to"].this.name
        return "DECIMAL" if name == "DECIMAL" else "STRING" if name in TEXT_TYPES else name
    if isinstance(node, _SAME_TYPE):
        return type_of(node.this, types)
    if isinstance(node, OPERATORS):
        return arithmetic_type(type_of(node.this, types), type_of(node.expression, types))
    return None


def literal_type(node: exp.Literal) -> str:
    """A literal's Flink type: `STRING`, `INT`, `BIGINT`, `DOUBLE` (`1e3`) or `DECIMAL`."""
    if node.is_string:
        return "STRING"
    text = node.this.lower()
    if text.lstrip("-").isdigit():
        return "INT" if -(2**31) <= int(text) < 2**31 else "BIGINT"
    return "DOUBLE" if "e" in text else "DECIMAL"


def arithmetic_type(a: str | None, b: str | None) -> str | None:
    """The Flink type of `a` and `b` added, multiplied or divided (type names, `INT`)."""
    if a in INTEGRAL_BITS and b in INTEGRAL_BITS:
        return a if INTEGRAL_BITS[a] >= INTEGRAL_BITS[b] else b
    if a is None or b is None:
        return None
    if "DOUBLE" in (a, b):
        return "DOUBLE"
    return "DECIMAL" if a.startswith("DECIMAL") or b.startswith("DECIMAL") else None


def _cast(node: exp.Expression, to: str) -> exp.Cast:
    return exp.Cast(this=node, to=exp.DataType.build(to))


def _double(text: str) -> exp.Cast:
    return _cast(exp.Literal.string(text), "DOUBLE")


def _divided(node: exp.Div, kind: str | None) -> exp.Expression:
    """A whole number's quotient truncated, of the operands' type; a DOUBLE's by zero infinite
    or NaN, as Java's (Spark's is NULL)."""
    x, y = node.this, node.expression
    if kind in INTEGRAL_BITS:
        return _cast(exp.IntDiv(this=x.copy(), expression=y.copy()), kind)
    if kind != "DOUBLE":
        return node
    undefined = exp.or_(
        exp.EQ(this=x.copy(), expression=exp.Literal.number(0)), exp.func("isnan", x.copy())
    )
    by_zero = exp.If(
        this=undefined,
        true=_double("NaN"),
        false=exp.Mul(this=x.copy(), expression=_double("Infinity")),
    )
    is_zero = exp.EQ(this=y.copy(), expression=exp.Literal.number(0))
    return exp.If(this=is_zero, true=by_zero, false=node.copy())


def _as_text(node: exp.Cast, kind: str | None) -> exp.Expression:
    """A CAST to a text type as Flink's: a boolean's upper case, a TIMESTAMP(3)'s milliseconds
    (zeros too), cut to a CHAR(n)'s or VARCHAR(n)'s length and padded to a CHAR's (Spark
    casts to both as to a STRING)."""
    length = text_length(node.args["to"])
    text = node if length is None else _cast(node.this.copy(), "STRING")
    if kind == "BOOLEAN":
        text = exp.Upper(this=text.copy())
    elif kind == "TIMESTAMP":
        text = exp.func("date_format", node.this.copy(), exp.Literal.string(_TIMESTAMP_TEXT))
    if length is None:
        return text
    size = exp.Literal.number(length)
    cut = exp.Substring(this=text.copy(), start=exp.Literal.number(1), length=size)
    if node.args["to"].this.name == "CHAR":
        return exp.func("RPAD", cut, size.copy(), exp.Literal.string(" "))
    return cut


def _fraction_digits(to: exp.DataType) -> int | None:
    """The precision of a TIMESTAMP type (its digits of a second), None for another type."""
    if to.this not in _TIMESTAMPS:
        return None
    precision = to.expressions[0].this if to.expressions else None
    return int(precision.this) if isinstance(precision, exp.Literal) else 6


def _rewritten(node: exp.Expression, types: Types) -> exp.Expression:
    """`node` as Flink computes it, its children rewritten already."""
    if isinstance(node, exp.Div):
        return _divided(node, type_of(node, types))
    if isinstance(node, exp.Cast) and (digits := _fraction_digits(node.args["to"])) is not None:
        # a TIMESTAMP(3) column's value is kept as read to a CAST to TIMESTAMP(3) or finer, as
        # Flink keeps it (its CAST is of a type to itself); a text's is cut to the digits
        if digits < (6 if type_of(node.this, types) == "STRING" else 3):
            unit = exp.Literal.number(10 ** (6 - digits))
            return spark_template(_TRUNCATED, value=node.copy(), unit=unit)
    elif isinstance(node, exp.Cast) and node.args.get("safe"):
        # only a text fails a CAST; and Spark's TRY_CAST reads a text as a whole number as its
        # ANSI CAST does, refusing a fraction (`'1.5'`), where Flink's reading truncates it
        # as Spark's CAST outside ANSI mode does (NULL where either fails)
        whole = node.args["to"].this.name in INTEGRAL_BITS
        if whole or type_of(node.this, types) not in (None, "STRING"):
            return exp.Cast(this=node.this.copy(), to=node.args["to"].copy())
    elif isinstance(node, exp.Cast) and node.args["to"].this.name in TEXT_TYPES:
        return _as_text(node, type_of(node.this, types))
    elif isinstance(node, exp.Floor | exp.Ceil) and not (
        node.args.get("decimals") or node.args.get("to")
    ):
        value = node.this
        if type_of(value, types) == "DOUBLE":
            whole = exp.or_(
                exp.func("isnan", value.copy()),
                exp.GTE(this=exp.Abs(this=value.copy()), expression=_WHOLE_DOUBLES.copy()),
            )
            return exp.If(this=whole, true=value.copy(), false=_cast(node.copy(), "DOUBLE"))
    elif isinstance(node, exp.Initcap):
        return spark_template(_INITCAP, value=node.this)
    elif isinstance(node, exp.Replace):
        parts = node.this, node.expression, node.args["replacement"]
        return spark_template(_REPLACE, **dict(zip(("text", "search", "by"), parts, strict=True)))
    elif time_unit(node) is not None:
        value = node.expression if isinstance(node, exp.Extract) else node.this
        return time_rewritten(node, type_of(value, types))
    elif isinstance(node, exp.Substring) and node.args.get("length") is not None:
        length = node.args["length"]
        if not (isinstance(length, exp.Literal) and length.this.isdigit()):
            negative = exp.LT(this=length.copy(), expression=exp.Literal.number(0))
            return exp.If(this=negative, true=exp.Null(), false=node.copy())
    elif isinstance(node, exp.Greatest | exp.Least):
        given = [node.this, *node.expressions]
        some_null = exp.or_(*(exp.Is(this=a.copy(), expression=exp.Null()) for a in given))
        return exp.If(this=some_null, true=exp.Null(), false=node.copy())
    elif isinstance(node, exp.Sign):
        kind = type_of(node.this, types)
        if kind is not None and (kind in INTEGRAL_BITS or kind.startswith("DECIMAL(")):
            return _cast(node.copy(), kind)
    return node


def as_flink_computes(tree: exp.Expression, types: Types) -> exp.Expression:
    """`tree` (over the joined columns, `types` theirs) rewritten where Spark computes
    otherwise than Flink; each node after its children, so that a rewrite sees them rewritten."""
    tree = tree.copy()
    for node in reversed(list(tree.walk(bfs=False))):
        replacement = _rewritten(node, types)
        if replacement is not node:
            if node is tree:
                return replacement
            node.replace(replacement)
    return tree
