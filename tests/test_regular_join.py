"""The regular join's semantics, in plain Python: Flink's accumulate/retract rules per layout.

No Spark here: these run in milliseconds. Rows are tuples in the declared column order.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from state.joins.regular_join import LEFT, RIGHT, Change
from state.joins.specs import RegularJoinSpec, SideSpec
from state.joins.views import MultisetView, SingleRowView, UniqueKeyView, new_view
from state.store.retention import InputRetentions, Retention

ORDERS = SideSpec(("order_id", "product_id", "qty"), ("order_id",))
PRODUCTS = SideSpec(("product_id", "stock"), ("product_id",))


class Join:
    """One join key's state and operator, fed change by change."""

    def __init__(
        self,
        kind: str,
        on: str = "L.product_id = R.product_id",
        left: SideSpec = ORDERS,
        right: SideSpec = PRODUCTS,
    ) -> None:
        self.spec = RegularJoinSpec(kind, on, left, right)
        self.operator = self.spec.operator()
        self.views = self.spec.new_views()

    def __call__(self, side: int, op: str, *row: object) -> list[tuple]:
        changes = self.operator.process(side, op, tuple(row), self.views)
        return [(c.kind, c.left, c.right) for c in changes]


O1 = ("o1", "p1", 2)
O2 = ("o2", "p1", 5)
P1 = ("p1", 3)
P1_MORE = ("p1", 10)


def test_layouts_are_chosen_from_the_unique_key_as_flink_does() -> None:
    assert isinstance(new_view(["product_id"], PRODUCTS.fields, ["product_id"]), SingleRowView)
    assert isinstance(new_view(["product_id"], ORDERS.fields, ["order_id"]), UniqueKeyView)
    assert isinstance(new_view(["product_id"], ORDERS.fields, []), MultisetView)


def test_inner_join_passes_the_change_kinds_through() -> None:
    join = Join("inner")
    assert join(LEFT, "+I", *O1) == []
    assert join(RIGHT, "+I", *P1) == [("+I", O1, P1)]
    assert join(RIGHT, "-U", *P1) == [("-U", O1, P1)]
    assert join(RIGHT, "+U", *P1_MORE) == [("+U", O1, P1_MORE)]
    assert join(LEFT, "-D", *O1) == [("-D", O1, P1_MORE)]
    assert len(join.views[LEFT]) == 0 and len(join.views[RIGHT]) == 1


def test_left_join_pads_until_the_first_match_and_again_after_the_last() -> None:
    join = Join("left")
    assert join(LEFT, "+I", *O1) == [("+I", O1, None)]
    assert join(RIGHT, "+I", *P1) == [("-D", O1, None), ("+I", O1, P1)]
    assert list(join.views[LEFT].records()) == [(O1, 1)]
    # The inner side's retraction keeps its kind (Flink forwards -U unless the input is outer);
    # accumulations on an outer join are always +I.
    assert join(RIGHT, "-U", *P1) == [("-U", O1, P1), ("+I", O1, None)]
    assert join(RIGHT, "+U", *P1_MORE) == [("-D", O1, None), ("+I", O1, P1_MORE)]
    assert join(RIGHT, "-D", *P1_MORE) == [("-D", O1, P1_MORE), ("+I", O1, None)]
    assert list(join.views[LEFT].records()) == [(O1, 0)]
    assert join(LEFT, "-D", *O1) == [("-D", O1, None)]


def test_association_counts_track_several_matches() -> None:
    join = Join("right")
    assert join(RIGHT, "+I", *P1) == [("+I", None, P1)]
    assert join(LEFT, "+I", *O1) == [("-D", None, P1), ("+I", O1, P1)]
    assert join(LEFT, "+I", *O2) == [("+I", O2, P1)]  # already matched: no padding to retract
    assert list(join.views[RIGHT].records()) == [(P1, 2)]
    assert join(LEFT, "-D", *O1) == [("-D", O1, P1)]
    assert join(LEFT, "-D", *O2) == [("-D", O2, P1), ("+I", None, P1)]
    assert list(join.views[RIGHT].records()) == [(P1, 0)]


def test_full_join_pads_both_sides() -> None:
    join = Join("full")
    assert join(LEFT, "+I", *O1) == [("+I", O1, None)]
    assert join(RIGHT, "+I", *P1) == [("-D", O1, None), ("+I", O1, P1)]
    assert join(LEFT, "-D", *O1) == [("-D", O1, P1), ("+I", None, P1)]


def test_residual_condition_decides_each_pair() -> None:
    join = Join("left", "L.product_id = R.product_id AND L.qty <= R.stock")
    assert join(RIGHT, "+I", *P1) == []
    assert join(LEFT, "+I", *O2) == [("+I", O2, None)]  # 5 <= 3 is false
    assert join(LEFT, "+I", *O1) == [("+I", O1, P1)]  # 2 <= 3
    assert join(RIGHT, "-U", *P1) == [("-U", O1, P1), ("+I", O1, None)]
    assert join(RIGHT, "+U", *P1_MORE) == [
        ("-D", O2, None),
        ("+I", O2, P1_MORE),
        ("-D", O1, None),
        ("+I", O1, P1_MORE),
    ]


def test_null_keys_never_match_but_outer_rows_are_padded() -> None:
    join = Join("full")
    assert join(LEFT, "+I", "o9", None, 1) == [("+I", ("o9", None, 1), None)]
    assert join(RIGHT, "+I", None, 7) == [("+I", None, (None, 7))]


def test_without_unique_key_copies_each_join() -> None:
    join = Join("inner", left=SideSpec(ORDERS.fields), right=SideSpec(PRODUCTS.fields))
    join(LEFT, "+I", *O1)
    join(LEFT, "+I", *O1)
    assert join(RIGHT, "+I", *P1) == [("+I", O1, P1), ("+I", O1, P1)]
    assert join(LEFT, "-D", *O1) == [("-D", O1, P1)]
    assert len(join.views[LEFT]) == 1


def test_semi_join_emits_left_rows_while_they_have_a_match() -> None:
    join = Join("semi")
    assert join(LEFT, "+I", *O1) == []
    assert join(RIGHT, "+I", *P1) == [("+I", O1, None)]
    assert join(LEFT, "+I", *O2) == [("+I", O2, None)]
    assert join(RIGHT, "-D", *P1) == [("-D", O1, None), ("-D", O2, None)]


def test_anti_join_emits_left_rows_while_they_have_no_match() -> None:
    join = Join("anti")
    assert join(LEFT, "+I", *O1) == [("+I", O1, None)]
    assert join(RIGHT, "+I", *P1) == [("-D", O1, None)]
    assert join(LEFT, "+I", *O2) == []
    assert join(RIGHT, "-D", *P1) == [("+I", O1, None), ("+I", O2, None)]


def materialize(changes: list[Change]) -> Counter:
    table: Counter = Counter()
    for c in changes:
        table[(c.left, c.right)] += 1 if c.kind in ("+I", "+U") else -1
    return +table


def batch_join(kind: str, left: list[tuple], right: list[tuple], matches) -> Counter:
    """The join of the final tables, computed the plain way."""
    table: Counter = Counter()
    for lrow in left:
        found = [r for r in right if matches(lrow, r)]
        if kind in ("semi", "anti"):
            if bool(found) == (kind == "semi"):
                table[(lrow, None)] += 1
            continue
        table.update((lrow, r) for r in found)
        if not found and kind in ("left", "full"):
            table[(lrow, None)] += 1
    if kind in ("right", "full"):
        table.update((None, r) for r in right if not any(matches(lrow, r) for lrow in left))
    return table


def random_changelog(rng: random.Random, side: int, ids: int) -> list[tuple[int, str, tuple]]:
    """A consistent changelog of one key: every -U/-D retracts a row that is present."""
    live: dict[str, tuple] = {}
    out = []
    for _ in range(rng.randint(5, 25)):
        rid = f"{side}:{rng.randrange(ids)}"
        row = (rid, "k", rng.randint(0, 5))
        if rid in live and rng.random() < 0.5:
            out += [(side, "-U", live[rid]), (side, "+U", row)]
            live[rid] = row
        elif rid in live:
            out.append((side, "-D", live.pop(rid)))
        else:
            out.append((side, "+I", row))
            live[rid] = row
    return out


@pytest.mark.parametrize("kind", ["inner", "left", "right", "full", "semi", "anti"])
@pytest.mark.parametrize(
    ("unique_key", "ids"), [(("k",), 1), (("id",), 4), ((), 4)], ids=["single", "map", "multiset"]
)
def test_materialized_output_equals_the_join_of_the_final_tables(
    kind: str, unique_key: tuple[str, ...], ids: int
) -> None:
    side_l = SideSpec(("id", "k", "x"), unique_key)
    side_r = SideSpec(("id", "k", "y"), unique_key)
    rng = random.Random(f"{kind}-{unique_key}")
    for _ in range(40):
        join = Join(kind, "L.k = R.k AND L.x <= R.y", side_l, side_r)
        pending = [random_changelog(rng, LEFT, ids), random_changelog(rng, RIGHT, ids)]
        events = []  # the two sides interleaved at random, each in its own order
        while pending[0] or pending[1]:
            side = LEFT if rng.random() * sum(map(len, pending)) < len(pending[0]) else RIGHT
            events.append(pending[side].pop(0))
        finals: tuple[Counter, Counter] = (Counter(), Counter())
        changes: list[Change] = []
        for side, op, row in events:
            changes += join.operator.process(side, op, row, join.views)
            finals[side][row] += 1 if op in ("+I", "+U") else -1
        left, right = (list((+f).elements()) for f in finals)
        assert materialize(changes) == batch_join(kind, left, right, join.spec.matcher())


def test_state_ttl_expires_each_row_on_its_own_though_its_key_keeps_getting_rows() -> None:
    """Flink's `table.exec.state.ttl`: a row goes once not written for the TTL, whatever its key
    does; an expired row is never seen again (the product is forgotten: later orders are padded;
    the orders joined before it went keep their association count, as in Flink)."""
    retention = Retention(ttl_ms=120_000)
    join = Join("left")
    join.views = join.spec.new_views((retention, retention))
    retention.at(0)
    assert join(RIGHT, "+I", *P1) == []
    retention.at(50_000)
    assert join(LEFT, "+I", *O1) == [("+I", O1, P1)]
    retention.at(130_000)  # the product, written at 0, has expired; O1 (at 50 s) has not
    assert join(LEFT, "+I", *O2) == [("+I", O2, None)]
    retention.at(175_000)  # O1 expires now; O2 lives until 250 s
    assert join(RIGHT, "+I", *P1_MORE) == [("-D", O2, None), ("+I", O2, P1_MORE)]
    for view in join.views:
        view.prune()
    assert [len(view) for view in join.views] == [1, 1]  # O2 and the new product only


def test_each_input_keeps_its_rows_for_its_own_ttl() -> None:
    """Flink's STATE_TTL hint: the orders for 2 minutes, the products for ever ('0'). The order
    goes while its product stays: the product's update then changes no row, and a new order
    still finds the product (under one TTL for both it would be padded)."""
    retentions = InputRetentions((120_000, 0))
    join = Join("left")
    join.views = join.spec.new_views(retentions.each)
    retentions.at(0)
    assert join(RIGHT, "+I", *P1) == []
    assert join(LEFT, "+I", *O1) == [("+I", O1, P1)]
    retentions.at(130_000)
    assert join(RIGHT, "-U", *P1) == []
    assert join(RIGHT, "+U", *P1_MORE) == []
    retentions.at(10**9)
    assert join(LEFT, "+I", *O2) == [("+I", O2, P1_MORE)]
    for view in join.views:
        view.prune()
    assert [len(view) for view in join.views] == [1, 1]


def test_a_row_whose_association_count_changes_is_written_and_lives_on() -> None:
    """Flink writes an outer row whenever its association count changes, so that refreshes its
    time to live as an insert would."""
    retention = Retention(ttl_ms=100)
    join = Join("left")
    join.views = join.spec.new_views((retention, retention))
    retention.at(0)
    join(LEFT, "+I", *O1)
    retention.at(90)
    join(RIGHT, "+I", *P1)  # O1's count goes 0 -> 1: written at 90
    retention.at(150)
    assert join(RIGHT, "-D", *P1) == [("-D", O1, P1), ("+I", O1, None)]
