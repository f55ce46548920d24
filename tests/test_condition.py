"""Join conditions: split into key and residual like Flink's planner, evaluated like SQL."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from state.changes import EPOCH
from state.expr.condition import (
    FLINK_LEXICON,
    ConditionError,
    compile_matcher,
    compile_predicate,
    parse_condition,
    split_condition,
)
from tests import flink_readings as readings


def predicate(text: str):
    return compile_predicate(parse_condition(text), ["a", "x"], ["b", "y"])


def test_equalities_between_sides_become_the_join_key() -> None:
    split = split_condition(parse_condition("L.a = R.b AND R.y = L.x AND L.x <= R.y + 1"))
    assert split.equi == (("a", "b"), ("x", "y"))
    assert split.residual.sql() == "L.x <= R.y + 1"


def test_no_equality_means_no_key() -> None:
    split = split_condition(parse_condition("L.x < R.y"))
    assert split.equi == () and split.residual is not None


def test_three_valued_logic() -> None:
    assert predicate("L.x <= R.y")((1, 2), (1, 3)) is True
    assert predicate("L.x <= R.y")((1, None), (1, 3)) is None
    assert predicate("L.x > R.y OR L.a = 1")((1, None), (1, 3)) is True
    assert predicate("L.x > R.y AND L.a = 2")((1, None), (1, 3)) is False
    assert predicate("NOT L.x > R.y")((1, None), (1, 3)) is None
    assert predicate("L.x IS NULL")((1, None), (1, 3)) is True
    assert predicate("L.x BETWEEN R.y - 1 AND R.y + 1")((1, 5), (1, 6)) is True
    assert predicate("L.x * 2 = R.y")((1, Decimal("1.5")), (1, 3)) is True
    assert predicate("L.a = 'p1'")(("p1", 0), (1, 3)) is True


@pytest.mark.parametrize(
    ("text", "value"),
    [("L.a = 'it''s'", "it's"), ("L.a = 'C:\\temp\\'", "C:\\temp\\"), ("L.a = 'a\\nb'", "a\\nb")],
)
def test_strings_are_read_as_flink_reads_them(text: str, value: str) -> None:
    """A doubled quote is one quote and a backslash is itself, as in Flink SQL; the condition
    written back (the compiled JOIN_ON of a SQL script) reads the same. Spark's rules read
    'it''s' as 'it' || 's'."""
    assert predicate("L.a = 'it''s'")(("its", 0), ()) is False
    assert predicate(text)((value, 0), ()) is True
    assert predicate(text)((value + "x", 0), ()) is False
    again = parse_condition(parse_condition(text).sql(FLINK_LEXICON))
    assert predicate(again.sql(FLINK_LEXICON))((value, 0), ()) is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("L.a = = R.b", ">>=<<"),
        ("L.a = b", "must be qualified by L. (left) or R. (right)"),
        ("L.nope = R.b", "the left input has no column 'nope'"),
        ("L.a = MD5(R.b)", "function MD5 is not supported in a join condition"),
        ("L.a = REFLECT('java.lang.System', 'getenv', 'X')", "function REFLECT is not supported"),
        ("CAST(L.a AS MAP<STRING, INT>) IS NULL", "CAST to MAP"),
        ("FLOOR(L.a TO FORTNIGHT) IS NULL", "'FLOOR(L.a TO FORTNIGHT)' is not supported"),
        ("EXTRACT(FORTNIGHT FROM L.a) = 1", "'EXTRACT(FORTNIGHT FROM L.a)' is not supported"),
        ("TO_DATE(L.a, 'yyyy') IS NULL", "TO_DATE with a format is not supported"),
        # Flink 2.3: "Cannot apply '<' to arguments of type '<DATE> < <TIMESTAMP(0)>'"
        ("CAST(L.a AS DATE) < TIMESTAMP '1970-01-01 05:00:00'", "a DATE compared with a TIMESTAMP"),
        ("TIMESTAMP '1970-01-01 00:00:00' = DATE '1970-01-01'", "a DATE compared with a TIMESTAMP"),
        ("TO_DATE(L.a) BETWEEN TIMESTAMP '1970-01-01 00:00:00' AND R.b", "a DATE compared with"),
        # "Values passed to IN operator must have compatible types"
        (
            "CAST(R.b AS DATE) NOT IN (TIMESTAMP '1970-01-01 05:00:00')",
            "a DATE compared with a TIMESTAMP",
        ),
    ],
)
def test_errors_point_at_the_part(text: str, message: str) -> None:
    with pytest.raises(ConditionError) as caught:
        predicate(text)
    assert message in str(caught.value)


def test_is_not_distinct_from_is_a_join_key_on_which_null_matches_null() -> None:
    split = split_condition(parse_condition("L.a IS NOT DISTINCT FROM R.b AND L.x = R.y"))
    assert split.equi == (("a", "b"), ("x", "y")) and split.null_safe == {0}
    matches = compile_matcher(split, ["a", "x"], ["b", "y"])
    assert matches((None, 1), (None, 1)) is True
    assert matches((None, None), (None, None)) is False  # x = y stays a plain equality
    assert predicate("L.a IS DISTINCT FROM R.b")((None, 0), (None, 0)) is False
    assert predicate("L.a IS NOT DISTINCT FROM R.b")((1, 0), (None, 0)) is False


@pytest.mark.parametrize(
    ("text", "left", "expected"),
    [
        ("L.x IS TRUE", ("a", None), False),
        ("NOT L.x IS FALSE", ("a", None), True),  # IS NOT FALSE
        ("L.x IN (1, 2, NULL)", ("a", 2), True),
        ("L.x IN (1, NULL)", ("a", 2), None),
        ("L.x NOT IN (1, 3)", ("a", 2), True),
        ("L.a LIKE 'He%o_x'", ("Hello w", 0), False),
        ("L.a LIKE 'He%o w'", ("Hello w", 0), True),
        ("L.a NOT LIKE '%!%%' ESCAPE '!'", ("50%", 0), False),
        ("UPPER(SUBSTR(L.a, 2, 3)) = 'ELL'", ("Hello", 0), True),
        ("SUBSTRING(L.a FROM 2) = 'ello'", ("Hello", 0), True),
        ("CHAR_LENGTH(L.a) = 5 AND LOWER(L.a) = 'hello'", ("Hello", 0), True),
        ("CASE WHEN L.x > 1 THEN 'big' ELSE 'small' END = 'big'", ("a", 2), True),
        ("CASE L.x WHEN 1 THEN 'one' END IS NULL", ("a", 2), True),
        ("IF(L.x = 2, 10, 0) = 10", ("a", 2), True),
        ("COALESCE(L.x, 7) = 7", ("a", None), True),
        ("NULLIF(L.x, 2) IS NULL", ("a", 2), True),
        ("CAST(L.a AS INT) + 1 = 13", ("12", 0), True),
        ("CAST(L.a AS INT) IS NULL", ("twelve", 0), True),
        ("CAST(L.x AS STRING) || 'x' = '2x'", ("a", 2), True),
        ("CONCAT(L.a, NULL) IS NULL", ("a", 2), True),
        ("MOD(L.x, 3) = 2 AND ABS(-L.x) = 2 AND POWER(L.x, 2) = 4", ("a", 2), True),
        ("ROUND(L.x / 3.0, 2) = 0.67", ("a", 2), True),
        ("POSITION('l' IN L.a) = 3", ("Hello", 0), True),
        ("TRIM(L.a) = 'x' AND REPLACE(L.a, ' ', '') = 'x'", (" x ", 0), True),
        ("LTRIM(L.a) = 'x ' AND RTRIM(L.a) = ' x'", (" x ", 0), True),
        (
            "TRIM(TRAILING 'y' FROM L.a) = 'yx' AND TRIM(BOTH 'y' FROM L.a) = 'x'",
            ("yxyy", 0),
            True,
        ),
        ("UPPER(L.a) = 'A'", (None, 0), None),
    ],
)
def test_flinks_scalar_functions_with_flinks_nulls(text: str, left: tuple, expected) -> None:
    assert predicate(text)(left, (1, 3)) is expected


def test_date_functions_take_datetimes_and_epoch_microseconds() -> None:
    """The regular join's rows carry datetimes, the interval and temporal joins' epoch micros."""
    from datetime import datetime

    august = datetime(2020, 8, 15, 0, 1, tzinfo=UTC)
    micros = int(august.timestamp() * 1_000_000)
    for value in (august, micros):
        assert (
            predicate("QUARTER(L.x) = 3 AND EXTRACT(MONTH FROM L.x) = 8")(("a", value), ()) is True
        )
        assert (
            predicate("YEAR(L.x) = 2020 AND HOUR(L.x) = 0 AND DAYOFMONTH(L.x) = 15")(
                ("a", value), ()
            )
            is True
        )


NAN = float("nan")
# What Flink 2.3 computes, on a row of a INT = -7, b INT = 2, x DOUBLE = -7.5, d DECIMAL(10,2)
# = -7.45, s STRING = ' Ab c ', g BIGINT = 2^63-1 (a batch query over those values), where
# Python computes otherwise or raises (a raise fails the join's task, on every retry).
FLINK_COMPUTES = [
    ("L.a / L.b", -3),
    ("L.a % L.b", -1),
    ("L.a % -3", -1),
    ("L.d + L.x", -14.95),
    ("L.x / 0", float("-inf")),
    ("L.x * 0 / 0", NAN),
    ("SQRT(L.x)", NAN),
    ("POWER(L.x, 0.5)", NAN),
    ("POWER(10, 400)", float("inf")),
    ("ROUND(L.x * 1e299)", -7.5e299),
    ("ROUND(L.x * 1e299, -1)", -7.5e299),
    ("FLOOR(L.x)", -8.0),
    ("CEIL(L.d)", Decimal(-7)),
    ("SUBSTR(L.s, 0, 2)", " A"),
    ("SUBSTR(L.s, 2, -1)", None),
    ("SUBSTR(L.s, -10, 3)", ""),
    ("RIGHT(L.s, 10)", " Ab c "),
    ("INITCAP('hello wORLD foo-bar x1y')", "Hello World Foo-Bar X1y"),
    (readings.FLINK_INITCAP[0], readings.FLINK_INITCAP[1]),
    ("REPLACE('abc', '', 'x')", "xaxbxcx"),
    ("REPLACE('', '', 'y')", "y"),
    ("CAST(L.d AS DECIMAL(3,1))", Decimal("-7.5")),
    ("CAST(L.d * 1000 AS DECIMAL(4,2))", None),
    ("CAST(L.g AS INT)", -1),
    ("CAST(L.x * 1e300 AS INT)", -2147483648),
    ("CAST(L.x * 1e300 * 1e10 AS BIGINT)", -9223372036854775808),
    ("CAST(1e10 AS INT)", 2147483647),
    ("CAST(L.x * 1e300 AS STRING)", "-7.5E300"),
    ("CAST('yes' AS BOOLEAN)", True),
    ("CAST('1.5' AS INT)", 1),
    ("CAST('1e2' AS INT)", None),
    ("CAST(L.s AS VARCHAR(3))", " Ab"),
    ("CAST(L.s AS CHAR(8))", " Ab c   "),
    ("CAST(L.a AS CHAR)", "-"),
    ("CAST(L.s AS VARCHAR)", " Ab c "),
    ("GREATEST(L.a, L.b, 0)", 2),
    ("LEAST(L.x, L.d)", -7.5),
    ("LEAST(L.d, 1)", Decimal("-7.45")),
    ("GREATEST(L.a, CAST(NULL AS INT))", None),
]


@pytest.mark.parametrize(("expression", "flink"), FLINK_COMPUTES)
def test_a_condition_computes_as_flink_does(expression: str, flink: object) -> None:
    """Whole numbers divide truncated and keep the dividend's sign in a remainder; a DOUBLE
    meets a DECIMAL as a DOUBLE; a DOUBLE by zero, a negative square root and an overflowing
    power are infinite or NaN, not an exception; CASTs round, narrow and hold as Flink's."""
    columns = ["a", "b", "x", "d", "s", "g"]
    computed = compile_predicate(parse_condition(expression), columns, [])
    value = computed((-7, 2, -7.5, Decimal("-7.45"), " Ab c ", 2**63 - 1), ())
    if flink is NAN:
        assert value != value
    else:
        assert value == flink and type(value) is type(flink)


@pytest.mark.parametrize("expression", readings.EXPRESSIONS)
def test_time_functions_compute_as_flinks(expression: str) -> None:
    """FLOOR and CEIL of a time TO each unit (a week from Sunday; a CEIL of a unit of days or
    more from the date alone, as Calcite's), EXTRACT of each unit and a CAST to DATE, on a
    TIMESTAMP as the regular join holds it (a datetime) and as the time joins do (epoch
    microseconds), and on a DATE: each failed the join's task (FLOOR and CEIL took no unit,
    EXTRACT knew eight) or was refused (the CAST)."""
    computed = compile_predicate(parse_condition(readings.qualified(expression)), ["t", "d"], [])
    days = [date.fromisoformat(d) for d in readings.FLINK_TIME["results"]["CAST(t AS DATE)"]]
    for text, day, flink in zip(
        readings.FLINK_TIME["values"], days, readings.FLINK_TIME["results"][expression], strict=True
    ):
        if text == readings.FLINK_MISCOUNTS:
            continue
        moment = datetime.fromisoformat(text).replace(tzinfo=UTC)
        micros = (moment - EPOCH) // timedelta(microseconds=1)
        for t in (moment, micros):
            value = computed((t, day), ())
            if type(t) is int and expression.startswith(("FLOOR(t", "CEIL(t")):
                value = EPOCH + timedelta(microseconds=value)
            assert readings.as_flink_prints(value) == flink, (text, t)


@pytest.mark.parametrize(("text", "flink"), readings.FLINK_TIME["to_date"].items())
def test_to_date_of_a_text_is_null_where_flinks_is(text: str, flink: str | None) -> None:
    computed = compile_predicate(parse_condition("TO_DATE(L.s)"), ["s"], [])((text,), ())
    assert readings.as_flink_prints(computed) == flink


# Flink's reading of a DECIMAL's text takes an exponent without digits or a Java `d`/`f` after
# it (`1e`, `1d` are 1.00) and counts leading zeros into the precision (`0001` is NULL in
# DECIMAL(5, 2)); read here as a number's text is
_FLINK_DECIMAL_QUIRKS = {"1e", "1d", "1f", "0001"}


@pytest.mark.parametrize("to", readings.FLINK_TEXT_CASTS["results"])
def test_a_texts_cast_is_flinks(to: str) -> None:
    """A text to each number type and BOOLEAN as Flink 2.3 reads it: spaces around a whole
    number cut, its fraction dropped (`1.9` is 1), an exponent or a `_` refused, beyond the
    type NULL, a DOUBLE's `NaN` and `Infinity` Java's. `Infinity` as an INT failed the join's
    task (on every retry), `1_000` read as Python reads it."""
    computed = compile_predicate(parse_condition(f"TRY_CAST(L.s AS {to})"), ["s"], [])
    for text, flink in zip(
        readings.FLINK_TEXT_CASTS["values"], readings.FLINK_TEXT_CASTS["results"][to], strict=True
    ):
        if to.startswith("DECIMAL") and text in _FLINK_DECIMAL_QUIRKS:
            continue
        assert readings.as_flink_prints(computed((text,), ())) == flink, repr(text)


@pytest.mark.parametrize(
    ("condition", "widths", "row", "flink"),
    [
        ("L.a * R.a", ((32,), (32,)), (-(2**31), -(2**31)), 0),
        ("L.a + 1", ((32,), (32,)), (2**31 - 1, 0), -(2**31)),
        ("L.a + 1", ((64,), (32,)), (2**31 - 1, 0), 2**31),
        ("L.a - R.a", ((64,), (32,)), (-(2**63) + 1, 7), 2**63 - 6),
        ("-L.a", ((32,), (32,)), (-(2**31), 0), -(2**31)),
        ("L.a / R.a", ((32,), (32,)), (-(2**31), -1), -(2**31)),
        ("L.a * 2147483648", ((32,), (32,)), (2, 0), 2**32),
        ("CAST(L.a AS SMALLINT) + CAST(R.a AS SMALLINT)", ((32,), (32,)), (2**15 - 1, 1), -(2**15)),
        ("L.a * R.a", ((), ()), (2**31, 2), 2**32),
    ],
)
def test_whole_number_arithmetic_wraps_at_its_types_width(
    condition: str, widths: tuple, row: tuple, flink: int
) -> None:
    """As Flink's generated Java: an INT's arithmetic wraps at 32 bits, a BIGINT's (or an INT
    with a BIGINT, or a literal beyond an INT) at 64, a CAST's type at its own; where the
    columns' types are not known the true result stays."""
    computed = compile_predicate(parse_condition(condition), ["a"], ["a"], widths)
    assert computed((row[0],), (row[1],)) == flink


def test_a_time_literal_is_compared_with_a_time_as_the_row_holds_it() -> None:
    """`TIMESTAMP '…'` (UTC, the session's zone) against epoch microseconds, a datetime with
    its zone and one without (a lookup table's `timestamp`)."""
    after = compile_predicate(
        parse_condition(
            "R.t > TIMESTAMP '2024-01-01 00:00:00' AND "
            "R.t BETWEEN L.t AND TIMESTAMP '2024-06-01 00:00:00.5'"
        ),
        ["t"],
        ["t"],
    )
    for start, inside, outside in [
        (
            datetime(2023, 1, 1, tzinfo=UTC),
            datetime(2024, 2, 1, tzinfo=UTC),
            datetime(2024, 6, 1, 0, 0, 1, tzinfo=UTC),
        ),
        (datetime(2023, 1, 1), datetime(2024, 2, 1), datetime(2023, 12, 31, 23, 59)),
        (0, 1_706_745_600_000_000, 1_704_067_199_000_000),
    ]:
        assert after((start,), (inside,)) is True
        assert after((start,), (outside,)) is False
    assert after((None,), (datetime(2024, 2, 1),)) is None
    with pytest.raises(ConditionError, match="not a time"):
        compile_predicate(parse_condition("R.t > TIMESTAMP 'soon'"), [], ["t"])


def test_time_literals_in_a_list_are_compared_as_the_row_holds_its_times() -> None:
    """`t IN (TIMESTAMP '…', …)` and `NOT IN`, with SQL's NULLs: a NULL item makes a miss
    NULL, not FALSE."""
    listed = "R.t IN (TIMESTAMP '2024-01-01 00:00:00', TIMESTAMP '2024-06-01 12:00:00.5')"
    found = compile_predicate(parse_condition(listed), [], ["t"])
    missing = compile_predicate(parse_condition(listed.replace(" IN ", " NOT IN ")), [], ["t"])
    with_null = compile_predicate(parse_condition(listed.replace("(", "(NULL, ", 1)), [], ["t"])
    for hit, miss in [
        (datetime(2024, 6, 1, 12, 0, 0, 500_000, tzinfo=UTC), datetime(2024, 6, 1, tzinfo=UTC)),
        (datetime(2024, 1, 1), datetime(2024, 1, 1, 0, 0, 1)),
        (1_704_067_200_000_000, 1_704_067_200_000_001),
    ]:
        assert (found((), (hit,)), found((), (miss,))) == (True, False)
        assert (missing((), (hit,)), missing((), (miss,))) == (False, True)
        assert (with_null((), (hit,)), with_null((), (miss,))) == (True, None)
    assert found((), (None,)) is None
