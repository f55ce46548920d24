"""Start-up checks of the join as a whole: what combination of variables is refused, and why."""

from __future__ import annotations

import pytest

from app.config.env import ConfigError, load_config
from app.plan.explain import describe
from app.plan.planner import (
    StateLayout,
    check_plan,
    normalized,
    query_plan,
    upsert_materialized,
    zoned_columns,
)
from app.plan.pushdown import pushed_filter
from app.run.pipeline import state_meaning

JOIN = {
    "KAFKA_BOOTSTRAP_SERVERS": "broker:9092",
    "LEFT_TOPIC": "orders",
    "RIGHT_TOPIC": "products",
    "OUTPUT_TOPIC": "out",
    "CHECKPOINT_LOCATION": "/tmp/ck",
    "LEFT_SCHEMA": "order_id STRING, product_id STRING",
    "LEFT_PRIMARY_KEY": "order_id",
    "RIGHT_SCHEMA": "product_id STRING, price DECIMAL(10,2)",
    "RIGHT_PRIMARY_KEY": "product_id",
    "RIGHT_FORMAT": "debezium-json",
    "JOIN_ON": "L.product_id = R.product_id",
}


def refused(base: dict[str, str | None], **changes: str | None) -> str:
    """The start-up error of `base` with `changes` (None removes a variable)."""
    env = {k: v for k, v in {**base, **changes}.items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        check_plan(load_config(env))
    return str(caught.value)


def refusal(**changes: str | None) -> str:
    return refused(JOIN, **changes)


def test_a_complete_join_is_accepted() -> None:
    check_plan(load_config(JOIN))
    # Flink takes a Debezium input without a primary key as it comes (a multiset of rows)
    check_plan(load_config({**JOIN, "RIGHT_PRIMARY_KEY": None}))
    check_plan(
        load_config(
            {
                **JOIN,
                "RIGHT_FORMAT": "avro-confluent",
                "SCHEMA_REGISTRY_URL": "http://registry:8081",
            }
        )
    )


def test_append_is_refused_for_a_join_that_updates() -> None:
    message = refusal(OUTPUT_ENCODING="append")
    assert message.startswith("OUTPUT_ENCODING: expected retract, upsert or debezium-json")
    assert "produces updates and deletes" in message
    # An inner join of two insert-only inputs can be append-only.
    check_plan(load_config({**JOIN, "RIGHT_FORMAT": "json", "OUTPUT_ENCODING": "append"}))


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"LEFT_SCHEMA": None, "LEFT_PRIMARY_KEY": None}, "LEFT_SCHEMA"),
        ({"RIGHT_FORMAT": "upsert", "RIGHT_PRIMARY_KEY": None}, "RIGHT_PRIMARY_KEY"),
        ({"RIGHT_FORMAT": "avro-confluent"}, "SCHEMA_REGISTRY_URL"),
        ({"JOIN_ON": "L.product_id = R.sku"}, "JOIN_ON"),
        ({"OUTPUT_FORMAT": "avro-confluent"}, "SCHEMA_REGISTRY_URL"),
        ({"JOIN_SELECT": "L.order_id, R.nope"}, "JOIN_SELECT"),
        ({"OUTPUT_SCHEMA": "order_id STRING"}, "OUTPUT_SCHEMA"),
        ({"JOIN_SELECT": "L.order_id", "OUTPUT_SCHEMA": "id STRING"}, "OUTPUT_SCHEMA"),
        ({"JOIN_SELECT": "R.price AS p", "OUTPUT_SCHEMA": "p INT"}, "OUTPUT_SCHEMA"),
    ],
)
def test_an_unusable_combination_names_its_variable(changes: dict, variable: str) -> None:
    assert refusal(**changes).startswith(f"{variable}: expected ")


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("R.sku IS NULL", "'R.sku': no such column"),
        ("R.price", "a condition Flink accepts"),
        ("R.price > 'x'", "compares"),
        ("CAST(L.order_id AS INT) > 1", "a CAST of a text is not supported: write TRY_CAST"),
        ("reflect('java.lang.System', 'getenv', 'X') = 'x'", "function reflect"),
    ],
    ids=["column", "not-boolean", "types", "cast", "function"],
)
def test_a_where_over_the_joined_rows_is_checked_at_start_up(where: str, says: str) -> None:
    """`JOIN_WHERE` names the joined rows' columns, is a boolean, compares like with like and
    runs only the function library, as `JOIN_ON` and `JOIN_SELECT` do; its start-up error
    names it. A LEFT join's filter of its padded rows is accepted, and `explain` shows it."""
    message = refusal(JOIN_KIND="left", JOIN_WHERE=where)
    assert message.startswith("JOIN_WHERE: expected ") and says in message, message
    env = {**JOIN, "JOIN_KIND": "left", "JOIN_WHERE": "R.product_id IS NULL"}
    check_plan(load_config(env))
    # a number's CAST cannot fail on a row (a text's can)
    check_plan(load_config({**env, "JOIN_WHERE": "CAST(R.price AS INT) > 1"}))
    forwarded = refusal(JOIN_TYPE="forward", JOIN_ON=None, JOIN_WHERE="L.order_id IS NULL")
    assert forwarded.startswith("JOIN_WHERE: expected no condition: JOIN_TYPE=forward")
    upsert = {**env, "OUTPUT_ENCODING": "upsert", "OUTPUT_KEY": "L_order_id"}
    lines = describe(load_config(upsert), upsert)
    assert "filter: R.product_id IS NULL, each joined change kept where it holds" in lines
    assert any("upsert: by OUTPUT_KEY: +I/+U the row, -U and -D a tombstone" in x for x in lines)


@pytest.mark.parametrize("variable", ["JOIN_ON", "JOIN_SELECT", "JOIN_WHERE"])
def test_an_interval_that_is_no_number_is_refused_at_start_up(variable: str) -> None:
    """`INTERVAL 'x' SECOND` names its variable at start-up: a condition raised a decimal
    error, and a select list reached Spark's parser with it."""
    moved = "CAST('2024-01-01 00:00:00' AS TIMESTAMP) + INTERVAL 'x' SECOND"
    changes = {
        "JOIN_ON": f"L.product_id = R.product_id AND {moved} > CAST('2024-01-01' AS TIMESTAMP)",
        "JOIN_SELECT": f"L.order_id, CAST({moved} AS STRING) AS t",
        "JOIN_WHERE": f"{moved} > CAST('2024-01-01' AS TIMESTAMP)",
    }
    message = refusal(**{variable: changes[variable]})
    assert message.startswith(f"{variable}: expected ") and "INTERVAL 'x' SECOND" in message


INTERVAL = {
    **JOIN,
    "LEFT_SCHEMA": "order_id STRING, ot TIMESTAMP(3)",
    "LEFT_TIME": "ot",
    "RIGHT_SCHEMA": "ship_id STRING, order_id STRING, st TIMESTAMP(3)",
    "RIGHT_PRIMARY_KEY": None,
    "RIGHT_FORMAT": "json",
    "RIGHT_TIME": "st",
    "JOIN_TYPE": "interval",
    "JOIN_KIND": "left",
    "JOIN_ON": "L.order_id = R.order_id AND L.ot BETWEEN R.st - INTERVAL '4' HOUR AND R.st",
    "OUTPUT_ENCODING": "append",
}


def test_an_outer_interval_join_is_append_only_and_accepted() -> None:
    check_plan(load_config({k: v for k, v in INTERVAL.items() if v is not None}))


WINDOW = {
    **INTERVAL,
    "JOIN_TYPE": "window",
    "JOIN_KIND": "full",
    "JOIN_WINDOW": "HOP(5m, 1h)",
    "JOIN_ON": "L.window_start = R.window_start AND L.window_end = R.window_end "
    "AND L.order_id = R.order_id",
    "JOIN_SELECT": "L.order_id, R.ship_id, L.window_start, COALESCE(L.window_end, R.window_end)",
}


def test_a_window_join_is_append_only_and_names_its_windows_columns() -> None:
    env = {k: v for k, v in WINDOW.items() if v is not None}
    check_plan(load_config(env))
    assert "  windows: HOP(300000ms, 3600000ms)" in describe(load_config(env), env)


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        ({"JOIN_WINDOW": None}, "JOIN_WINDOW: expected the windows of a window join"),
        ({"JOIN_WINDOW": "HOP(7m, 1h)"}, "JOIN_WINDOW: expected a window join's windows"),
        ({"JOIN_WINDOW": "SESSION(5m)"}, "JOIN_WINDOW: expected a window join's windows"),
        (
            {"JOIN_ON": "L.window_end = R.window_end AND L.order_id = R.order_id"},
            "JOIN_ON: expected a condition over the inputs' columns (a window join equates "
            "both sides' window bounds: L.window_start = R.window_start missing)",
        ),
        ({"RIGHT_TIME": "proctime"}, "RIGHT_TIME: expected an event-time column"),
        ({"JOIN_TYPE": "interval"}, "JOIN_WINDOW: expected unset"),
    ],
)
def test_a_window_join_is_refused_without_its_windows_or_event_time(
    changes: dict, start: str
) -> None:
    assert refused(WINDOW, **changes).startswith(start)


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        (
            {"RIGHT_FORMAT": "debezium-json", "RIGHT_PRIMARY_KEY": "ship_id"},
            "RIGHT_FORMAT: expected an insert-only format (json|avro-confluent): an interval join "
            "cannot take the updates and deletes",
        ),
        ({"RIGHT_TIME": "proctime"}, "RIGHT_TIME: expected an event time like LEFT_TIME"),
        ({"JOIN_KIND": "semi"}, "JOIN_KIND: expected inner|left|right|full"),
        (
            {"JOIN_ON": "L.order_id = R.order_id AND L.ot >= R.st"},
            "JOIN_ON: expected a condition over the inputs' columns (an interval join needs a "
            "lower and an upper bound on L.ot - R.st",
        ),
    ],
)
def test_an_interval_join_the_service_cannot_run_is_refused(changes: dict, start: str) -> None:
    assert refused(INTERVAL, **changes).startswith(start)


TEMPORAL = {
    **JOIN,
    "LEFT_SCHEMA": "order_id STRING, product_id STRING, order_time TIMESTAMP(3)",
    "LEFT_TIME": "order_time",
    "RIGHT_TIME": "source_ts_ms",
    "JOIN_TYPE": "temporal",
    "JOIN_KIND": "left",
    "OUTPUT_ENCODING": "append",
}


def test_the_seeds_temporal_join_is_accepted_with_an_append_only_output() -> None:
    check_plan(load_config(TEMPORAL))
    check_plan(load_config({**TEMPORAL, "JOIN_TYPE": "temporal-proctime", "LEFT_TIME": None}))
    check_plan(
        load_config(
            {
                **TEMPORAL,
                "JOIN_TYPE": "temporal-function",
                "RIGHT_FORMAT": "json",
                "RIGHT_TIME": "kafka_timestamp",
            }
        )
    )
    # a changelog probe input (orders from CDC): its changes join with their kinds
    check_plan(
        load_config({**TEMPORAL, "LEFT_FORMAT": "debezium-json", "OUTPUT_ENCODING": "retract"})
    )


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        (
            {"RIGHT_SCHEMA": "product_id STRING, sku STRING", "JOIN_ON": "L.product_id = R.sku"},
            "JOIN_ON: expected a condition over the inputs' columns (a temporal join's key must "
            "contain the versioned table's primary key (R.product_id missing",
        ),
        ({"RIGHT_FORMAT": "json"}, "RIGHT_FORMAT: expected a changelog format"),
        ({"JOIN_TYPE": "temporal-function"}, "RIGHT_FORMAT: expected an append-only format"),
        (
            {"RIGHT_PRIMARY_KEY": None, "RIGHT_FORMAT": "json", "JOIN_TYPE": "temporal-function"},
            "RIGHT_PRIMARY_KEY: expected the primary key",
        ),
        ({"JOIN_KIND": "right"}, "JOIN_KIND: expected inner|left"),
        ({"LEFT_TIME": "proctime"}, "LEFT_TIME: expected an event time"),
        (
            {"LEFT_FORMAT": "debezium-json", "OUTPUT_ENCODING": "append"},
            "OUTPUT_ENCODING: expected retract, upsert or debezium-json",
        ),
    ],
)
def test_a_temporal_join_the_service_cannot_run_is_refused(changes: dict, start: str) -> None:
    assert refused(TEMPORAL, **changes).startswith(start)


@pytest.mark.parametrize(
    ("select", "named"),
    [
        ("L.order_id, reflect('java.lang.System', 'getenv', 'SASL_PASSWORD')", "function reflect"),
        ("java_method('java.lang.System', 'getenv', 'X') AS x", "function java_method"),
        ("L.order_id, (SELECT 1) AS x", "'(SELECT 1)'"),
    ],
)
def test_a_select_list_runs_only_the_function_library(select: str, named: str) -> None:
    """A select list reaches Spark's SQL only once every part of it is in the library shared
    with JOIN_ON: anything else (Spark's `reflect` would copy a secret into the output) is
    refused at start-up, naming it."""
    message = refusal(JOIN_SELECT=select)
    assert message.startswith("JOIN_SELECT: expected a select list") and named in message
    check_plan(
        load_config(
            {
                **JOIN,
                "JOIN_SELECT": "L.order_id, UPPER(R.product_id) AS p, "
                "CASE WHEN R.price > 10 THEN 'dear' END AS band, L.order_id",
            }
        )
    )


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (
            {"JOIN_SELECT": "L.order_id, UPPER(R.price) AS p"},
            "JOIN_SELECT: expected a select list Flink accepts (UPPER(R.price) applies UPPER to "
            "R.price (DECIMAL(10,2)): it takes a string)",
        ),
        (
            {"JOIN_SELECT": "L.order_id, ROUND(CHAR_LENGTH(L.order_id) || 'x', 2) AS n"},
            "(LENGTH(L.order_id) || 'x' applies || to LENGTH(L.order_id) (a number): it takes a "
            "string)",
        ),
        (
            {"JOIN_ON": "L.product_id = R.product_id AND ABS(L.order_id) > 1"},
            "JOIN_ON: expected a condition Flink accepts (ABS(L.order_id) applies ABS to "
            "L.order_id (STRING): it takes a number)",
        ),
        (
            {"JOIN_SELECT": "L.order_id, GREATEST(R.price, 1, L.order_id) AS g"},
            "(GREATEST(R.price, 1, L.order_id) orders R.price (DECIMAL(10,2)) with L.order_id "
            "(STRING))",
        ),
    ],
    ids=["select", "nested", "condition", "greatest"],
)
def test_a_function_of_an_argument_it_does_not_take_is_refused_at_start_up(
    changes: dict, says: str
) -> None:
    """As Flink's planner refuses `UPPER(<INTEGER>)` (Flink 2.3 refuses each of these, and
    every function of the library given another family than it takes, seen through PyFlink's
    `explain_sql`); it failed inside a task before."""
    message = refusal(**changes)
    assert says in message, message
    check_plan(
        load_config(
            {**JOIN, "JOIN_SELECT": "UPPER(L.order_id) || 'x' AS o, ROUND(R.price * 2, 1) AS p"}
        )
    )


@pytest.mark.parametrize(
    ("changes", "materialized"),
    [
        # the output key holds the join key: each key's changes come from one task, in order
        ({"OUTPUT_KEY": "L_order_id,L_product_id"}, False),
        ({"JOIN_KIND": "inner", "OUTPUT_KEY": "L_order_id,R_product_id"}, False),
        ({"JOIN_SELECT": "L.order_id AS id, L.product_id AS pid", "OUTPUT_KEY": "id,pid"}, False),
        # an order moving between products is retracted and added by two tasks
        ({"OUTPUT_KEY": "L_order_id", "LEFT_FORMAT": "debezium-json"}, True),
        # the right side's key column is NULL in a LEFT join's padded rows
        ({"OUTPUT_KEY": "L_order_id,R_product_id", "LEFT_FORMAT": "debezium-json"}, True),
        (
            {
                "JOIN_SELECT": "L.order_id AS id, UPPER(L.product_id) AS pid",
                "OUTPUT_KEY": "id,pid",
                "LEFT_FORMAT": "debezium-json",
            },
            True,
        ),
        # an insert-only order never moves, and joins one product at most: its task orders
        # all of its changes (Flink's upsert key)
        ({"OUTPUT_KEY": "L_order_id"}, False),
        ({"JOIN_SELECT": "L.order_id AS id, R.price AS price", "OUTPUT_KEY": "id"}, False),
        # ... unless a product may have several rows per join key
        ({"OUTPUT_KEY": "L_order_id", "RIGHT_PRIMARY_KEY": "product_id,price"}, True),
        ({"OUTPUT_KEY": "L_order_id", "LEFT_PRIMARY_KEY": ""}, True),
        # insert-only results, and encodings that carry every change, need no ordering
        ({"OUTPUT_KEY": "L_order_id", "OUTPUT_ENCODING": "retract"}, False),
        ({"OUTPUT_KEY": "L_order_id", "JOIN_KIND": "inner", "RIGHT_FORMAT": "json"}, False),
    ],
)
def test_an_upsert_output_is_materialized_when_its_key_does_not_hold_the_join_key(
    changes: dict, materialized: bool
) -> None:
    env = {**JOIN, "OUTPUT_ENCODING": "upsert", "JOIN_KIND": "left", **changes}
    config = load_config(env)
    check_plan(config)
    assert upsert_materialized(config) is materialized


def test_an_output_key_naming_no_output_column_is_refused() -> None:
    message = refusal(OUTPUT_KEY="order_id")
    assert message.startswith("OUTPUT_KEY: expected columns of the output (L_order_id, ")
    message = refusal(JOIN_SELECT="L.order_id AS id", OUTPUT_KEY="L_order_id")
    assert message.startswith("OUTPUT_KEY: expected columns of the output (id);")


def test_a_versioned_table_needs_no_normalizer_but_a_changelog_probe_does() -> None:
    """Flink's temporal join drops update-befores and a delete needs only its key: the versioned
    table's records reach the join as they come; a probe input's changes still retract."""
    config = load_config({**TEMPORAL, "LEFT_FORMAT": "upsert", "LEFT_PRIMARY_KEY": "order_id"})
    assert [normalized(s, config.join) for s in (config.left, config.right)] == [True, False]
    # a checkpoint made behind a normalizer keeps it
    assert normalized(config.right, config.join, StateLayout(versions_normalized=True))
    # the regular join rebuilds both
    regular = load_config(
        {
            **TEMPORAL,
            "JOIN_TYPE": "regular",
            "JOIN_KIND": "inner",
            "OUTPUT_ENCODING": "retract",
            "LEFT_TIME": None,
        }
    )
    assert normalized(regular.right, regular.join)


def test_the_plan_says_a_join_without_an_equality_runs_in_one_task() -> None:
    spread = describe(load_config(JOIN), JOIN)
    alone = {**JOIN, "JOIN_ON": "L.product_id < R.product_id"}
    lines = describe(load_config(alone), alone)
    assert "  join key: L.product_id = R.product_id" in spread
    assert [line for line in lines if "join key:" in line] == [
        "  join key: none: every row shares one key, so the join runs in one task whatever "
        "STATE_PARTITIONS says (an equality between an L and an R column spreads it)"
    ]


@pytest.mark.parametrize(
    ("changes", "left", "right"),
    [
        ({}, "L.order_id <> 'o0'", None),
        ({"JOIN_KIND": "left"}, None, None),
        ({"RIGHT_FORMAT": "json"}, "L.order_id <> 'o0'", "R.price > 1"),
        ({"LEFT_FORMAT": "upsert", "RIGHT_FORMAT": "json"}, None, "R.price > 1"),
    ],
    ids=["inner", "outer", "both-insert-only", "changelog"],
)
def test_an_inner_joins_filter_of_one_input_is_tested_as_its_rows_are_read(
    changes: dict[str, str], left: str | None, right: str | None
) -> None:
    """As Flink pushes a WHERE below a join: an inner join's conjuncts over one input's
    columns, but not an outer join's (its padded rows), nor a changelog's (normalized first)."""
    config = load_config(
        {**JOIN, "JOIN_ON": "L.product_id = R.product_id AND L.order_id <> 'o0' AND R.price > 1"}
        | changes
    )
    assert (pushed_filter(config, config.left), pushed_filter(config, config.right)) == (
        left,
        right,
    )


def test_a_filter_pushed_below_the_join_is_part_of_what_the_state_means() -> None:
    """The rows a filter kept out of the state cannot join a looser filter after a restart: the
    filter is recorded with the state, so a change to it is refused as a changed key is."""
    config = load_config(
        {**JOIN, "RIGHT_FORMAT": "json", "JOIN_ON": "L.product_id = R.product_id AND R.price > 1"}
    )
    meaning = state_meaning(query_plan(config))
    assert meaning["JOIN_ON's filter of RIGHT"] == "R.price > 1"
    assert meaning["JOIN_ON's filter of LEFT"] == "none"


def test_a_views_records_and_a_window_joins_windows_are_part_of_what_the_state_means() -> None:
    """The state holds a view's records (its WHERE, its fields) and a window join's rows by
    their windows: another WHERE, other fields or other windows would read them as what they
    are not, so a restart that changes them is refused."""
    window = {
        **JOIN,
        "RIGHT_FORMAT": "json",
        "RIGHT_PRIMARY_KEY": None,
        "LEFT_SCHEMA": "order_id STRING, product_id STRING, t TIMESTAMP(3)",
        "RIGHT_SCHEMA": "product_id STRING, price DECIMAL(10,2), t TIMESTAMP(3)",
        "LEFT_TIME": "t",
        "RIGHT_TIME": "t",
        "LEFT_WHERE": "kind=1",
        "LEFT_FIELDS": "order_id=order.id",
        "JOIN_TYPE": "window",
        "JOIN_WINDOW": "TUMBLE(10s)",
        "JOIN_ON": "L.product_id = R.product_id AND L.window_start = R.window_start "
        "AND L.window_end = R.window_end",
    }
    meaning = state_meaning(query_plan(load_config(window)))
    assert meaning["LEFT_WHERE"] == "kind=1" and meaning["RIGHT_WHERE"] == "none"
    assert meaning["LEFT_FIELDS"] == "order_id=order.id"
    assert meaning["JOIN_WINDOW"] == str(load_config(window).join.window)


def test_timestamp_ltz_outputs_are_an_inputs_ltz_column_as_it_is_or_a_cast_to_one() -> None:
    """What the output writes with Flink's `Z`: not a TIMESTAMP, nor an LTZ cast to one; an
    LTZ column moved by an interval is one still."""
    env = {
        **JOIN,
        "LEFT_SCHEMA": "order_id STRING, product_id STRING, ot TIMESTAMP_LTZ(3), lt TIMESTAMP(3)",
        "RIGHT_SCHEMA": "product_id STRING, ut TIMESTAMP(3) WITH LOCAL TIME ZONE",
    }
    assert zoned_columns(load_config(env)) == {"L_ot", "R_ut"}
    select = (
        "L.ot AS a, L.lt AS b, CAST(L.lt AS TIMESTAMP_LTZ(3)) AS c, R.ut AS d, "
        "CAST(R.ut AS TIMESTAMP(3)) AS e, L.order_id AS f, L.ot + INTERVAL '1' HOUR AS g, "
        "L.lt - INTERVAL '1' SECOND AS h"
    )
    assert zoned_columns(load_config({**env, "JOIN_SELECT": select})) == {"a", "c", "d", "g"}
    # a window join's window_time has its rowtime's type, as in Flink; its bounds are TIMESTAMP
    windows = {k: v for k, v in WINDOW.items() if v is not None}
    windows["LEFT_SCHEMA"] = "order_id STRING, ot TIMESTAMP_LTZ(3)"
    windows["JOIN_SELECT"] = "L.ot, L.window_start, L.window_time, R.window_time AS rt"
    assert zoned_columns(load_config(windows)) == {"ot", "window_time"}
