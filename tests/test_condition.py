"""Join conditions: split into key and residual like Flink's planner, evaluated like SQL."""

from __future__ import annotations

from decimal import Decimal

import pytest

from state.condition import ConditionError, compile_predicate, parse_condition, split_condition


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
    ("text", "message"),
    [
        ("L.a = = R.b", ">>=<<"),
        ("L.a = b", "must be qualified by L. (left) or R. (right)"),
        ("L.nope = R.b", "the left input has no column 'nope'"),
        ("L.a = UPPER(R.b)", "cannot evaluate 'UPPER(R.b)'"),
    ],
)
def test_errors_point_at_the_part(text: str, message: str) -> None:
    with pytest.raises(ConditionError, match=None) as caught:
        predicate(text)
    assert message in str(caught.value)
