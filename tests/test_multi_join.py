"""The multi-way join's semantics, in plain Python: one operator over several inputs' rows
gives the chain of joins' results (`state.joins.multi_join`), the chain being our `RegularJoin`s,
each equal to Flink's (the replay fixtures).

No Spark here: these run in milliseconds. Rows are tuples in the declared column order.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from state.changes import Change, RowKind
from state.joins.specs import MultiJoinSpec, RegularJoinSpec, SideSpec
from tests.test_regular_join import random_changelog

# Users, their orders, their payments: rows `(id, k, score)` of one user `k`
USERS = SideSpec(("id", "k", "score"), ("id",))
ORDERS = SideSpec(("id", "k", "score"), ("id",))
PAYMENTS = SideSpec(("id", "k", "score"), ())  # no unique key: a multiset


def chain_specs(kinds: tuple[str, str], residual: str = "") -> MultiJoinSpec:
    """Users ⋈ Orders ⋈ Payments on the user, as the chain's two joins see their inputs."""
    combined = SideSpec(("t0_id", "t0_k", "t0_score", "t1_id", "t1_k", "t1_score"))
    first = RegularJoinSpec(kinds[0], "L.k = R.k", USERS, ORDERS)
    second = RegularJoinSpec(kinds[1], "L.t1_k = R.k" + residual, combined, PAYMENTS)
    return MultiJoinSpec((first, second), ("k", "k", "k"))


def chained(spec: MultiJoinSpec, events: list[tuple[int, str, tuple]]) -> list[Change]:
    """The events through the chain of two `RegularJoin`s: the first's output, flattened, is
    the second's left input."""
    first, second = (join.operator() for join in spec.joins)
    views = [join.new_views() for join in spec.joins]
    out: list[Change] = []
    for side, op, row in events:
        if side == 2:
            out += second.process(1, op, row, views[1])
            continue
        for change in first.process(side, op, row, views[0]):
            flat = (change.left or (None,) * 3) + (change.right or (None,) * 3)
            out += second.process(0, change.kind, flat, views[1])
    return out


def multi(spec: MultiJoinSpec, events: list[tuple[int, str, tuple]]) -> list[Change]:
    join, views = spec.operator(), spec.new_views()
    return [c for side, op, row in events for c in join.process(side, op, row, views)]


def materialized(changes: list[Change]) -> Counter:
    table: Counter = Counter()
    for change in changes:
        table[(change.left, change.right)] += 1 if change.kind in RowKind.ACCUMULATE else -1
    return table


@pytest.mark.parametrize(
    "kinds", [("inner", "inner"), ("left", "left"), ("inner", "left"), ("left", "inner")]
)
@pytest.mark.parametrize("residual", ["", " AND L.t0_score > R.score"], ids=["equi", "residual"])
def test_one_operator_over_the_inputs_rows_ends_where_the_chain_of_joins_ends(
    kinds: tuple[str, str], residual: str
) -> None:
    rng = random.Random(f"{kinds}{residual}")
    spec = chain_specs(kinds, residual)
    for _ in range(60):
        pending = [random_changelog(rng, side, 2 if side == 0 else 4) for side in range(3)]
        events = []  # the inputs interleaved at random, each in its own order
        while any(pending):
            side = rng.choice([s for s in range(3) if pending[s]])
            events.append(pending[side].pop(0))
        ours = materialized(multi(spec, events))
        assert +ours == +materialized(chained(spec, events)), events
        assert -ours == Counter(), events  # nothing retracted that was not emitted


def test_an_inner_chain_passes_the_change_kinds_through_and_a_left_one_pads() -> None:
    inner = chain_specs(("inner", "inner"))
    join, views = inner.operator(), inner.new_views()
    user, order, payment = ("u1", "k", 1), ("o1", "k", 2), ("p1", "k", 3)
    assert join.process(0, "+I", user, views) == []
    assert join.process(1, "+I", order, views) == []
    assert join.process(2, "+I", payment, views) == [Change("+I", user + order, payment)]
    assert join.process(1, "-U", order, views) == [Change("-U", user + order, payment)]
    left = chain_specs(("left", "left"))
    join, views = left.operator(), left.new_views()
    padded = (None, None, None)
    assert join.process(0, "+I", user, views) == [Change("+I", user + padded, None)]
    assert join.process(2, "+I", payment, views) == []  # no order: nothing joins it yet
    assert join.process(1, "+I", order, views) == [
        Change("-D", user + padded, None),
        Change("+I", user + order, payment),
    ]
    assert join.process(2, "-D", payment, views) == [
        Change("-D", user + order, payment),
        Change("+I", user + order, None),
    ]
    assert join.process(2, "-D", payment, views) == []  # nothing held to retract


@pytest.mark.parametrize("kinds", [("inner", "inner"), ("inner", "left")])
def test_a_joins_equalities_beside_the_shared_key_still_decide_its_matches(
    kinds: tuple[str, str],
) -> None:
    """`… JOIN payments ON L.t1_k = R.k AND L.t1_score = R.score`: the operator's rows share
    the user `k` only, so the score's equality must still be tested; a NULL score matches
    nothing, and `IS NOT DISTINCT FROM` matches NULL with NULL."""
    user, order, payment = ("u1", "k", 1), ("o1", "k", 2), ("p1", "k", 2)
    for equality, null_matches in (("=", False), ("IS NOT DISTINCT FROM", True)):
        first, second = chain_specs(kinds).joins
        second = RegularJoinSpec(
            kinds[1], f"L.t1_k = R.k AND L.t1_score {equality} R.score", second.left, PAYMENTS
        )
        spec = MultiJoinSpec((first, second), ("k", "k", "k"))
        join, views = spec.operator(), spec.new_views()
        join.process(0, "+I", user, views)
        join.process(1, "+I", order, views)
        other = join.process(2, "+I", ("p0", "k", 3), views)  # another score: no match
        assert [c for c in other if c.kind == "+I"] == []
        assert join.process(2, "+I", payment, views)[-1] == Change("+I", user + order, payment)
        join.process(1, "+I", ("o2", "k", None), views)
        nulls = join.process(2, "+I", ("p2", "k", None), views)
        expected = [Change("+I", (*user, "o2", "k", None), ("p2", "k", None))]
        assert [c for c in nulls if c.kind == "+I"] == (expected if null_matches else [])
