"""The lookup join's semantics without a database: caches, pushed-down filters, the join."""

from __future__ import annotations

import pytest

from serdes.postgres.client import TableLookup, flink_type
from state.expr.condition import ConditionError, parse_condition, split_condition
from state.joins.lookup_join import (
    CacheSettings,
    FullCache,
    LookupJoin,
    LookupJoinSpec,
    PartialCache,
    split_residual,
)
from state.joins.specs import SideSpec


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_partial_cache_expires_entries_after_write_and_after_access() -> None:
    clock = FakeTime()
    written = PartialCache(CacheSettings("PARTIAL", expire_after_write_s=10), clock)
    written.put(("p1",), [("p1", 1)])
    clock.now = 9.9
    assert written.get(("p1",)) == [("p1", 1)]
    clock.now = 10.0
    assert written.get(("p1",)) is None  # read or not, 10 s after it was written

    accessed = PartialCache(CacheSettings("PARTIAL", expire_after_access_s=10), clock)
    accessed.put(("p1",), [("p1", 1)])
    for now in (19.0, 28.0, 37.0):  # each read keeps it
        clock.now = now
        assert accessed.get(("p1",)) == [("p1", 1)]
    clock.now = 47.0
    assert accessed.get(("p1",)) is None


def test_a_partial_cache_evicts_the_least_recently_used_key_and_may_skip_missing_keys() -> None:
    cache = PartialCache(CacheSettings("PARTIAL", max_rows=2), FakeTime())
    cache.put(("a",), [("a",)])
    cache.put(("b",), [("b",)])
    assert cache.get(("a",)) == [("a",)]  # now b is the least recently used
    cache.put(("c",), [])  # a missing key is cached: no query next time
    assert cache.get(("b",)) is None and cache.get(("c",)) == [] and cache.get(("a",))

    uncached = PartialCache(CacheSettings("PARTIAL", cache_missing_key=False), FakeTime())
    uncached.put(("c",), [])
    assert uncached.get(("c",)) is None


def test_a_full_cache_answers_every_key_and_reloads_after_its_interval() -> None:
    clock, loads = FakeTime(), []

    def load() -> dict:
        loads.append(clock.now)
        return {("p1",): [("p1", len(loads))]}

    cache = FullCache(CacheSettings("FULL", reload_interval_s=60), load, clock)
    assert cache.get(("p1",)) == [("p1", 1)] and cache.get(("p9",)) == []
    clock.now = 59
    assert cache.get(("p1",)) == [("p1", 1)]
    clock.now = 60
    assert cache.get(("p1",)) == [("p1", 2)] and loads == [0, 60]


def test_conditions_on_the_table_alone_are_pushed_down_and_the_rest_evaluated_after() -> None:
    condition = (
        "L.pid = R.pid AND R.category = 'toys' AND 5 < R.price AND R.stock IS NOT NULL"
        " AND R.size IN (1, 2) AND R.price BETWEEN 1 AND 9.5 AND L.qty > R.stock"
        " AND UPPER(R.name) = 'KITE'"
    )
    split = split_residual(split_condition(parse_condition(condition)).residual)
    assert [(f.column, f.operator, f.values) for f in split.pushed] == [
        ("category", "=", ("toys",)),
        ("price", ">", (5,)),
        ("stock", "IS NOT NULL", ()),
        ("size", "IN", (1, 2)),
        ("price", "BETWEEN", (1, 9.5)),
    ]
    assert split.after is not None
    assert split.after.sql() == "L.qty > R.stock AND UPPER(R.name) = 'KITE'"


def test_queries_take_every_value_as_a_parameter() -> None:
    pushed = split_residual(parse_condition("R.category = 'x\\'' OR 1=1 --'")).pushed
    one = TableLookup(
        "postgresql://u@h/db",
        "shop.products",
        ("pid", "name", "category"),
        ("pid",),
        ("text",),
        pushed,
    )
    assert one.batch_query() == (
        'SELECT t."pid", t."name", t."category" FROM "shop"."products" AS t '
        'WHERE t."pid" = ANY($1::text[]) AND "category" = $2'
    )
    assert one.key_query() == (
        'SELECT "pid", "name", "category" FROM "shop"."products" WHERE "pid" = $1 AND '
        '"category" = $2'
    )
    assert one.parameters() == ["x\\' OR 1=1 --"]
    two = TableLookup(
        "postgresql://u@h/db", "t", ("a", "b", "v"), ("a", "b"), ("integer", "character varying(8)")
    )
    assert two.batch_query() == (
        'SELECT t."a", t."b", t."v" FROM "t" AS t JOIN unnest($1::integer[], '
        '$2::character varying(8)[]) AS k(k0, k1) ON t."a" = k.k0 AND t."b" = k.k1'
    )
    assert "password" not in repr(
        TableLookup("postgresql://u@h/db", "t", ("a",), ("a",), ("text",), password="hunter2")
    )


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_each_left_row_joins_every_matching_table_row(kind: str) -> None:
    join = LookupJoin(
        kind, ("pid",), ("oid", "pid", "qty"), ("pid", "stock"), parse_condition("L.qty <= R.stock")
    )
    found = {("p1",): [("p1", 5), ("p1", 50)], ("p2",): [("p2", 1)]}
    lefts = [("o1", "p1", 10), ("o2", "p2", 3), ("o3", None, 1), ("o4", "p9", 1)]
    keys = join.keys([[left[1] for left in lefts]])
    assert keys == [("p1",), ("p2",), None, ("p9",)]
    indices, rights = join.matches(keys, found, lefts)
    joined = [(lefts[at], right) for at, right in zip(indices, rights, strict=True)]
    matched = [(("o1", "p1", 10), ("p1", 50))]
    padded = [(("o2", "p2", 3), None), (("o3", None, 1), None), (("o4", "p9", 1), None)]
    assert joined == (matched if kind == "inner" else [matched[0], *padded])


def test_a_key_with_a_null_part_matches_nothing_and_every_match_is_emitted() -> None:
    join = LookupJoin("inner", ("a", "b"), ("a", "b"), ("a", "b", "v"))
    keys = join.keys([[1, 1, None], ["x", None, "x"]])
    assert keys == [(1, "x"), None, None]
    found = {(1, "x"): [(1, "x", "v1"), (1, "x", "v2")]}
    assert join.matches(keys, found) == ([0, 0], [(1, "x", "v1"), (1, "x", "v2")])


def test_a_condition_naming_no_table_column_is_refused() -> None:
    spec = LookupJoinSpec(
        "inner",
        "L.pid = R.pid AND R.colour = 'red'",
        SideSpec(("oid", "pid")),
        SideSpec(("pid", "name")),
    )
    with pytest.raises(ConditionError, match=r"'R\.colour': the table has no column 'colour'"):
        spec.operator()


def test_the_tables_types_map_to_flink_types() -> None:
    assert [
        flink_type(t)
        for t in (
            "integer",
            "numeric(10,2)",
            "character varying(20)",
            "timestamp(3) with time zone",
            "uuid",
        )
    ] == ["INT", "DECIMAL(10,2)", "STRING", "TIMESTAMP_LTZ(6)", None]


def test_a_key_computed_from_the_left_row_is_looked_up_as_flink_computes_it() -> None:
    """`L.k + 1 = R.id`, `UPPER(L.code) = R.code`: Flink computes the key from the left row
    before its lookup; the rest of the condition stays as it was."""
    left, right = SideSpec(("oid", "k", "code", "x")), SideSpec(("id", "code", "n"))
    spec = LookupJoinSpec(
        "left", "L.k + 1 = R.id AND UPPER(L.code) = R.code AND L.x > R.n AND R.n <> 0", left, right
    )
    assert [(value.sql(), column) for value, column in spec.keys] == [
        ("L.k + 1", "id"),
        ("UPPER(L.code)", "code"),
    ]
    assert [f.column for f in spec.residual.pushed] == ["n"]
    join = spec.operator()
    lefts = [(1, 1, "a", 5), (2, None, "a", 5), (3, 2, None, 5), (4, 1, "b", 0)]
    keys = join.computed_keys(lefts)
    assert keys == [(2, "A"), None, None, (2, "B")]
    found = {(2, "A"): [(2, "A", 3), (2, "A", 9)], (2, "B"): [(2, "B", 1)]}
    indices, rights = join.matches(keys, found, lefts)
    assert list(zip(indices, rights, strict=True)) == [
        (0, (2, "A", 3)),
        (1, None),
        (2, None),
        (3, None),
    ]


def test_a_key_computed_from_a_column_the_left_lacks_is_refused() -> None:
    spec = LookupJoinSpec("inner", "L.nope * 2 = R.id", SideSpec(("k",)), SideSpec(("id",)))
    with pytest.raises(ConditionError, match="nope"):
        spec.operator()
