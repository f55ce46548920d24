"""The scalar functions a join condition (`JOIN_ON`) and a select list (`JOIN_SELECT`) may use.

One library for both places, so the two accept the same Flink built-ins under the same names:
a condition is evaluated here in Python (on each candidate pair, inside the join), a select list
runs in Spark's JVM (rendered as Spark SQL, far faster per row than Python) after every node of
it has been checked against this library. Anything else is refused at start-up, naming the
construct: a configuration value never reaches Spark's SQL parser unchecked (Spark SQL has
`reflect`, `java_method` and friends, which would run code).

Semantics are Flink's, NULL first: a function of a NULL argument is NULL (`strict`), except the
ones made to handle NULL (COALESCE, IF, CASE, NULLIF, IS [NOT] DISTINCT FROM, IS TRUE/FALSE,
CONCAT_WS). Timestamps reach a condition either as datetimes (the regular join) or as epoch
microseconds (the interval and temporal joins' columns): the date functions take both.
A CAST or TRY_CAST that cannot convert its value is NULL here (Flink's CAST fails the job); a
select list's CAST that fails sends its row to the dead-letter topic (`app.plan.projection`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from state.changes import EPOCH
from state.decimals import decimal_fitting
from state.expr import arithmetic
from state.java_text import double_text


@dataclass(frozen=True)
class Function:
    """A Flink built-in: its name as users write it, its arguments in a sqlglot node, what it
    computes on their values; `strict`: NULL if any argument is NULL, without calling it.

    Its signature, as far as Flink's planner checks it: `takes`, the family ("string",
    "number", "time") its first argument must be (all of them with `all_args`), None for any;
    `gives`, the family of its result, None where it depends on the arguments."""

    name: str
    arguments: Callable[[exp.Expression], list[exp.Expression | None]]
    compute: Callable[..., Any]
    strict: bool = True
    takes: str | None = None
    gives: str | None = None
    all_args: bool = False


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    return EPOCH + timedelta(microseconds=value)  # epoch microseconds


_DATE_TEXT = re.compile(r"\s*(\d{1,4})-(\d{1,2})-(\d{1,2})(?: .*)?\s*$")  # no `T`, as Flink


def _to_date(value: Any) -> date | None:
    """TO_DATE: a text's `yyyy-M-d` (a time after it ignored), NULL where it is not a date, as
    Flink's; a timestamp's date."""
    if isinstance(value, str):
        found = _DATE_TEXT.match(value)
        try:
            return date(*(int(part) for part in found.groups())) if found else None
        except ValueError:  # 2024-02-30
            return None
    return _as_datetime(value).date()


def _aware(moment: datetime) -> datetime:
    """`moment` in UTC where it carries no zone (a regular join's datetimes may not)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def in_kind_of(value: Any, moment: datetime) -> Any:
    """`moment` as `value` holds a time: a date, a datetime, or epoch microseconds."""
    if isinstance(value, datetime):
        return moment if value.tzinfo else moment.replace(tzinfo=None)
    if isinstance(value, date):
        return moment.date()
    return (moment - EPOCH) // timedelta(microseconds=1)


def _ymd(year: int, month: int) -> date:
    """The first of `month` of `year`, a month 13 being January of the next (as Calcite's)."""
    return date(year + (month - 1) // 12, (month - 1) % 12 + 1, 1)


def _calendar_bound(day: date, unit: str, up: bool) -> date:
    """Calcite's `julianDateFloor`, which Flink's FLOOR and CEIL(t TO unit) use for a unit of
    days or more: from the date alone (a CEIL of a time on the 1st of a month TO MONTH is that
    1st), a week from Sunday, and a CEIL TO QUARTER of any day but January 1st the next
    quarter's start (Calcite's test is `month > 1 || day > 1`)."""
    year, month = day.year, day.month
    if unit == "WEEK":
        since_sunday = (day.weekday() + 1) % 7
        return day - timedelta(days=since_sunday - (7 if up and since_sunday else 0))
    if unit == "MONTH":
        return _ymd(year, month + (up and day.day > 1))
    past_new_year = up and (month > 1 or day.day > 1)
    if unit == "QUARTER":
        return _ymd(year, ((month + 2) // 3 + past_new_year) * 3 - 2)
    if unit == "YEAR":
        return date(year + past_new_year, 1, 1)
    if unit == "DECADE":
        return date(10 * (year // 10 + up), 1, 1)
    span = 100 if unit == "CENTURY" else 1000  # both count from a year 1: 2001, 1901
    return date(span * ((year + span - 1) // span) + (1 if up else 1 - span), 1, 1)


_CLOCK_UNITS = {
    "MILLISECOND": timedelta(milliseconds=1),
    "SECOND": timedelta(seconds=1),
    "MINUTE": timedelta(minutes=1),
    "HOUR": timedelta(hours=1),
    "DAY": timedelta(days=1),
}
_CALENDAR_UNITS = {"WEEK", "MONTH", "QUARTER", "YEAR", "DECADE", "CENTURY", "MILLENNIUM"}
TIME_UNITS = set(_CLOCK_UNITS) | _CALENDAR_UNITS  # FLOOR(t TO unit), CEIL(t TO unit)


def time_bound(value: Any, unit: str, up: bool) -> Any:
    """FLOOR(value TO unit), or CEIL when `up`, of the kind `value` is; NULL beyond the years
    1 to 9999."""
    moment = _aware(_as_datetime(value))
    try:
        if unit in _CLOCK_UNITS:
            step = _CLOCK_UNITS[unit]
            bound = EPOCH + (moment - EPOCH) // step * step
            bound += step if up and bound != moment else timedelta()
        else:
            bound = datetime.combine(_calendar_bound(moment.date(), unit, up), time(), UTC)
    except (ValueError, OverflowError):
        return None
    return in_kind_of(value, bound)


def _substring(text: str, start: int, length: int | None = None) -> str | None:
    """SUBSTR(text, start[, length]), as Flink's: from the start-th character (the first for
    0), counted from the end where negative, the `length` characters from there that the text
    has (none of those before its start); NULL for a negative length."""
    if length is not None and length < 0:
        return None
    begin = start - 1 if start > 0 else 0 if start == 0 else len(text) + start
    if length is None:
        return text[max(begin, 0) :]
    return text[max(begin, 0) : max(begin + length, 0)]


# A word of INITCAP: letters and digits (`x1y` is one word, `foo-bar` and `a_b` two each)
_WORD = re.compile(r"[A-Za-z0-9]+")


def _initcap(text: str) -> str:
    """Each word's first character upper case, the others lower, as Flink's INITCAP (Calcite's):
    a word is a run of ASCII letters and digits, any other character is left as it is
    (`straße` is `StraßE`)."""
    return _WORD.sub(lambda word: word[0][0].upper() + word[0][1:].lower(), text)


def like(text: str, pattern: str, escape: str | None = None) -> bool:
    """`text LIKE pattern [ESCAPE escape]`: `%` any characters, `_` one."""
    regex, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if escape and char == escape and i + 1 < len(pattern):
            regex.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        regex.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        i += 1
    return re.fullmatch("".join(regex), text, re.DOTALL) is not None


# ROUND's digits: a DECIMAL(38, 0)'s 38, the largest double's 309
_ROUNDING = Context(prec=400, rounding=ROUND_HALF_UP)


def _round(value: Any, places: int = 0) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return value
    quantum = Decimal(1).scaleb(-places)
    rounded = Decimal(str(value)).quantize(quantum, context=_ROUNDING)
    if isinstance(value, int):
        return int(rounded)
    return rounded if isinstance(value, Decimal) else float(rounded)


def trim(text: str, position: str | None = None, characters: str | None = None) -> str:
    """TRIM([BOTH|LEADING|TRAILING] [characters FROM] text), LTRIM, RTRIM."""
    chars = " " if characters is None else characters
    if position == "LEADING":
        return text.lstrip(chars)
    if position == "TRAILING":
        return text.rstrip(chars)
    return text.strip(chars)


INTEGRAL_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}  # a type name: its bits
_FLOATING = {"FLOAT", "DOUBLE"}
TEXT_TYPES = {"CHAR", "VARCHAR", "TEXT", "STRING"}
# the types a join condition may CAST to
CAST_TYPES = set(INTEGRAL_BITS) | _FLOATING | TEXT_TYPES | {"DECIMAL", "BOOLEAN", "DATE"}
# The texts Flink casts to a BOOLEAN, in any case (anything else fails its job: NULL here)
_BOOLEAN_TEXTS = dict.fromkeys(("true", "t", "yes", "y", "1"), True) | dict.fromkeys(
    ("false", "f", "no", "n", "0"), False
)


def java_wrapped(number: int, bits: int) -> int:
    """`number`'s low `bits` bits as a signed number: Java's narrowing of a whole number."""
    half = 1 << (bits - 1)
    return (number + half) % (1 << bits) - half


# The texts Flink reads as numbers (Python's own readers take more: `1_000`, `inf`): a whole
# number's after the spaces around it are cut, its fraction dropped (`1.9` is 1) and an
# exponent refused; a DECIMAL's after any whitespace is; a DOUBLE's as Java's
# `Double.parseDouble` reads, a `d` or `f` after it
_WHOLE_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")
_DECIMAL_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_DOUBLE_TEXT = re.compile(r"[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[fFdD]?)")


def _to_integral(value: Any, bits: int) -> int | None:
    """As Flink's CAST: a whole number or DECIMAL (truncated) keeps its low bits; a double is
    truncated, held at the range of an INT (of a BIGINT for one), NaN 0, then narrowed; a text
    is read as a number of the type, else NULL (Flink's job fails)."""
    if isinstance(value, str):
        text = value.strip(" ")
        if not _WHOLE_TEXT.fullmatch(text):
            return None
        number = int(Decimal(text))
        return number if java_wrapped(number, bits) == number else None
    if isinstance(value, float):
        wide = 64 if bits == 64 else 32
        limit = 1 << (wide - 1)
        if math.isnan(value):
            return 0
        held = max(-limit, min(limit - 1, math.trunc(value) if math.isfinite(value) else value))
        return java_wrapped(int(held), bits)
    return java_wrapped(int(value), bits)


def _to_decimal(value: Any, to: exp.DataType) -> Decimal | None:
    """DECIMAL(p, s), as Flink's: rounded half up to `s` places, NULL beyond `p` digits."""
    params = [int(p.name) for p in to.expressions]
    precision, scale = (params + [10, 0][len(params) :])[:2]
    # a double as its shortest text (Java's `BigDecimal.valueOf`), not its binary expansion
    if isinstance(value, str):
        if not _DECIMAL_TEXT.fullmatch(text := value.strip()):
            return None
        number = Decimal(text)
    elif isinstance(value, Decimal):
        number = value
    else:
        number = Decimal(repr(value))
    return decimal_fitting(precision, scale)(number)


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime):  # TIMESTAMP(3), as Flink writes it
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]
    return double_text(value) if isinstance(value, float) else str(value)


def text_length(to: exp.DataType) -> int | None:
    """The length a CAST to `to` cuts a text to: CHAR(n)'s and VARCHAR(n)'s n, a CHAR's 1 (a
    VARCHAR alone is a STRING, as in Flink); None for a STRING."""
    if to.this.name not in ("CHAR", "VARCHAR"):
        return None
    if not to.expressions:
        return 1 if to.this.name == "CHAR" else None
    return int(to.expressions[0].name)


def sized_text(text: str, to: exp.DataType) -> str:
    """`text` as Flink's CAST to `to` makes it: cut to a CHAR's or VARCHAR's length, and a
    CHAR's padded with spaces to it."""
    length = text_length(to)
    if length is None:
        return text
    return text[:length].ljust(length) if to.this.name == "CHAR" else text[:length]


def cast(value: Any, to: exp.DataType) -> Any:
    """CAST(value AS to) on a non-NULL value, as Flink casts it; NULL where Flink's job fails."""
    target = to.this.name
    try:
        if target in INTEGRAL_BITS:
            return _to_integral(value, INTEGRAL_BITS[target])
        if target in _FLOATING:
            if isinstance(value, str):
                text = value.strip()
                return float(text.rstrip("fFdD")) if _DOUBLE_TEXT.fullmatch(text) else None
            return float(value)
        if target == "DECIMAL":
            return _to_decimal(value, to)
        if target in TEXT_TYPES:
            return sized_text(_as_text(value), to)
        if target == "DATE":  # a text's as TO_DATE reads it, a time's day
            return _to_date(value)
        if target == "BOOLEAN":
            if isinstance(value, str):
                return _BOOLEAN_TEXTS.get(value.lower())
            return bool(value)
    except (ValueError, TypeError, InvalidOperation):
        return None
    raise AssertionError(f"no CAST to {target}: the compiler refuses it (CAST_TYPES)")


# EXTRACT(unit FROM t) as Flink's: DOW from Sunday (1) and ISODOW from Monday (1), WEEK the ISO
# week; MILLISECOND, MICROSECOND and NANOSECOND within the second; EPOCH whole seconds;
# CENTURY and MILLENNIUM counted from a year 1 (2000 is in the 20th century).
_EXTRACTED: dict[str, Callable[[datetime], int]] = {
    "YEAR": lambda t: t.year,
    "QUARTER": lambda t: (t.month - 1) // 3 + 1,
    "MONTH": lambda t: t.month,
    "WEEK": lambda t: t.isocalendar().week,
    "DAY": lambda t: t.day,
    "DOW": lambda t: (t.weekday() + 1) % 7 + 1,
    "ISODOW": lambda t: t.isoweekday(),
    "DOY": lambda t: t.timetuple().tm_yday,
    "ISOYEAR": lambda t: t.isocalendar().year,
    "HOUR": lambda t: t.hour,
    "MINUTE": lambda t: t.minute,
    "SECOND": lambda t: t.second,
    "MILLISECOND": lambda t: t.microsecond // 1000,
    "MICROSECOND": lambda t: t.microsecond,
    "NANOSECOND": lambda t: t.microsecond * 1000,
    "EPOCH": lambda t: (_aware(t) - EPOCH) // timedelta(seconds=1),
    "DECADE": lambda t: t.year // 10,
    "CENTURY": lambda t: (t.year + 99) // 100,
    "MILLENNIUM": lambda t: (t.year + 999) // 1000,
}
EXTRACT_UNITS = set(_EXTRACTED)


def extract(unit: str, value: Any) -> int:
    """EXTRACT(unit FROM value), and QUARTER(value), YEAR(value), ..."""
    return _EXTRACTED[unit](_as_datetime(value))


def _date_part(unit: str) -> Function:
    return Function(unit, _one, lambda v: extract(unit, v), takes="time", gives="number")


def _one(node: exp.Expression) -> list[exp.Expression | None]:
    return [node.this]


def _two(node: exp.Expression) -> list[exp.Expression | None]:
    return [node.this, node.expression]


def _listed(node: exp.Expression) -> list[exp.Expression | None]:
    return [node.this, *node.expressions] if node.this is not None else list(node.expressions)


def _coalesce(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _concat(*values: Any) -> Any:
    return None if any(v is None for v in values) else "".join(map(str, values))


def _sign(value: Any) -> Any:
    return (value > 0) - (value < 0)


def _position(needle: str, text: str) -> int:
    return text.find(needle) + 1


_TEXT_FUNCTION = {"takes": "string", "gives": "string"}
_MATH = {"takes": "number", "gives": "number"}
FUNCTIONS: dict[type[exp.Expression], Function] = {
    exp.Upper: Function("UPPER", _one, str.upper, **_TEXT_FUNCTION),
    exp.Lower: Function("LOWER", _one, str.lower, **_TEXT_FUNCTION),
    exp.Initcap: Function("INITCAP", _one, _initcap, **_TEXT_FUNCTION),
    exp.Length: Function("CHAR_LENGTH", _one, len, takes="string", gives="number"),
    exp.Substring: Function(
        "SUBSTR",
        lambda n: [n.this, n.args.get("start"), n.args.get("length")],
        lambda s, start, length=None: _substring(s, start, length),
        **_TEXT_FUNCTION,
    ),
    exp.Left: Function("LEFT", _two, lambda s, n: s[: max(n, 0)], **_TEXT_FUNCTION),
    exp.Right: Function(
        "RIGHT", _two, lambda s, n: s[max(len(s) - n, 0) :] if n > 0 else "", **_TEXT_FUNCTION
    ),
    exp.Replace: Function(
        "REPLACE",
        lambda n: [n.this, n.expression, n.args.get("replacement")],
        lambda s, old, new: s.replace(old, new),
        **_TEXT_FUNCTION,
        all_args=True,
    ),
    exp.StrPosition: Function(
        "POSITION",
        lambda n: [n.args.get("substr"), n.this],
        _position,
        takes="string",
        gives="number",
        all_args=True,
    ),
    exp.DPipe: Function("||", _two, _concat, **_TEXT_FUNCTION, all_args=True),
    exp.Concat: Function("CONCAT", _listed, _concat, **_TEXT_FUNCTION, all_args=True),
    exp.Abs: Function("ABS", _one, abs, **_MATH),
    exp.Sign: Function("SIGN", _one, _sign, **_MATH),
    exp.Floor: Function("FLOOR", _one, arithmetic.floor),  # FLOOR(x TO unit) takes a time
    exp.Ceil: Function("CEIL", _one, arithmetic.ceil),
    exp.Round: Function(
        "ROUND",
        lambda n: [n.this, n.args.get("decimals")],
        lambda v, p=0: _round(v, p),
        **_MATH,
    ),
    exp.Pow: Function("POWER", _two, arithmetic.power, **_MATH, all_args=True),
    exp.Sqrt: Function("SQRT", _one, arithmetic.sqrt, **_MATH),
    exp.TsOrDsToDate: Function("TO_DATE", _one, _to_date, gives="time"),  # YEAR(x) wraps x
    exp.Quarter: _date_part("QUARTER"),
    exp.Year: _date_part("YEAR"),
    exp.Month: _date_part("MONTH"),
    exp.DayOfMonth: _date_part("DAY"),
    exp.Hour: _date_part("HOUR"),
    exp.Minute: _date_part("MINUTE"),
    exp.Second: _date_part("SECOND"),
    # NULL if any argument is (Flink's), where Spark's and SQL Server's skip a NULL
    exp.Greatest: Function("GREATEST", _listed, lambda *v: max(arithmetic.widened(v))),
    exp.Least: Function("LEAST", _listed, lambda *v: min(arithmetic.widened(v))),
    exp.Coalesce: Function("COALESCE", _listed, _coalesce, strict=False),
    exp.Nullif: Function(
        "NULLIF", _two, lambda a, b: None if a is not None and a == b else a, strict=False
    ),
}

# What a select list may hold besides the functions: columns, literals, operators, CASE, IF,
# CAST, EXTRACT, TRIM, IN, LIKE, BETWEEN, IS [NOT] NULL / TRUE / FALSE / DISTINCT FROM (the
# condition compiler, `state.expr.condition`, evaluates these forms itself).
# The forms whose value is a BOOLEAN, and the arithmetic operators
COMPARISONS: tuple[type[exp.Expression], ...] = (  # NULL where either side is
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
)
PREDICATES: tuple[type[exp.Expression], ...] = (
    *COMPARISONS,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Is,
    exp.In,
    exp.Like,
    exp.Between,
)
OPERATORS: tuple[type[exp.Expression], ...] = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
STRUCTURE: tuple[type[exp.Expression], ...] = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Paren,
    exp.Alias,
    exp.Star,
    exp.Tuple,
    exp.DataType,
    exp.DataTypeParam,
    exp.Var,
    *PREDICATES,
    *OPERATORS,
    exp.Neg,
    exp.Escape,
    exp.Case,
    exp.If,
    exp.Cast,
    exp.TryCast,
    exp.Extract,
    exp.Trim,
)


def time_unit(node: exp.Expression) -> str | None:
    """The unit of an EXTRACT, or of a FLOOR or CEIL of a time (`FLOOR(t TO HOUR)`), else None."""
    if isinstance(node, exp.Extract):
        return node.this.name.upper()
    unit = node.args.get("to") if isinstance(node, exp.Floor | exp.Ceil) else None
    return None if unit is None else unit.name.upper()


# Flink SQL's interval units (`INTERVAL '5' SECOND`), in milliseconds
INTERVAL_UNIT_MS = {
    "MILLISECOND": 1,
    "SECOND": 1000,
    "MINUTE": 60_000,
    "HOUR": 3_600_000,
    "DAY": 86_400_000,
}


_INTERVAL_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?")


def interval_millis(node: exp.Interval) -> int | None:
    """`INTERVAL '5' SECOND` in milliseconds; None where it is not a number of a unit from a
    millisecond to a day (`INTERVAL 'x' SECOND`, `INTERVAL '1' MONTH`)."""
    unit = node.unit.name.upper().removesuffix("S") if node.unit is not None else ""
    number = node.this
    if unit not in INTERVAL_UNIT_MS or not isinstance(number, exp.Literal):
        return None
    if not _INTERVAL_NUMBER.fullmatch(number.name):
        return None
    return int(Decimal(number.name) * INTERVAL_UNIT_MS[unit])


def _shift(node: exp.Expression) -> bool:
    """An interval a time moves by (`t + INTERVAL '5' SECOND`), as `interval_millis` reads."""
    return (
        isinstance(node, exp.Interval)
        and interval_millis(node) is not None
        and isinstance(node.parent, exp.Add | exp.Sub)
        and node.arg_key == "expression"
    )


def unknown_unit(node: exp.Expression) -> bool:
    """An EXTRACT, FLOOR or CEIL of a unit of time the library does not have."""
    unit = time_unit(node)
    known = EXTRACT_UNITS if isinstance(node, exp.Extract) else TIME_UNITS
    return unit is not None and unit not in known


def unsupported(tree: exp.Expression) -> exp.Expression | None:
    """The first node of `tree` that is neither in the library nor plain structure, nor a unit
    of time the library has."""
    for node in tree.walk():
        outside = not isinstance(node, STRUCTURE) and type(node) not in FUNCTIONS
        if (outside and not _shift(node)) or unknown_unit(node):
            return node
    return None


def describe(node: exp.Expression) -> str:
    """How a refused construct is named to the user: a function by its name, else its SQL."""
    if time_unit(node) is not None:
        return repr(node.sql())
    if isinstance(node, exp.Func):
        return f"function {node.sql_name() if not isinstance(node, exp.Anonymous) else node.name}"
    return repr(node.sql())
