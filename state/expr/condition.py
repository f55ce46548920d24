"""Join conditions written the way Flink users write them, over the aliases `L` and `R`.

The text is parsed with sqlglot (a real SQL parser), so an error can point at the part of the
condition it could not use. The condition is split like Flink's planner splits it: equalities
between a left and a right column become the join key (rows are partitioned by it), and so do
null-safe ones (`L.a IS NOT DISTINCT FROM R.b`: NULL matches NULL); everything else is a
residual predicate evaluated on each candidate pair, with SQL's three-valued logic and the
scalar functions of `state.expr.functions`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

import sqlglot
from sqlglot import exp, parser
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError

from state.expr import arithmetic
from state.expr.functions import (
    CAST_TYPES,
    FUNCTIONS,
    INTEGRAL_BITS,
    cast,
    describe,
    extract,
    in_kind_of,
    interval_millis,
    java_wrapped,
    like,
    time_bound,
    time_unit,
    trim,
    unknown_unit,
)

ALIASES = ("L", "R")


class FlinkLexicon(Spark):
    """Flink SQL's lexical rules, as a sqlglot dialect for reading and writing conditions.

    Flink quotes names with backticks and strings with single quotes, as Spark SQL does (sqlglot's
    Spark dialect reads `1-_./Ü` as a name where its default one fails), but a quote inside a
    string is doubled, `'it''s'`, and a backslash is an ordinary character. Spark's rules read
    `'it''s'` as two adjacent strings, 'it' || 's', so `R.name = 'it''s'` matched "its": a wrong
    result, hence this dialect rather than Spark's.
    """

    class Tokenizer(Spark.Tokenizer):
        STRING_ESCAPES: ClassVar[list[str]] = ["'"]

    class Parser(Spark.Parser):
        def _parse_types(self, *args: Any, **kwargs: Any) -> exp.Expression | None:
            """Types as written: Hive's parser (Spark's) reads `VARCHAR(3)` and `CHAR(3)` as
            STRING, where Flink's CAST to them cuts and pads the text."""
            return parser.Parser._parse_types(self, *args, **kwargs)

    class Generator(Spark.Generator):
        def datatype_sql(self, expression: exp.DataType) -> str:
            """A type as Flink writes it, its length or precision kept: Spark's writes
            `VARCHAR(3)` as STRING and `TIMESTAMP(0)` as TIMESTAMP, so a select list written
            back from Flink SQL lost the CAST's cut."""
            name = _SIZED_TYPES.get(expression.this)
            if name is None or not (expression.expressions or name == "CHAR"):
                return super().datatype_sql(expression)  # VARCHAR alone is a STRING
            sizes = self.expressions(expression, flat=True)
            return f"{name}({sizes})" if sizes else name


_SIZED_TYPES = {
    exp.DataType.Type.CHAR: "CHAR",
    exp.DataType.Type.VARCHAR: "VARCHAR",
    exp.DataType.Type.TIMESTAMP: "TIMESTAMP",
    exp.DataType.Type.TIMESTAMPTZ: "TIMESTAMP",  # Spark's parser reads a TIMESTAMP as this
    exp.DataType.Type.TIMESTAMPLTZ: "TIMESTAMP_LTZ",
}


FLINK_LEXICON = FlinkLexicon

# A compiled expression: (left row, right row) -> value; None is SQL's NULL / UNKNOWN.
Evaluator = Callable[[Sequence[Any], Sequence[Any]], Any]
# Each column's width in bits where it is a whole number (TINYINT 8 … BIGINT 64), else None
Widths = Sequence[int | None]

_COMPARISONS: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
}


def interval_ms(node: exp.Interval) -> int:
    """`INTERVAL '5' SECOND` in milliseconds."""
    millis = interval_millis(node)
    if millis is None:
        raise ConditionError(f"{node.sql()!r}: expected INTERVAL 'n' DAY|HOUR|MINUTE|SECOND")
    return millis


_ARITHMETIC: dict[type[exp.Expression], Callable[[Any, Any], Any]] = {
    exp.Add: arithmetic.add,
    exp.Sub: arithmetic.subtract,
    exp.Mul: arithmetic.multiply,
    exp.Div: arithmetic.divide,
    exp.Mod: arithmetic.remainder,
}


class ConditionError(ValueError):
    """A join condition that cannot be used; the message quotes the offending part."""


def parse_condition(text: str) -> exp.Expression:
    """Parse a boolean condition whose every column is qualified by `L.` or `R.`."""
    try:
        statements = sqlglot.parse(text, read=FLINK_LEXICON)
    except ParseError as err:
        if not err.errors:
            raise ConditionError(str(err)) from None
        first = err.errors[0]
        raise ConditionError(
            f"{first['description']} at column {first['col']}: "
            f"...{first['start_context']}>>{first['highlight']}<<{first['end_context']}..."
        ) from None
    parsed = [s for s in statements if s is not None]
    if len(parsed) != 1:
        raise ConditionError(f"one condition, not {len(parsed)} statements")
    tree = parsed[0]
    for column in tree.find_all(exp.Column):
        if column.table.upper() not in ALIASES:
            raise ConditionError(
                f"column {column.sql()!r} must be qualified by L. (left) or R. (right)"
            )
    return tree


@dataclass(frozen=True)
class JoinCondition:
    """Equi-join key pairs `(left column, right column)`, the residual predicate if any, and the
    positions of the key pairs compared null-safely (IS NOT DISTINCT FROM)."""

    equi: tuple[tuple[str, str], ...]
    residual: exp.Expression | None
    null_safe: frozenset[int] = frozenset()


def _side(node: exp.Expression) -> str | None:
    return node.table.upper() if isinstance(node, exp.Column) else None


def split_condition(tree: exp.Expression) -> JoinCondition:
    """Separate `L.a = R.b` and `L.a IS NOT DISTINCT FROM R.b` conjuncts (the join key) from
    the rest (the residual)."""
    equi: list[tuple[str, str]] = []
    null_safe: set[int] = set()
    rest: list[exp.Expression] = []
    for conjunct in tree.flatten() if isinstance(tree, exp.And) else [tree]:
        node = conjunct.unnest()
        keyed = isinstance(node, exp.EQ | exp.NullSafeEQ)
        sides = (_side(node.this), _side(node.expression)) if keyed else ()
        if sides in (("L", "R"), ("R", "L")):
            left, right = (
                (node.this, node.expression) if sides[0] == "L" else (node.expression, node.this)
            )
            if isinstance(node, exp.NullSafeEQ):
                null_safe.add(len(equi))
            equi.append((left.name, right.name))
        else:
            rest.append(node)
    residual = exp.and_(*rest) if rest else None
    return JoinCondition(tuple(equi), residual, frozenset(null_safe))


def one_side_filter(residual: exp.Expression | None, alias: str) -> exp.Expression | None:
    """The conjuncts of `residual` over the columns of side `alias` alone: what an inner join
    may test on that side's rows before it keeps them, as Flink's planner pushes a filter
    below a join."""
    if residual is None:
        return None
    kept = [
        node
        for node in (residual.flatten() if isinstance(residual, exp.And) else [residual])
        if {column.table.upper() for column in node.find_all(exp.Column)} == {alias}
    ]
    return exp.and_(*kept) if kept else None


def _literal(node: exp.Literal) -> Any:
    """A literal's value of its Flink type: `1` an INT, `1.5` a DECIMAL, `1e10` a DOUBLE."""
    if node.is_string:
        return node.this
    if node.this.lstrip("-").isdigit():
        return int(node.this)
    return float(node.this) if "e" in node.this.lower() else Decimal(node.this)


_TIME_TYPES = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ)


def time_literal(node: exp.Expression) -> datetime | None:
    """`TIMESTAMP '2024-01-31 12:00:00'` (a text cast to TIMESTAMP): its moment, in UTC (the
    session's zone); None for anything else."""
    node = node.unnest()
    if not (
        isinstance(node, exp.Cast)
        and node.args["to"].this in _TIME_TYPES
        and isinstance(node.this, exp.Literal)
        and node.this.is_string
    ):
        return None
    try:
        moment = datetime.fromisoformat(node.this.this.strip())
    except ValueError:
        raise ConditionError(f"{node.sql()!r}: not a time like 2024-01-31 12:00:00") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _a_date(node: exp.Expression) -> bool:
    """`node` is visibly a DATE: a cast to one, `TO_DATE`."""
    node = node.unnest()
    if isinstance(node, exp.Cast):
        return node.args["to"].this == exp.DataType.Type.DATE
    return isinstance(node, exp.TsOrDsToDate)


def _no_date_beside(moments: Sequence[datetime | None], nodes: Sequence[exp.Expression]) -> None:
    """Flink refuses to compare a DATE with a TIMESTAMP ("Cannot apply '<' to arguments of
    type '<DATE> < <TIMESTAMP(0)>'", "Values passed to IN operator must have compatible
    types"): so do we, rather than compare the literal's date."""
    if any(m is not None for m in moments) and any(_a_date(node) for node in nodes):
        raise ConditionError(
            f"{' and '.join(repr(n.sql()) for n in nodes)}: a DATE compared with a TIMESTAMP "
            "(Flink refuses it); CAST one to the other's type"
        )


def _null_safe(fn: Callable[[Any, Any], Any], a: Evaluator, b: Evaluator) -> Evaluator:
    def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
        x, y = a(left, right), b(left, right)
        return None if x is None or y is None else fn(x, y)

    return evaluate


def _connective(a: Evaluator, b: Evaluator, decisive: bool) -> Evaluator:
    """AND (`decisive` False) or OR (`decisive` True), with SQL's three-valued logic."""

    def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
        x = a(left, right)
        if x is decisive:
            return decisive
        y = b(left, right)
        if y is decisive:
            return decisive
        return None if x is None or y is None else not decisive

    return evaluate


def _wrapping(evaluate: Evaluator, bits: int) -> Evaluator:
    """`evaluate`'s whole number cut to its low `bits` bits as a signed number, as Java's
    arithmetic on an int or a long wraps (`2147483647 + 1` of INTs is -2147483648 in Flink)."""

    def wrapped(left: Sequence[Any], right: Sequence[Any]) -> Any:
        value = evaluate(left, right)
        return value if value is None else java_wrapped(value, bits)

    return wrapped


def _literal_bits(node: exp.Literal) -> int | None:
    """A whole number literal's width as Flink types it: an INT if it fits, else a BIGINT."""
    if node.is_string or not node.this.isdigit():
        return None
    value = int(node.this)
    return 32 if value < 1 << 31 else 64 if value < 1 << 63 else None


class _Compiler:
    """Turns a sqlglot expression into nested closures over (left row, right row); `widths`
    (each side's, empty where not known) make whole-number arithmetic wrap as Flink's does."""

    def __init__(
        self,
        left_fields: Sequence[str],
        right_fields: Sequence[str],
        widths: tuple[Widths, Widths] = ((), ()),
    ) -> None:
        self.fields = {"L": list(left_fields), "R": list(right_fields)}
        self.widths = dict(zip(ALIASES, widths, strict=True))

    def whole_bits(self, node: exp.Expression) -> int | None:
        """The width of `node`'s value where Flink types it a whole number, None where it does
        not or it is not known: an operation of two whole numbers is as wide as the wider."""
        node = node.unnest()
        if isinstance(node, exp.Column):
            alias = node.table.upper()  # a column compiled already: one of its side's
            known, position = self.widths[alias], self.fields[alias].index(node.name)
            return known[position] if position < len(known) else None
        if isinstance(node, exp.Literal):
            return _literal_bits(node)
        if isinstance(node, exp.Cast):
            return INTEGRAL_BITS.get(node.args["to"].this.name)
        if isinstance(node, exp.Neg):
            return self.whole_bits(node.this)
        if type(node) in _ARITHMETIC:
            a, b = self.whole_bits(node.this), self.whole_bits(node.expression)
            return max(a, b) if a is not None and b is not None else None
        return None

    def column(self, node: exp.Column) -> Evaluator:
        alias = node.table.upper()
        names = self.fields[alias]
        if node.name not in names:
            side = "left" if alias == "L" else "right"
            raise ConditionError(f"{node.sql()!r}: the {side} input has no column {node.name!r}")
        i = names.index(node.name)
        return (lambda left, _right: left[i]) if alias == "L" else (lambda _left, right: right[i])

    def compile(self, node: exp.Expression) -> Evaluator:
        node = node.unnest()
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Literal | exp.Null | exp.Boolean):
            value = (
                _literal(node)
                if isinstance(node, exp.Literal)
                else node.this
                if isinstance(node, exp.Boolean)
                else None
            )
            return lambda _left, _right: value
        kind = type(node)
        if kind in (exp.Add, exp.Sub) and isinstance(node.expression, exp.Interval):
            return self.shifted(node)
        if kind in _COMPARISONS:
            return _null_safe(_COMPARISONS[kind], *self.compared(node.this, node.expression))
        if kind in _ARITHMETIC or kind is exp.Neg:
            return self.arithmetic(node)
        if kind is exp.And or kind is exp.Or:
            both = self.compile(node.this), self.compile(node.expression)
            return _connective(*both, decisive=kind is exp.Or)
        if kind is exp.Not:
            inner = self.compile(node.this)
            return lambda left, right: None if (v := inner(left, right)) is None else not v
        if kind is exp.Between:
            low = _null_safe(operator.le, *self.compared(node.args["low"], node.this))
            high = _null_safe(operator.le, *self.compared(node.this, node.args["high"]))
            return _connective(low, high, decisive=False)
        special = _SPECIAL_FORMS.get(kind)
        if special is not None:
            return special(self, node)
        function = FUNCTIONS.get(kind)
        if function is not None:
            return self.function(function.compute, function.arguments(node), function.strict)
        raise ConditionError(f"{describe(node)} is not supported in a join condition")

    def compared(self, *nodes: exp.Expression) -> list[Evaluator]:
        """Two operands compared with each other; a time literal (`TIMESTAMP '…'`) held as the
        other holds its times (epoch microseconds, or a datetime with or without its zone)."""
        moments = [time_literal(node) for node in nodes]
        _no_date_beside(moments, nodes)
        compiled = [self.compile(n) for n, m in zip(nodes, moments, strict=True) if m is None]
        if len(compiled) != 1:  # neither a literal (two literals: the CAST refused, as before)
            return compiled if compiled else [self.compile(node) for node in nodes]
        other = compiled[0]
        return [
            other
            if moment is None
            else (lambda left, right, m=moment: in_kind_of(other(left, right), m))
            for moment in moments
        ]

    def arithmetic(self, node: exp.Expression) -> Evaluator:
        """+, -, *, /, % and a minus sign; wrapped at the width of a whole-number result."""
        if isinstance(node, exp.Neg):
            evaluate = self.function(operator.neg, [node.this], strict=True)
        else:
            operands = self.compile(node.this), self.compile(node.expression)
            evaluate = _null_safe(_ARITHMETIC[type(node)], *operands)
        bits = self.whole_bits(node)
        return evaluate if bits is None else _wrapping(evaluate, bits)

    def shifted(self, node: exp.Add | exp.Sub) -> Evaluator:
        """`t ± INTERVAL 'n' unit`: a timestamp moved, as epoch microseconds (the frame's
        timestamps) or a datetime. After a regular join a rowtime is a plain timestamp, so such
        a condition is a regular join's, evaluated per candidate pair."""
        micros = interval_ms(node.expression) * 1000 * (1 if isinstance(node, exp.Add) else -1)
        value = self.compile(node.this)

        def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
            moment = value(left, right)
            if moment is None:
                return None
            return moment + (micros if isinstance(moment, int) else timedelta(microseconds=micros))

        return evaluate

    def function(self, compute: Callable[..., Any], arguments: list, strict: bool) -> Evaluator:
        """`compute` over the values of `arguments` (None: an optional one left out)."""
        given = [self.compile(a) for a in arguments if a is not None]

        def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
            values = [a(left, right) for a in given]
            if strict and any(v is None for v in values):
                return None
            return compute(*values)

        return evaluate

    def is_(self, node: exp.Is) -> Evaluator:
        """IS NULL, IS TRUE, IS FALSE (IS NOT ... arrives as NOT over these): never NULL."""
        inner = self.compile(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return lambda left, right: inner(left, right) is None
        if isinstance(target, exp.Boolean):
            wanted = target.this
            return lambda left, right: inner(left, right) is wanted
        raise ConditionError(f"{node.sql()!r} is not supported in a join condition")

    def distinct(self, node: exp.Expression) -> Evaluator:
        """IS NOT DISTINCT FROM (NullSafeEQ) and IS DISTINCT FROM: NULL equals NULL."""
        a, b = self.compile(node.this), self.compile(node.expression)
        same = isinstance(node, exp.NullSafeEQ)

        def evaluate(left: Sequence[Any], right: Sequence[Any]) -> bool:
            x, y = a(left, right), b(left, right)
            equal = x == y if x is not None and y is not None else x is None and y is None
            return equal is same

        return evaluate

    def in_(self, node: exp.In) -> Evaluator:
        """`x IN (a, b, ...)`: TRUE on a match, else NULL if x or any item is NULL; a time
        literal among the items held as x holds its times (`compared`)."""
        value = self.compile(node.this)
        moments = [time_literal(item) for item in node.expressions]
        _no_date_beside(moments, [node.this, *node.expressions])
        items = [
            self.compile(item) if moment is None else moment
            for item, moment in zip(node.expressions, moments, strict=True)
        ]
        if not items:
            raise ConditionError(f"{node.sql()!r}: only IN with a list of values is supported")

        def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
            x = value(left, right)
            if x is None:
                return None
            found = [
                in_kind_of(x, item) if isinstance(item, datetime) else item(left, right)
                for item in items
            ]
            if x in [v for v in found if v is not None]:
                return True
            return None if any(v is None for v in found) else False

        return evaluate

    def like_(self, node: exp.Expression) -> Evaluator:
        """LIKE and NOT LIKE, with an optional ESCAPE character."""
        escape = None
        if isinstance(node, exp.Escape):
            escape, node = node.expression, node.this
        parts = [node.this, node.expression, escape]
        matcher = self.function(like, parts, strict=True)
        if not node.args.get("negate"):
            return matcher
        return lambda left, right: None if (v := matcher(left, right)) is None else not v

    def case(self, node: exp.Case) -> Evaluator:
        """CASE [operand] WHEN ... THEN ... [ELSE ...] END."""
        operand = self.compile(node.this) if node.this is not None else None
        branches = [(self.compile(b.this), self.compile(b.args["true"])) for b in node.args["ifs"]]
        default = self.compile(node.args["default"]) if node.args.get("default") else None

        def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
            subject = operand(left, right) if operand is not None else None
            for when, then in branches:
                test = when(left, right)
                if (test == subject and test is not None) if operand is not None else test is True:
                    return then(left, right)
            return default(left, right) if default is not None else None

        return evaluate

    def if_(self, node: exp.If) -> Evaluator:
        test, then = self.compile(node.this), self.compile(node.args["true"])
        other = self.compile(node.args["false"]) if node.args.get("false") else None

        def evaluate(left: Sequence[Any], right: Sequence[Any]) -> Any:
            if test(left, right) is True:
                return then(left, right)
            return other(left, right) if other is not None else None

        return evaluate

    def cast_(self, node: exp.Cast) -> Evaluator:
        to = node.args["to"]
        if to.this.name not in CAST_TYPES:
            raise ConditionError(f"CAST to {to.sql()} is not supported in a join condition")
        return self.function(lambda v: cast(v, to), [node.this], strict=True)

    def trim_(self, node: exp.Trim) -> Evaluator:
        """TRIM keeps its side (LEADING for LTRIM, TRAILING for RTRIM) in the node."""
        side = node.args.get("position")
        characters = [node.this, node.args.get("expression")]
        return self.function(lambda text, chars=None: trim(text, side, chars), characters, True)

    def extract_(self, node: exp.Extract) -> Evaluator:
        unit = node.this.name.upper()
        if unknown_unit(node):
            raise ConditionError(f"{node.sql()!r} is not supported in a join condition")
        return self.function(lambda v: extract(unit, v), [node.expression], strict=True)

    def to_date(self, node: exp.TsOrDsToDate) -> Evaluator:
        if node.args.get("format") is not None:
            raise ConditionError("TO_DATE with a format is not supported in a join condition")
        return self.function(FUNCTIONS[exp.TsOrDsToDate].compute, [node.this], strict=True)

    def rounded(self, node: exp.Floor | exp.Ceil) -> Evaluator:
        """FLOOR and CEIL of a number, or of a time `TO` a unit."""
        unit, up = time_unit(node), isinstance(node, exp.Ceil)
        if unit is None:
            function = FUNCTIONS[type(node)]
            return self.function(function.compute, function.arguments(node), function.strict)
        if unknown_unit(node):
            raise ConditionError(f"{node.sql()!r} is not supported in a join condition")
        return self.function(lambda v: time_bound(v, unit, up), [node.this], strict=True)


_SPECIAL_FORMS: dict[type[exp.Expression], Callable[[_Compiler, Any], Evaluator]] = {
    exp.Is: _Compiler.is_,
    exp.NullSafeEQ: _Compiler.distinct,
    exp.NullSafeNEQ: _Compiler.distinct,
    exp.In: _Compiler.in_,
    exp.Like: _Compiler.like_,
    exp.Escape: _Compiler.like_,
    exp.Case: _Compiler.case,
    exp.If: _Compiler.if_,
    exp.Cast: _Compiler.cast_,
    exp.TryCast: _Compiler.cast_,
    exp.Extract: _Compiler.extract_,
    exp.Floor: _Compiler.rounded,
    exp.Ceil: _Compiler.rounded,
    exp.TsOrDsToDate: _Compiler.to_date,
    exp.Trim: _Compiler.trim_,
}


def compile_predicate(
    expression: exp.Expression,
    left_fields: Sequence[str],
    right_fields: Sequence[str],
    widths: tuple[Widths, Widths] = ((), ()),
) -> Evaluator:
    """A function (left row, right row) -> True / False / None (unknown) for `expression`;
    `widths`: each side's whole-number columns' (`Widths`), where known."""
    return compile_value(expression, left_fields, right_fields, widths)


def compile_value(
    expression: exp.Expression,
    left_fields: Sequence[str],
    right_fields: Sequence[str],
    widths: tuple[Widths, Widths] = ((), ()),
) -> Evaluator:
    """A function (left row, right row) -> the value of `expression`, as Flink computes it."""
    return _Compiler(left_fields, right_fields, widths).compile(expression)


def _position(fields: Sequence[str], name: str, alias: str) -> int:
    if name not in fields:
        side = "left" if alias == "L" else "right"
        raise ConditionError(f"'{alias}.{name}': the {side} input has no column {name!r}")
    return list(fields).index(name)


def compile_matcher(
    condition: JoinCondition,
    left_fields: Sequence[str],
    right_fields: Sequence[str],
    widths: tuple[Widths, Widths] = ((), ()),
) -> Callable[[Sequence[Any], Sequence[Any]], bool]:
    """Rows match when no equi-key column is NULL and the residual is TRUE.

    Rows reach the same key only if their key values are equal, so equality itself need not be
    tested again; NULL keys are grouped together but, as in SQL, never match, unless compared
    with IS NOT DISTINCT FROM.
    """
    positions = [
        (_position(left_fields, a, "L"), _position(right_fields, b, "R")) for a, b in condition.equi
    ]
    strict = [p for i, p in enumerate(positions) if i not in condition.null_safe]
    left_keys, right_keys = [i for i, _ in strict], [j for _, j in strict]
    residual = (
        compile_predicate(condition.residual, left_fields, right_fields, widths)
        if condition.residual is not None
        else None
    )

    if len(left_keys) == 1 and len(positions) == 1 and residual is None:  # the common case
        i, j = left_keys[0], right_keys[0]
        return lambda left, right: left[i] is not None and right[j] is not None

    def matches(left: Sequence[Any], right: Sequence[Any]) -> bool:
        if any(left[i] is None for i in left_keys) or any(right[j] is None for j in right_keys):
            return False
        return residual is None or residual(left, right) is True

    return matches
