"""Reading an interval join's time bounds from its condition, as Flink's planner does."""

from __future__ import annotations

import pytest

from state.expr.condition import ConditionError, parse_condition
from state.expr.interval_bounds import split_interval

HOUR = 3_600_000


def bounds(text: str) -> tuple[int, int]:
    found = split_interval(parse_condition(text), "t", "t")
    return found.lower_ms, found.upper_ms


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("L.k = R.k AND L.t BETWEEN R.t - INTERVAL '4' HOUR AND R.t", (-4 * HOUR, 0)),
        ("L.t >= R.t - INTERVAL '10' MINUTE AND L.t <= R.t + INTERVAL '1' SECOND", (-600e3, 1e3)),
        ("L.t > R.t AND L.t < R.t + INTERVAL '1' HOUR", (1, HOUR - 1)),  # strict: 1 ms inside
        ("R.t <= L.t + INTERVAL '2' HOUR AND R.t >= L.t", (-2 * HOUR, 0)),  # R first: flipped
        ("R.t BETWEEN L.t - INTERVAL '1' DAY AND L.t - INTERVAL '1' HOUR", (HOUR, 24 * HOUR)),
        ("L.t BETWEEN R.t + INTERVAL '1' HOUR AND R.t + INTERVAL '3' HOUR", (HOUR, 3 * HOUR)),
        ("L.t BETWEEN R.t AND R.t", (0, 0)),
        ("L.t BETWEEN R.t - INTERVAL '1.5' SECOND AND R.t", (-1500, 0)),
        # a signed literal, as Flink reads it: `+ INTERVAL '-1' SECOND` is a second earlier
        ("R.t BETWEEN L.t - INTERVAL '3' SECOND AND L.t + INTERVAL '-1' SECOND", (1000, 3000)),
        ("L.t BETWEEN R.t - INTERVAL '+2' SECOND AND R.t - INTERVAL '-1' SECOND", (-2000, 1000)),
        ("L.t BETWEEN R.t + INTERVAL '1' HOUR AND R.t", (HOUR, 0)),  # empty: joins nothing
        ("L.k = R.k AND L.t = R.t", (0, 0)),  # equal time attributes: an interval of width zero
        ("L.t = R.t + INTERVAL '1' HOUR AND L.k = R.k", (HOUR, HOUR)),
    ],
)
def test_bounds_on_the_difference_of_the_time_attributes(condition, expected) -> None:
    assert bounds(condition) == expected


def test_other_conjuncts_stay_in_the_residual_and_equalities_in_the_key() -> None:
    found = split_interval(
        parse_condition(
            "L.id = R.id AND L.amount > R.minimum AND L.ts BETWEEN R.ts - INTERVAL '1' HOUR "
            "AND R.ts"
        ),
        "ts",
        "ts",
    )
    assert found.condition.equi == (("id", "id"),)
    assert found.condition.residual.sql() == "L.amount > R.minimum"


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ("L.k = R.k AND L.t >= R.t", "needs a lower and an upper bound"),
        ("L.k = R.k", "needs a lower and an upper bound"),
        ("L.t BETWEEN R.t - INTERVAL '1' FORTNIGHT AND R.t", "expected INTERVAL"),
    ],
)
def test_conditions_without_usable_bounds_are_refused(condition, message) -> None:
    with pytest.raises(ConditionError, match=message):
        bounds(condition)


def test_equal_time_attributes_are_no_join_key() -> None:
    found = split_interval(parse_condition("L.k IS NOT DISTINCT FROM R.k AND L.t = R.t"), "t", "t")
    assert found.condition.equi == (("k", "k"),) and found.condition.null_safe == {0}
