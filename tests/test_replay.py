"""`streamjoin replay` against Flink's own answers (committed fixtures; no Flink in CI)."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from app.config.windows import windowing
from app.plan.planner import query_plan
from app.replay import case_config, load_cases, render, replay, run_case, sql_join
from state.store.encoding import load, load_entry
from state.store.parked import PARK_FROM_ROWS

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"


def flink_finals(name: str) -> dict[str, list]:
    lines = (json.loads(line) for line in (FIXTURES / name).read_text().splitlines())
    return {d["case"]: d["final"] for d in lines if "final" in d}


def changelogs(lines: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """Each case's changes (kind, row), in the order they came."""
    found: dict[str, list[tuple[str, str]]] = {}
    for d in lines:
        if "op" in d:
            found.setdefault(d["case"], []).append((d["op"], json.dumps(d["row"], sort_keys=True)))
    return found


def retractions_of_rows_not_live(changes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The retractions (-U, -D) of a changelog that remove no row still live: none, for a
    changelog a consumer can apply row by row."""
    live: Counter[str] = Counter()
    wrong = []
    for op, row in changes:
        if op in ("+I", "+U"):
            live[row] += 1
        elif live[row] > 0:
            live[row] -= 1
        else:
            wrong.append((op, row))
    return wrong


def assert_changelogs_as_flinks(lines: list[dict], cases: list[dict], flink: str) -> None:
    """Each case's changelog, not only where it ends: every retraction through the chain
    removes a row it emitted before; where Flink's changelog does not depend on how its inputs
    interleave (joins in time only, their results emitted as the watermark passes), the same
    changes as Flink's. A regular join's changes between the first and the last depend on the
    order its inputs arrive in, which differs run to run in Flink too."""
    ours = changelogs(lines)
    theirs = changelogs([json.loads(line) for line in (FIXTURES / flink).read_text().splitlines()])
    for case in cases:
        assert retractions_of_rows_not_live(ours.get(case["id"], [])) == [], case["id"]
        plan = query_plan(case_config(case | {"join": sql_join(case)}))
        if all(stage.join.type != "regular" for stage in plan.stages):
            assert Counter(ours[case["id"]]) == Counter(theirs[case["id"]]), case["id"]


def cases_of_type(join_type: str) -> list[dict]:
    found = []
    for name in (
        "golden_cases.json",
        "a_regular.json",
        "regular_more.json",
        "b_interval.json",
        "c_temporal.json",
    ):
        found += [c for c in load_cases(FIXTURES / name) if c["join"]["type"] == join_type]
    return found


def run(spark, cases: list[dict], tmp_path: Path) -> tuple[int, list[dict]]:
    """Replay `cases`, four at a time (as `streamjoin replay --parallel 4`): a case's
    micro-batches leave the cores idle for much of their time (docs/performance.md)."""
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    out = io.StringIO()
    code = replay(spark, [path], out, materialize=True, parallel=4)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_regular_joins_end_in_flinks_final_tables(spark, tmp_path: Path) -> None:
    cases = cases_of_type("regular")
    assert {c["join"]["kind"] for c in cases} == {"INNER", "LEFT", "RIGHT", "FULL"}
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    ours = {d["case"]: d["final"] for d in lines if "final" in d}
    flink = (
        flink_finals("golden_flink.jsonl")
        | flink_finals("a_regular.jsonl")
        | flink_finals("regular_more.jsonl")
    )
    assert set(ours) == {c["id"] for c in cases}
    for case_id, final in ours.items():
        assert final == flink[case_id], case_id


def test_chains_of_joins_over_three_and_four_tables_end_in_flinks_final_tables(
    spark, tmp_path: Path
) -> None:
    """Flink's multi-way join operator tests' inputs (a three-way LEFT chain, a four-way
    LEFT/INNER/LEFT chain with a non-equi condition and a keyless table), chains of INNER,
    LEFT, RIGHT and FULL joins over changelogs, a WHERE and an ON condition of the first join,
    one table joined under two aliases, two rowtimes compared after a regular join (a plain
    condition there), an event-time temporal join written after a regular one; joins over a time
    join's result (temporal after temporal, interval, regular; interval after temporal and
    interval), the left's rowtime kept, or carried as a value by a regular join; IN and NOT
    EXISTS beside a chain (a semi and an anti join of its result); a LEFT join nested in an
    INNER one: each as SQL,
    equal to Flink 2.3's final table (the regular chains' also Flink's with
    `table.optimizer.multi-join.enabled`)."""
    cases = load_cases(FIXTURES / "multi_join.json")
    assert {len(c["streams"]) for c in cases} == {2, 3, 4}  # one table twice: two streams
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    ours = {d["case"]: d["final"] for d in lines if "final" in d}
    assert ours == flink_finals("multi_join.jsonl")
    assert_changelogs_as_flinks(lines, cases, "multi_join.jsonl")


def test_a_where_after_outer_joins_filters_their_rows_as_flinks(spark, tmp_path: Path) -> None:
    """A WHERE after LEFT, RIGHT and FULL joins, of their padded rows and of their matches,
    over changelogs whose updates cross the filter's bounds; after chains of two joins, beside
    an IN; after an interval and an event-time temporal LEFT join: Flink 2.3's final tables,
    and the time joins' very changes; every retraction removes a row emitted before."""
    cases = load_cases(FIXTURES / "where_after_outer.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    ours = {d["case"]: d["final"] for d in lines if "final" in d}
    assert ours == flink_finals("where_after_outer.jsonl")
    assert_changelogs_as_flinks(lines, cases, "where_after_outer.jsonl")


def test_a_decimal_and_a_date_are_printed_as_the_oracle_prints_them() -> None:
    """As Flink's CAST to STRING writes a DECIMAL, which the oracle prints: a DECIMAL(23, 13)
    zero and a small quotient in plain digits (Python wrote `0E-13`, which compared unequal);
    a DATE as ISO text (the replay stopped on it)."""
    values = [Decimal("0E-13"), Decimal("3.333E-10"), date(2024, 3, 1)]
    assert [render(v) for v in values] == ["0.0000000000000", "0.0000000003333", "2024-03-01"]


def test_keys_of_different_number_types_join_as_flink_compares_them(spark, tmp_path: Path) -> None:
    """`L.k = R.k` of an INT and a DOUBLE, a BIGINT, a DECIMAL, in a regular, an interval, a
    chain of joins and a multi-way join: compared in the wider type, as Flink does, where the
    right's key was cast to the left's: 1.5 joined 1, and 2^32 + 1, beyond an INT, failed the
    query. Equal to Flink 2.3's final tables."""
    cases = load_cases(FIXTURES / "key_types.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    assert {d["case"]: d["final"] for d in lines if "final" in d} == flink_finals("key_types.jsonl")


def test_a_conditions_whole_number_arithmetic_wraps_as_flinks(spark, tmp_path: Path) -> None:
    """An INT product, a BIGINT difference, the sum of two INTs of a chain's first join in the
    second's condition, and an INT product in an interval join's condition, beyond their type:
    wrapped at its width as Flink's Java wraps them, where Python's numbers grew, and joined
    other rows. Equal to Flink 2.3's final tables."""
    cases = load_cases(FIXTURES / "whole_number_overflow.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    finals = {d["case"]: d["final"] for d in lines if "final" in d}
    assert finals == flink_finals("whole_number_overflow.jsonl")


def test_a_time_literal_in_a_condition_compares_as_flinks(spark, tmp_path: Path) -> None:
    """`R.shiptime < TIMESTAMP '1970-01-01 06:00:00'` beside an interval join's bounds, in a
    regular join's BETWEEN, `<>` and an OR, over INNER, LEFT and FULL joins: compared with each
    row's time in the session's zone (UTC). Equal to Flink 2.3's final tables."""
    cases = load_cases(FIXTURES / "time_literals.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    finals = {d["case"]: d["final"] for d in lines if "final" in d}
    assert finals == flink_finals("time_literals.jsonl")


def test_derived_tables_in_from_join_as_flinks_subqueries(spark, tmp_path: Path) -> None:
    """`(SELECT … FROM t WHERE …) AS a` in FROM: its filter on an inner join's input, an outer
    join's padded and kept inputs, a FULL join's inputs, a derived table of a derived table,
    `SELECT *`, its computed columns NULL on the rows an outer join pads (a CASE, a COALESCE, a
    literal), in regular, interval and temporal joins, and in an `EXISTS` subquery's condition.
    Equal to Flink 2.3's final tables."""
    cases = load_cases(FIXTURES / "derived_tables.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    finals = {d["case"]: d["final"] for d in lines if "final" in d}
    assert finals == flink_finals("derived_tables.jsonl")


def test_a_correlated_subquerys_nulls_are_flinks(spark, tmp_path: Path) -> None:
    """`EXISTS`, `NOT EXISTS` and `IN (SELECT …)` whose WHERE relates the outer row to the
    subquery's by more than an equality (`IS NOT DISTINCT FROM`, an OR, a CASE, a comparison):
    an outer row NULL in a column such a condition names meets no row, as Flink decorrelates
    it; over one table, after a join and in a window join. Equal to Flink 2.3's final
    tables."""
    cases = load_cases(FIXTURES / "correlated_subqueries.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    finals = {d["case"]: d["final"] for d in lines if "final" in d}
    assert finals == flink_finals("correlated_subqueries.jsonl")


def test_flinks_multi_join_option_runs_one_operator_with_the_chains_final_tables(
    spark, tmp_path: Path
) -> None:
    """The same cases with `table.optimizer.multi-join.enabled`: the chains of INNER and LEFT
    joins over one shared key (Flink's multi-way join operator tests' inputs among them, and
    joins that compare another column beside it) run as one operator, with Flink's final
    tables; the others stay chains (run as such above)."""
    flink = flink_finals("multi_join.jsonl")
    option = {"flink_conf": {"table.optimizer.multi-join.enabled": "true"}}
    cases = [c | {"options": option} for c in load_cases(FIXTURES / "multi_join.json")]
    cases = [c for c in cases if query_plan(case_config(c | {"join": sql_join(c)})).multi_way]
    assert [c["id"] for c in cases] == [
        "flink_three_way_left_outer",
        "flink_four_way_mixed",
        "rowtimes_after_a_regular_join",
        "two_equalities_in_the_first_join",
        "two_equalities_in_the_second_join",
    ]
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    assert {d["case"]: d["final"] for d in lines if "final" in d} == {
        c["id"]: flink[c["id"]] for c in cases
    }
    assert_changelogs_as_flinks(lines, cases, "multi_join.jsonl")


def test_mini_batch_joins_end_in_flinks_final_tables_with_fewer_changes(
    spark, tmp_path: Path
) -> None:
    """With Flink's `table.exec.mini-batch.enabled` each key's changes of a micro-batch are
    folded per input before the join (`state.joins.mini_batch`): a regular join of each kind
    and the chains of Flink's multi-way join tests end in Flink's final tables, every
    retraction removes a row emitted before, and the chains pass on fewer changes than Flink's
    changelog without it."""
    option = {"options": {"flink_conf": {"table.exec.mini-batch.enabled": "true"}}}
    flinks_chains = ("flink_three_way_left_outer", "flink_four_way_mixed")  # its own tests'
    chains = [c for c in load_cases(FIXTURES / "multi_join.json") if c["id"] in flinks_chains]
    one_of_each_kind = {c["join"]["kind"]: c for c in reversed(cases_of_type("regular"))}
    assert set(one_of_each_kind) == {"INNER", "LEFT", "RIGHT", "FULL"}
    cases = [c | option for c in [*one_of_each_kind.values(), *chains]]
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    flink = (
        flink_finals("golden_flink.jsonl")
        | flink_finals("a_regular.jsonl")
        | flink_finals("regular_more.jsonl")
        | flink_finals("multi_join.jsonl")
    )
    assert {d["case"]: d["final"] for d in lines if "final" in d} == {
        c["id"]: flink[c["id"]] for c in cases
    }
    ours = changelogs(lines)
    for case in cases:
        assert retractions_of_rows_not_live(ours.get(case["id"], [])) == [], case["id"]
    theirs = changelogs(
        [json.loads(line) for line in (FIXTURES / "multi_join.jsonl").read_text().splitlines()]
    )
    ids = [c["id"] for c in chains]
    assert sum(len(ours.get(i, [])) for i in ids) < sum(len(theirs.get(i, [])) for i in ids)


def test_a_hot_key_whose_rows_fill_pages_ends_in_flinks_final_table(spark, tmp_path) -> None:
    """Thousands of orders of one product (the join keeps a key's rows in pages past 512),
    its price changing twice, most orders deleted or updated, the product deleted and back:
    a side with a primary key and a side without (a multiset)."""
    cases = load_cases(FIXTURES / "hot_key.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    ours = {d["case"]: d["final"] for d in lines if "final" in d}
    assert ours == flink_finals("hot_key.jsonl")


def test_a_case_that_cannot_run_gets_an_error_line_and_a_failing_exit(spark, tmp_path) -> None:
    """A query streamjoin refuses (an aggregate over the join) and a case with no query at all
    each get one error line naming why; nothing runs."""
    streams = {name: {"fields": [["k", "INT"], ["v", "STRING"]], "rows": []} for name in ("a", "b")}
    grouped = {
        "id": "grouped",
        "streams": streams,
        "sql": "SELECT a.k, COUNT(*) FROM a JOIN b ON a.k = b.k GROUP BY a.k",
    }
    no_query = {"id": "no_query", "streams": streams}
    code, lines = run(spark, [grouped, no_query], tmp_path)
    assert code == 1
    assert lines == [
        {
            "case": "grouped",
            "error": "sql: line 1: GROUP BY is not supported: streamjoin runs joins only",
        },
        {"case": "no_query", "error": "a case needs a `join` or a `sql`"},
    ]


def test_a_case_that_fails_inside_a_spark_task_fails_alone(spark, tmp_path) -> None:
    """An interval join fed a delete fails in its processor, inside a Spark task: that case gets
    an error line, the next case still runs."""
    good = next(
        c for c in load_cases(FIXTURES / "golden_cases.json") if c["join"]["type"] == "interval"
    )
    broken = json.loads(json.dumps(good)) | {"id": "deletes_into_an_interval_join"}
    left = broken["streams"][broken["join"]["left"]]
    left["rows"].append({**left["rows"][0], "op": "-D"})
    code, lines = run(spark, [broken, good], tmp_path)
    assert code == 1
    (error,) = [line for line in lines if "error" in line]
    assert error["case"] == "deletes_into_an_interval_join"
    assert "insert-only" in error["error"]
    assert any(line.get("case") == good["id"] and "final" in line for line in lines)


def flink_changes(name: str) -> dict[str, Counter]:
    changes: dict[str, Counter] = {}
    for line in (FIXTURES / name).read_text().splitlines():
        d = json.loads(line)
        if "row" in d:
            changes.setdefault(d["case"], Counter())[(d["op"], json.dumps(d["row"]))] += 1
    return changes


def our_changes(lines: list[dict]) -> dict[str, Counter]:
    changes: dict[str, Counter] = {}
    for d in lines:
        if "row" in d:
            changes.setdefault(d["case"], Counter())[(d["op"], json.dumps(d["row"]))] += 1
    return changes


def run_as_flink_did(
    spark, cases: list[dict], flink: dict[str, Counter], tmp_path: Path
) -> dict[str, Counter]:
    """Replay `cases`; every case must emit the multiset of rows Flink emitted."""
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    ours = our_changes(lines)
    assert set(ours) == {c["id"] for c in cases}
    for case_id, changes in ours.items():
        assert changes == flink[case_id], case_id
    return ours


def without_watermark_column(cases: list[dict], flink: dict[str, Counter]) -> None:
    """The examples also select CURRENT_WATERMARK, which depends on how Flink's two sources
    happened to interleave (its inner and left runs of the same rows disagree); compare the
    rest."""
    for case in cases:
        select = case["join"].get("select", "")
        if "CURRENT_WATERMARK" in select:
            kept = [item for item in select.split(", ") if "CURRENT_WATERMARK" not in item]
            case["join"]["select"] = ", ".join(kept)
            stripped: Counter = Counter()
            for (op, row), count in flink[case["id"]].items():
                values = json.loads(row)
                values.pop("wm_at_emit")
                stripped[(op, json.dumps(values))] += count
            flink[case["id"]] = stripped


def test_interval_joins_emit_flinks_rows(spark, tmp_path: Path) -> None:
    """Golden cases (watermark at the end) and the examples, some with the watermark following
    the rows one by one (`delay_ms`)."""
    cases = cases_of_type("interval")
    flink = flink_changes("golden_flink.jsonl") | flink_changes("b_interval.jsonl")
    without_watermark_column(cases, flink)
    assert {c["join"]["kind"] for c in cases} == {"INNER", "LEFT", "RIGHT", "FULL"}
    run_as_flink_did(spark, cases, flink, tmp_path)


def test_late_rows_are_joined_with_what_is_cached_or_padded_at_once_as_in_flink(
    spark, tmp_path: Path
) -> None:
    """Orders l1 11:30, l1b 11:40 (another key), l2 10:30, l3 08:00; shipments r1 10:00,
    r2 12:00; L.ot within an hour of R.st; the watermark follows each row (delay 0).

    When l2 and l3 come the watermark is at 11:40: both are late. r1 would join l2, but the
    watermark passed r1's cleanup time (11:00) before l2 came: Flink pads l2, and so do we;
    l3 has nothing in its bounds and is padded at once.
    """
    cases = load_cases(FIXTURES / "interval_late.json")
    code, lines = run(spark, cases, tmp_path)
    assert code == 0
    rows = {(d["row"]["L_order_id"], d["row"]["R_ship_id"]) for d in lines if "row" in d}
    assert ("l2", None) in rows and ("l3", None) in rows and ("l1", "r2") in rows
    assert our_changes(lines) == flink_changes("interval_late.jsonl")
    finals = {d["case"]: d["final"] for d in lines if "final" in d}
    assert finals == flink_finals("interval_late.jsonl")


def test_rows_at_or_before_1970_join_as_in_flink(spark, tmp_path: Path) -> None:
    """Spark's watermark starts at 0 and Flink's below every time: windows of 1969 join and
    fire, orders of 1969 wait for their products' versions, and interval rows at 0 meet each
    other, as in Flink, with the watermark at the end and following each row."""
    cases = load_cases(FIXTURES / "at_the_epoch.json")
    assert {c["id"].split("_")[0] for c in cases} == {"interval", "tumble", "temporal"}
    run_as_flink_did(spark, cases, flink_changes("at_the_epoch.jsonl"), tmp_path)


def test_window_joins_emit_flinks_rows(spark, tmp_path: Path) -> None:
    """TUMBLE, HOP and CUMULATE windows, every join kind, each window's result once the
    watermark passes its end; with the watermark following the rows, the rows of a window
    that has fired are dropped, as Flink drops them."""
    cases = load_cases(FIXTURES / "window_joins.json")
    assert {c["join"]["kind"] for c in cases} == {"INNER", "LEFT", "RIGHT", "FULL", "SEMI", "ANTI"}
    assert {c["join"]["window"].split("(")[0] for c in cases} == {"TUMBLE", "HOP", "CUMULATE"}
    for case in cases:  # Flink's SQL, compiled as STREAMJOIN_SQL's, is what runs
        written = case.pop("join")
        compiled = sql_join(case)
        assert (compiled["kind"], windowing(compiled["window"])) == (
            written["kind"],
            windowing(written["window"]),
        )
    run_as_flink_did(spark, cases, flink_changes("window_joins.jsonl"), tmp_path)


def test_interval_join_state_levels_off_over_a_stream_twenty_intervals_long(
    spark, tmp_path: Path
) -> None:
    minute = 60_000

    def stream(prefix: str, offset: int) -> dict:
        rows = [
            {"ts": 2 * i * minute + offset, "v": [f"{prefix}{i}", f"k{i // 2}"]} for i in range(100)
        ]
        fields = [["id", "STRING"], ["k", "STRING"]]
        return {"fields": fields, "rowtime": "t", "watermark": {"delay_ms": 0}, "rows": rows}

    case = {
        "id": "soak",
        "options": {"replay_batch_rows": 20},
        "streams": {"l": stream("l", 0), "r": stream("r", minute)},
        "join": {
            "type": "interval",
            "kind": "FULL",
            "left": "l",
            "right": "r",
            "on": "L.k = R.k AND L.t BETWEEN R.t - INTERVAL '10' MINUTE AND R.t",
        },
    }
    progress: list[dict] = []
    changes = run_case(spark, case, tmp_path, progress)
    # per key: l@0 min joins r@1 and r@3, l@2 joins r@3 (L.t <= R.t); nothing left unmatched
    assert len(changes) == 150
    state_rows = [p["stateOperators"][0]["numRowsTotal"] for p in progress if p]
    # 50 keys pass through; what is kept (buckets with cached rows, their timers) does not grow
    assert len(state_rows) >= 8
    assert max(state_rows[len(state_rows) // 2 :]) <= max(state_rows[: len(state_rows) // 2])
    assert max(state_rows) <= 12


def test_event_time_temporal_joins_emit_flinks_rows(spark, tmp_path: Path) -> None:
    """Golden cases, the seed's product_changelog example, and the seed's RatesHistory as a
    temporal table function (an append-only history with a primary key), in the seed's own
    SQL: `LATERAL TABLE (Rates(o.rowtime))`, the function named as its table."""
    (rates,) = load_cases(FIXTURES / "temporal_rates.json")
    lateral = {k: v for k, v in rates.items() if k != "join"} | {
        "sql": "SELECT o.amount, o.currency, r.rate, o.amount * r.rate AS yen FROM orders AS o, "
        "LATERAL TABLE (rates_history(o.rowtime)) AS r WHERE r.currency = o.currency"
    }
    cases = [*cases_of_type("temporal"), lateral]
    flink = (
        flink_changes("golden_flink.jsonl")
        | flink_changes("c_temporal.jsonl")
        | flink_changes("temporal_rates.jsonl")
    )
    assert {c["join"]["kind"] for c in cases if "join" in c} == {"INNER", "LEFT"}
    ours = run_as_flink_did(spark, cases, flink, tmp_path)
    yen = sorted(json.loads(row)["yen"] for _op, row in ours["rates_history_function"])
    assert yen == [50, 102, 228, 348, 510]


def _orders_as_of_prices(
    name: str, orders: list[dict], prices: list[dict], batch_rows: int, orders_delay_ms: int = 0
) -> dict:
    """A case: orders (`id`, `p`) LEFT JOIN prices (`p`, `price`) as of the orders' time."""
    return {
        "id": name,
        "options": {"replay_batch_rows": batch_rows},
        "streams": {
            "orders": {
                "fields": [["id", "STRING"], ["p", "STRING"]],
                "rowtime": "t",
                "watermark": {"delay_ms": orders_delay_ms},
                "rows": orders,
            },
            "prices": {
                "fields": [["p", "STRING"], ["price", "INT"]],
                "rowtime": "t",
                "primary_key": ["p"],
                "watermark": {"delay_ms": 0},
                "rows": prices,
            },
        },
        "join": {
            "type": "temporal",
            "kind": "LEFT",
            "left": "orders",
            "right": "prices",
            "on": "L.p = R.p",
        },
    }


def test_temporal_join_state_stays_bounded_with_a_slowly_changing_table(
    spark, tmp_path: Path
) -> None:
    minute = 60_000
    orders = [{"ts": i * minute, "v": [f"o{i}", f"p{i % 5}"]} for i in range(300)]
    prices = [{"ts": 0, "op": "+I", "v": [f"p{k}", k]} for k in range(5)]
    for i in range(5, 300, 15):  # every quarter of an hour a product changes price
        old = next(p for p in reversed(prices) if p["v"][0] == f"p{i % 5}")
        prices += [
            {"ts": i * minute, "op": "-U", "v": old["v"]},
            {"ts": i * minute, "op": "+U", "v": [f"p{i % 5}", i]},
        ]
    case = _orders_as_of_prices("temporal_soak", orders, prices, batch_rows=40)
    changes = run_case(spark, case, tmp_path)
    assert len(changes) == 300  # every order once, joined with the price valid at its time
    assert all(row["R_price"] is not None for _op, row in changes)
    # What the join holds once the watermark passed every row: each product's latest version
    # (25 were written). An entry is stored with its expiry (None: no TTL) before its state.
    entries = (
        spark.read.format("statestore")
        .option("path", str(tmp_path / "checkpoint"))
        .option("stateVarName", "keys")
        .load()
        .collect()
    )
    held = {load(e.user_map_key.key): load_entry(e.user_map_value.bucket)[1] for e in entries}
    assert {key: len(versions) for key, (versions, _timer, _last) in held.items()} == {
        (f"p{k}",): 1 for k in range(5)
    }


def test_orders_held_back_by_their_watermark_s_delay_wait_parked_and_join_as_of_their_time(
    spark, tmp_path: Path
) -> None:
    """Orders that a watermark delay of five minutes holds back pile up in their bucket by the
    hundred, beyond what a bucket keeps in its own value, and come out as the watermark passes
    them, each with the price of its time, once."""
    orders = [{"ts": i * 1_000, "v": [f"o{i}", "p0"]} for i in range(1_000)]
    prices = [{"ts": 0, "op": "+I", "v": ["p0", 0]}, {"ts": 500_000, "op": "+U", "v": ["p0", 5]}]
    assert PARK_FROM_ROWS < 300  # the five minutes' orders of its one key wait in one bucket
    case = _orders_as_of_prices(
        "temporal_parked", orders, prices, batch_rows=200, orders_delay_ms=300_000
    )
    changes = run_case(spark, case, tmp_path)
    joined = sorted((row["L_id"], row["R_price"]) for _op, row in changes)
    assert joined == sorted((f"o{i}", 0 if i < 500 else 5) for i in range(1_000))


# `SemiAntiJoinStreamITCase` runs below with the very SQL Flink ran. Its cases' structured
# joins differ from what that SQL compiles to only in alias spelling and operand order, except
# NOT IN, whose structured form omits the null-aware disjuncts: the SQL is the stronger check,
# and running both cost CI its time twice.
FLINK_ITCASES = sorted(p for p in FIXTURES.glob("flink_*.json") if p.stem != "flink_semi")


@pytest.mark.parametrize("path", FLINK_ITCASES, ids=[p.stem for p in FLINK_ITCASES])
def test_cases_from_flinks_own_join_tests_give_flinks_output(spark, tmp_path, path) -> None:
    """Flink's `JoinITCase`, `IntervalJoinITCase` and `TemporalJoinITCase`, translated into
    cases and run through Flink 2.3 (the fixtures' README): regular joins must end in Flink's
    final table, time-based joins emit Flink's rows."""
    cases = load_cases(path)
    output = path.with_suffix(".jsonl").name
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    timed = {c["id"] for c in cases if c["join"]["type"] != "regular"}
    finals = {d["case"]: d["final"] for d in lines if "final" in d}
    changes = our_changes(lines)
    flink_final, flink_rows = flink_finals(output), flink_changes(output)
    for case in cases:
        name = case["id"]
        if name in timed:
            assert changes.get(name, Counter()) == flink_rows.get(name, Counter()), name
        else:
            assert finals[name] == flink_final[name], name


def as_sql(case: dict) -> dict:
    """The case with the query the oracle runs for its structured join (`oracle.py`'s
    `_build_sql`) instead of the join."""
    join, streams = case["join"], case["streams"]
    kind = {"LEFT": "LEFT OUTER", "RIGHT": "RIGHT OUTER", "FULL": "FULL OUTER"}.get(
        join.get("kind", "INNER").upper(), join.get("kind", "INNER").upper()
    )
    columns = {
        name: [f for f, _ in s["fields"]] + ([s["rowtime"]] if s.get("rowtime") else [])
        for name, s in streams.items()
    }
    select = join.get("select") or ", ".join(
        [f"L.`{c}` AS `L_{c}`" for c in columns[join["left"]]]
        + [f"R.`{c}` AS `R_{c}`" for c in columns[join["right"]]]
    )
    right = f"`{join['right']}` AS R"
    if join["type"] == "temporal":
        right = (
            f"`{join['right']}` FOR SYSTEM_TIME AS OF L.`{streams[join['left']]['rowtime']}` AS R"
        )
    sql = f"SELECT {select} FROM `{join['left']}` AS L {kind} JOIN {right} ON {join['on']}"
    return {key: value for key, value in case.items() if key != "join"} | {"sql": sql}


def test_cases_given_as_flink_sql_give_flinks_output(spark, tmp_path: Path) -> None:
    """`replay` runs a case's `sql` as `STREAMJOIN_SQL`'s query is compiled: the SEMI/ANTI
    cases with the very `IN` / `EXISTS` text Flink ran, the golden cases (every join type and
    kind) with the query the oracle wrote for them."""
    semi = [
        {k: v for k, v in c.items() if k != "join"}
        for c in load_cases(FIXTURES / "flink_semi.json")
    ]
    golden = [as_sql(c) for c in load_cases(FIXTURES / "golden_cases.json")]
    timed = {
        c["id"]
        for c in load_cases(FIXTURES / "golden_cases.json")
        if c["join"]["type"] != "regular"
    }
    code, lines = run(spark, semi + golden, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    finals = {d["case"]: d["final"] for d in lines if "final" in d}
    flink_final = flink_finals("flink_semi.jsonl") | flink_finals("golden_flink.jsonl")
    flink_rows = flink_changes("golden_flink.jsonl")
    changes = our_changes(lines)
    for case in semi + golden:
        name = case["id"]
        if name in timed:
            assert changes.get(name, Counter()) == flink_rows.get(name, Counter()), name
        else:
            assert finals[name] == flink_final[name], name
