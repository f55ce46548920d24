"""Flink SQL compiled into the variables it stands for (`app.config.sql.query`), and refused where
streamjoin does not run it: the line and the construct."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from app.cli import planned
from app.config.env import ConfigError, load_config, raise_all
from app.config.sql.ddl import SqlError, statements
from app.config.sql.query import compile_script
from app.demo import SCRIPT
from app.plan.planner import (
    join_spec,
    join_stages,
    multi_way_refused,
    multi_way_spec,
    plan_errors,
    zoned_columns,
)
from tests.service import run_to_exit, service_env, streamjoin_command

ORDERS = """CREATE TABLE orders (
  order_id STRING NOT NULL,
  product_id STRING,
  ms BIGINT,
  order_time AS TO_TIMESTAMP_LTZ(ms, 3),
  proc AS PROCTIME(),
  WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'orders', 'format' = 'json',
        'properties.bootstrap.servers' = 'kafka:9092', 'properties.group.id' = 'g',
        'scan.startup.mode' = 'latest-offset');
"""
PRODUCTS = """CREATE TABLE products (
  product_id STRING,
  name STRING,
  price DECIMAL(10, 2),
  ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',
  PRIMARY KEY (product_id) NOT ENFORCED,
  WATERMARK FOR ts AS ts
) WITH ('connector' = 'upsert-kafka', 'topic' = 'products', 'key.format' = 'json',
        'value.format' = 'json', 'properties.bootstrap.servers' = 'kafka:9092');
"""
OUT = """CREATE TABLE out (order_id STRING, name STRING, price DECIMAL(10, 2))
WITH ('connector' = 'kafka', 'topic' = 'out', 'format' = 'debezium-json');
"""


def compiled(query: str, tables: str = ORDERS + PRODUCTS + OUT) -> dict[str, str]:
    return compile_script(tables + query).variables


def refusal(script: str) -> str:
    with pytest.raises(SqlError) as refused:
        compile_script(script)
    return str(refused.value)


def test_a_window_join_of_two_windowed_tables_compiles_to_its_windows() -> None:
    """Flink's window join: both tables through the same HOP, their windows and keys equated;
    the window's columns are the tables' own in the condition and the select list."""
    shipments = ORDERS.replace("orders (", "shipments (").replace("'orders'", "'shipments'")
    out = "CREATE TABLE out (order_id STRING, n STRING, window_start TIMESTAMP(3)) WITH (" + (
        "'connector' = 'kafka', 'topic' = 'out', 'format' = 'json');\n"
    )
    variables = compiled(
        "INSERT INTO out SELECT o.order_id, s.order_id, o.window_start FROM TABLE(HOP(TABLE "
        "orders, DESCRIPTOR(order_time), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)) o FULL JOIN "
        "(SELECT * FROM TABLE(HOP(TABLE shipments, DESCRIPTOR(order_time), INTERVAL '1' MINUTE, "
        "INTERVAL '5' MINUTE))) s ON o.window_start = s.window_start AND o.window_end = "
        "s.window_end AND o.product_id = s.product_id;",
        ORDERS + shipments + out,
    )
    assert variables["JOIN_TYPE"] == "window" and variables["JOIN_KIND"] == "full"
    assert variables["JOIN_WINDOW"] == "HOP(60000ms, 300000ms)"
    assert variables["LEFT_TIME"] == variables["RIGHT_TIME"] == "ms"  # order_time, as stored
    assert variables["JOIN_ON"].startswith("L.window_start = R.window_start AND L.window_end")
    assert "window_start" not in variables["LEFT_SCHEMA"]  # the records' columns only
    assert variables["JOIN_SELECT"].endswith("L.window_start AS window_start")


def test_a_casts_length_and_precision_reach_the_select_list() -> None:
    """`CAST(… AS VARCHAR(3))`, `CHAR(4)`, `CHAR` and `TIMESTAMP(0)` written back as Flink
    wrote them: the select list came out with STRING and TIMESTAMP, so the text was not cut
    nor padded and the time kept its milliseconds."""
    variables = compiled(
        "INSERT INTO out SELECT CAST(o.order_id AS VARCHAR(3)), CAST(p.name AS CHAR(4)), "
        "CAST(p.name AS CHAR) || CAST(CAST(o.order_time AS TIMESTAMP(0)) AS STRING) FROM orders "
        "AS o JOIN products AS p ON o.product_id = p.product_id;"
    )
    assert variables["JOIN_SELECT"] == (
        "CAST(L.order_id AS VARCHAR(3)) AS order_id, CAST(R.name AS CHAR(4)) AS name, "
        "CAST(R.name AS CHAR) || CAST(CAST(L.ms AS TIMESTAMP(0)) AS STRING) AS price"
    )


def test_a_derived_tables_columns_and_filter_go_where_they_keep_flinks_rows() -> None:
    """Its columns as what computes them, its filter in its join's ON (an inner join's input,
    an outer join's padded one) or after the joins (an outer join's kept input), and a computed
    column NULL on the rows an outer join pads, by the table's primary key."""
    variables = compiled(
        "INSERT INTO out SELECT o.id, p.label, p.price FROM (SELECT order_id AS id, product_id "
        "FROM orders WHERE order_id <> 'x') o LEFT JOIN (SELECT product_id, COALESCE(name, '?') AS "
        "label, price FROM products WHERE price > 1) p ON o.product_id = p.product_id;"
    )
    assert variables["JOIN_ON"] == "L.product_id = R.product_id AND R.price > 1"
    assert variables["JOIN_WHERE"] == "L.order_id <> 'x'"
    assert variables["JOIN_SELECT"] == (
        "L.order_id AS order_id, CASE WHEN R.product_id IS NULL THEN NULL ELSE "
        "COALESCE(R.name, '?') END AS name, R.price AS price"
    )


def test_a_derived_tables_filter_on_a_full_joins_input_keeps_flinks_rows() -> None:
    """A FULL join's filtered input: the filter in the join's ON (a row it fails meets no row
    of the other input, which is padded as in Flink) and, unless that input is padded (its
    primary key NULL), after the join (the failing row itself is never there)."""
    variables = compiled(
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders o FULL JOIN (SELECT * "
        "FROM products WHERE price > 1 OR name = 'free') p ON o.product_id = p.product_id;"
    )
    assert variables["JOIN_KIND"] == "full"
    assert (
        variables["JOIN_ON"] == "L.product_id = R.product_id AND (R.price > 1 OR R.name = 'free')"
    )
    assert variables["JOIN_WHERE"] == "R.product_id IS NULL OR (R.price > 1 OR R.name = 'free')"


def test_where_an_outer_join_pads_a_derived_table_a_never_null_column_tells_its_rows() -> None:
    """A FULL join's filtered input, and a derived column not NULL over NULLs, need a column
    NULL only on the rows the join pads: a primary key or a column declared NOT NULL (Flink's
    planner holds it never NULL too); without one, refused."""
    full = (
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM (SELECT order_id, product_id "
        "FROM orders WHERE order_id <> 'x') o FULL JOIN products p ON o.product_id = "
        "p.product_id;"
    )
    computed = (
        "INSERT INTO out SELECT o.order_id, o.tag, p.price FROM products p LEFT JOIN (SELECT "
        "order_id, product_id, COALESCE(product_id, 'none') AS tag FROM orders) o ON o.tag = "
        "p.product_id;"
    )
    variables = compiled(full)
    assert variables["JOIN_WHERE"] == "L.order_id IS NULL OR (L.order_id <> 'x')"
    variables = compiled(computed)
    assert variables["JOIN_SELECT"] == (
        "R.order_id AS order_id, CASE WHEN R.order_id IS NULL THEN NULL ELSE "
        "COALESCE(R.product_id, 'none') END AS name, L.price AS price"
    )
    nullable = ORDERS.replace("order_id STRING NOT NULL", "order_id STRING")
    for query, says in [
        (full, "a derived table's WHERE on a FULL join's input: supported where its table has "),
        (computed, "o.tag: a derived table's column computed as COALESCE(o.product_id, 'none') "),
    ]:
        assert says in refusal(nullable + PRODUCTS + OUT + query)


def test_a_correlated_condition_over_both_tables_meets_no_outer_null_as_flink_decorrelates() -> (
    None
):
    """In `EXISTS` a conjunct over both tables other than an equality of one's expression with
    the other's meets no outer row NULL in a column it names; an equality, or a conjunct over
    one table, runs as written. Under `NOT IN`, such a conjunct that a NULL does not make NULL
    is refused."""
    variables = compiled(
        "INSERT INTO out SELECT o.order_id, o.product_id, o.product_id FROM orders o WHERE "
        "EXISTS (SELECT * FROM products p WHERE o.product_id IS NOT DISTINCT FROM p.product_id "
        "AND COALESCE(o.order_id, 'z') = p.name AND (o.order_id > 'a' OR o.order_id IS NULL));"
    )
    assert variables["JOIN_ON"] == (
        "NOT L.product_id IS NULL AND L.product_id IS NOT DISTINCT FROM R.product_id AND "
        "COALESCE(L.order_id, 'z') = R.name AND (L.order_id > 'a' OR L.order_id IS NULL)"
    )
    not_in = (
        "INSERT INTO out SELECT o.order_id, o.product_id, o.product_id FROM orders o WHERE "
        "o.product_id NOT IN (SELECT p.product_id FROM products p WHERE {});"
    )
    for strict in ("o.order_id < p.name", "CAST(o.order_id AS INT) + 1 > CAST(p.price AS INT)"):
        assert compiled(not_in.format(strict))["JOIN_KIND"] == "anti"
    assert "a condition over both tables that is not NULL wherever a column is" in refusal(
        ORDERS + PRODUCTS + OUT + not_in.format("o.order_id < p.name OR p.name IS NULL")
    )


def test_a_where_after_an_outer_join_filters_the_joined_rows() -> None:
    """A WHERE after a LEFT JOIN cannot be a condition of the join (the join pads the rows
    it would drop): it is `JOIN_WHERE`, over the last join's `L` and `R`, the conjuncts of an
    INNER join's table included; the joins keep their own conditions."""
    shipments = ORDERS.replace("orders (", "shipments (").replace("'orders'", "'shipments'")
    variables = compiled(
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders o JOIN shipments s ON "
        "s.order_id = o.order_id LEFT JOIN products p ON o.product_id = p.product_id WHERE "
        "p.product_id IS NULL AND s.product_id <> 'x';",
        ORDERS + shipments + PRODUCTS + OUT,
    )
    assert variables["JOIN_ON"] == "R.order_id = L.order_id"
    assert variables["JOIN_WHERE"] == "R.product_id IS NULL AND L.t1_product_id <> 'x'"
    assert "JOIN_WHERE" not in compiled(
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders o JOIN products p ON "
        "o.product_id = p.product_id WHERE p.price > 1;"
    )


def test_the_seeds_temporal_join_compiles_to_the_demos_variables() -> None:
    variables = compile_script(SCRIPT.format(suffix="")).variables
    assert variables["JOIN_TYPE"] == "temporal" and variables["JOIN_KIND"] == "left"
    assert variables["LEFT_TIME"] == "order_time" and variables["RIGHT_TIME"] == "update_time"
    assert variables["RIGHT_METADATA"] == "update_time=value.source.timestamp"
    assert variables["RIGHT_FORMAT"] == "debezium-json"
    assert variables["RIGHT_PRIMARY_KEY"] == "product_id"
    assert variables["JOIN_ON"] == "L.product_id = R.product_id"
    # the select list takes the output table's names, by position
    assert variables["JOIN_SELECT"] == (
        "L.order_id AS order_id, L.order_time AS order_time, "
        "R.product_name AS product_name, R.update_time AS "
        "update_time, R.price AS price"
    )
    assert variables["OUTPUT_ENCODING"] == "append"


def test_each_table_starts_where_flink_would_start_it() -> None:
    """Flink's default startup mode is group-offsets: a table naming a group starts at the
    group's offsets (its reset, if given, for partitions it never committed to); one naming
    none at its earliest offset; an upsert-kafka table always at the beginning."""
    grouped = ORDERS.replace(
        "'scan.startup.mode' = 'latest-offset'", "'properties.auto.offset.reset' = 'earliest'"
    )
    query = (
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders AS o "
        "LEFT JOIN products AS p ON o.product_id = p.product_id;"
    )
    variables = compiled(query, grouped + PRODUCTS + OUT)
    assert json.loads(variables["STARTING_OFFSETS"]) == {
        "orders": "group-offsets",
        "products": "earliest",
    }
    assert (variables["KAFKA_GROUP_ID"], variables["KAFKA_AUTO_OFFSET_RESET"]) == ("g", "earliest")
    plain = ORDERS.replace(
        ", 'properties.group.id' = 'g',\n        'scan.startup.mode' = 'latest-offset'", ""
    )
    assert "group.id" not in plain and "startup" not in plain
    variables = compiled(query, plain + PRODUCTS + OUT)
    assert "STARTING_OFFSETS" not in variables and "KAFKA_GROUP_ID" not in variables  # earliest
    told = PRODUCTS.replace(
        "'value.format' = 'json',",
        "'value.format' = 'json', 'scan.startup.mode' = 'latest-offset',",
    )
    assert "an upsert-kafka table reads its topic from the beginning" in refusal(
        ORDERS + told + OUT + query
    )


def test_a_table_starts_at_named_offsets_or_at_a_time_as_flink_reads_the_options() -> None:
    """`specific-offsets`: the partitions named at their offsets, the others at the group's
    committed offsets (`*`; without a group, at the earliest); `timestamp`: each partition at
    its first record at or after the time. Flink's refusals: the mode's option missing or not
    in its format."""
    query = (
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders AS o "
        "LEFT JOIN products AS p ON o.product_id = p.product_id;"
    )
    mode = "'scan.startup.mode' = 'latest-offset'"

    def starts(options: str, tables: str = ORDERS) -> dict:
        variables = compiled(query, tables.replace(mode, options) + PRODUCTS + OUT)
        return json.loads(variables["STARTING_OFFSETS"])["orders"]

    named = "'scan.startup.mode' = 'specific-offsets', 'scan.startup.specific-offsets' = "
    assert starts(named + "'partition:0,offset:42;partition:2,offset:300'") == {
        "0": 42,
        "2": 300,
        "*": "group-offsets",
    }
    ungrouped = ORDERS.replace(", 'properties.group.id' = 'g'", "")
    assert starts(named + "'offset:7,partition:1'", ungrouped) == {"1": 7}
    at = "'scan.startup.mode' = 'timestamp', 'scan.startup.timestamp-millis' = '1700000002500'"
    assert starts(at) == "timestamp:1700000002500"
    assert starts(mode + ", 'scan.startup.timestamp-millis' = '1'") == "latest"  # unused
    for options, message in [
        ("'scan.startup.mode' = 'specific-offsets'", "'scan.startup.specific-offsets' is required"),
        ("'scan.startup.mode' = 'timestamp'", "'scan.startup.timestamp-millis' is required"),
        (named + "'partition:0;offset:42'", "should follow the format 'partition:0,offset:42;"),
        (named + "'partition:0,offset:-1'", "should follow the format"),
        (named + "'partition:0,offset:1,x:2'", "should follow the format"),
        (at.replace("1700000002500", "soon"), "'soon' is not a long"),
        ("'scan.startup.mode' = 'latest'", "'latest' is not supported"),
    ]:
        assert message in refusal(ORDERS.replace(mode, options) + PRODUCTS + OUT + query)


def test_connector_options_become_the_inputs_and_outputs_variables() -> None:
    variables = compiled(
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders AS o "
        "FULL OUTER JOIN products AS p ON o.product_id = p.product_id;"
    )
    assert variables["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert variables["KAFKA_GROUP_ID"] == "g"  # the offsets read are committed to it
    # each table's start: Flink's upsert-kafka reads its topic from the beginning
    assert json.loads(variables["STARTING_OFFSETS"]) == {"orders": "latest", "products": "earliest"}
    assert variables["LEFT_SCHEMA"] == ("order_id STRING, product_id STRING, ms TIMESTAMP_LTZ(3)")
    assert variables["LEFT_TIME"] == "ms" and variables["LEFT_WATERMARK_DELAY"] == "5000ms"
    assert variables["RIGHT_FORMAT"] == "upsert"
    assert variables["RIGHT_METADATA"] == "ts=timestamp"
    assert variables["OUTPUT_ENCODING"] == "debezium-json"
    assert (variables["JOIN_TYPE"], variables["JOIN_KIND"]) == ("regular", "full")


@pytest.mark.parametrize(
    ("query", "join_type", "on"),
    [
        # the bounds in ON, BETWEEN, a computed epoch column read as the column it reads
        (
            "SELECT o.order_id, p.name, p.price FROM orders o JOIN products p ON o.product_id = "
            "p.product_id AND o.order_time BETWEEN p.ts - INTERVAL '1' HOUR AND p.ts",
            "interval",
            "L.product_id = R.product_id AND L.ms BETWEEN R.ts - INTERVAL '1' HOUR AND R.ts",
        ),
        # a comma join, the bounds in WHERE as comparisons
        (
            "SELECT order_id, name, price FROM orders o, products p WHERE o.product_id = "
            "p.product_id AND o.order_time >= p.ts AND o.order_time < p.ts + INTERVAL '1' MINUTE",
            "interval",
            "L.product_id = R.product_id AND L.ms >= R.ts AND L.ms < R.ts + INTERVAL '1' MINUTE",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM orders AS o JOIN products FOR SYSTEM_TIME AS "
            "OF o.order_time AS p ON o.product_id = p.product_id",
            "temporal",
            "L.product_id = R.product_id",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM orders AS o JOIN products FOR SYSTEM_TIME AS "
            "OF o.proc AS p ON o.product_id = p.product_id",
            "temporal-proctime",
            "L.product_id = R.product_id",
        ),
    ],
    ids=["interval-on", "interval-where", "temporal", "temporal-proctime"],
)
def test_the_join_type_follows_from_the_sql_as_flinks_planner_decides_it(
    query: str, join_type: str, on: str
) -> None:
    variables = compiled(f"INSERT INTO out {query};")
    assert (variables["JOIN_TYPE"], variables["JOIN_ON"]) == (join_type, on)
    expected_time = "proctime" if join_type == "temporal-proctime" else "ms"
    assert variables["LEFT_TIME"] == expected_time


@pytest.mark.parametrize(
    ("query", "kind", "on"),
    [
        (
            "SELECT * FROM orders WHERE product_id IN (SELECT product_id FROM products)",
            "semi",
            "L.product_id = R.product_id",
        ),
        (
            "SELECT * FROM orders o WHERE EXISTS (SELECT 1 FROM products p WHERE p.product_id = "
            "o.product_id AND p.price > 10)",
            "semi",
            "R.product_id = L.product_id AND R.price > 10",
        ),
        (
            "SELECT * FROM orders o WHERE NOT EXISTS (SELECT * FROM products p WHERE "
            "p.product_id = o.product_id)",
            "anti",
            "R.product_id = L.product_id",
        ),
        # nullable: Flink's null-aware NOT IN
        (
            "SELECT * FROM orders WHERE product_id NOT IN (SELECT product_id FROM products)",
            "anti",
            "L.product_id = R.product_id OR L.product_id IS NULL OR R.product_id IS NULL",
        ),
    ],
    ids=["in", "exists", "not-exists", "not-in"],
)
def test_subqueries_are_semi_and_anti_joins(query: str, kind: str, on: str) -> None:
    out = (
        "CREATE TABLE out (order_id STRING, product_id STRING, t TIMESTAMP_LTZ(3)) WITH "
        "('connector' = 'kafka', 'topic' = 'out', 'format' = 'debezium-json');"
    )
    variables = compiled(f"INSERT INTO out {query};", ORDERS + PRODUCTS + out)
    assert (variables["JOIN_KIND"], variables["JOIN_ON"]) == (kind, on)
    # SELECT * is the outer table's columns only, order_time read from the ms it is made of
    assert variables["JOIN_SELECT"] == (
        "L.order_id AS order_id, L.product_id AS product_id, L.ms AS t"
    )


def test_a_jdbc_table_as_of_processing_time_is_a_lookup_join() -> None:
    rates = """CREATE TABLE rates (product_id STRING, name STRING, price DECIMAL(10, 2))
    WITH ('connector' = 'jdbc', 'url' = 'jdbc:postgresql://db:5432/shop', 'table-name' = 'rates',
          'username' = 'reader', 'lookup.cache' = 'PARTIAL', 'lookup.max-retries' = '5',
          'lookup.partial-cache.max-rows' = '1000',
          'lookup.partial-cache.expire-after-write' = '600000');
    """
    variables = compiled(
        "INSERT INTO out SELECT o.order_id, r.name, r.price FROM orders AS o LEFT JOIN rates "
        "FOR SYSTEM_TIME AS OF o.proc AS r ON o.product_id = r.product_id;",
        ORDERS + rates + OUT,
    )
    assert variables["JOIN_TYPE"] == "lookup" and variables["LEFT_TIME"] == "proctime"
    assert variables["LOOKUP_URL"] == "postgresql://reader@db:5432/shop"
    assert variables["LOOKUP_TABLE"] == "rates" and variables["LOOKUP_CACHE"] == "PARTIAL"
    assert variables["LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE"] == "600000ms"  # Flink's ms
    assert variables["LOOKUP_MAX_RETRIES"] == "5"


@pytest.mark.parametrize(
    ("query", "line", "says"),
    [
        (
            "SELECT product_id, COUNT(*), 1 FROM orders GROUP BY product_id",
            23,
            "GROUP BY is not supported",
        ),
        (
            "SELECT window_start, 1, 2\nFROM TABLE(SESSION(TABLE orders, DESCRIPTOR(order_time), "
            "INTERVAL '1' MINUTE))",
            25,
            "the window function SESSION is not supported (TUMBLE, HOP, CUMULATE)",
        ),
        (
            "SELECT o.window_start, 1, 2 FROM TABLE(TUMBLE(TABLE orders)) o JOIN TABLE(TUMBLE(\n"
            "TABLE orders, DESCRIPTOR(order_time), INTERVAL '1' MINUTE)) p ON o.ms = p.ms",
            23,
            "TUMBLE(orders): expected TABLE t, DESCRIPTOR(its rowtime), then size",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM orders o RIGHT JOIN products p ON "
            "o.product_id = p.product_id JOIN products FOR SYSTEM_TIME AS OF o.order_time AS q ON "
            "q.product_id = p.product_id",
            23,
            "FOR SYSTEM_TIME AS OF o.order_time: the RIGHT JOIN "
            "before it may pad the columns of orders with NULLs",
        ),
        (
            "SELECT reflect('java.lang.System', 'getenv', 'X'), p.name, p.price FROM orders o "
            "JOIN products p ON o.product_id = p.product_id",
            23,
            "function reflect is not supported",
        ),
        (
            "SELECT o.order_id, p.name FROM orders o JOIN products p ON o.product_id = "
            "p.product_id",
            23,
            "the SELECT gives 2 columns, the output table has 3",
        ),
        (
            "SELECT product_id, name, price FROM orders o JOIN products p ON o.product_id = "
            "p.product_id",
            23,
            "column product_id is in both tables: qualify it",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM orders o, LATERAL TABLE (Rates(o.order_time)) "
            "AS p WHERE o.product_id = p.product_id",
            23,
            "LATERAL TABLE (Rates(…)): no table Rates: declare the history it is over as CREATE "
            "TABLE Rates",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM orders o JOIN products p ON o.product_id = "
            "p.product_id WHERE o.order_id IN (SELECT q.product_id FROM products q) AND "
            "o.product_id IN (SELECT q.product_id FROM products q)",
            23,
            "more than one IN / EXISTS (SELECT …) beside JOINs is not supported",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM orders o LEFT JOIN (products p JOIN products "
            "q ON p.name = q.name) ON o.product_id = p.product_id",
            23,
            "a nested join is supported as an INNER JOIN of INNER and LEFT joins",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM (SELECT order_id, product_id FROM orders "
            "WHERE order_id <> 'x') o LEFT JOIN products p ON o.product_id = p.product_id "
            "RIGHT JOIN products q ON q.product_id = p.product_id",
            23,
            "a derived table's WHERE on an outer join's kept input that a later RIGHT or FULL "
            "join pads",
        ),
        (
            "SELECT o.order_id, p.name, p.price FROM (SELECT product_id, MAX(order_id) AS "
            "order_id FROM orders GROUP BY product_id) o JOIN products p ON o.product_id = "
            "p.product_id",
            23,
            "a derived table is SELECT <columns> FROM <table> [WHERE <condition>]",
        ),
    ],
    ids=[
        "group-by",
        "session-window",
        "window-arguments",
        "temporal-after-a-right-join",
        "function",
        "columns",
        "ambiguous",
        "table-function",
        "two-in-beside-a-join",
        "nested-join",
        "derived-filter-kept-then-padded",
        "derived-group-by",
    ],
)
def test_what_streamjoin_does_not_run_is_refused_with_its_line(
    query: str, line: int, says: str
) -> None:
    message = refusal(ORDERS + PRODUCTS + OUT + f"\nINSERT INTO out\n{query};")
    assert message.startswith(f"line {line}: ") and says in message, message


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("'connector' = 'kafka', 'topic' = 't', 'format' = 'csv'", "'format' 'csv'"),
        (
            "'connector' = 'kafka', 'topic' = 't', 'format' = 'json', 'json.ignore-parse-errors' "
            "= 'true'",
            "the option 'json.ignore-parse-errors' is not supported",
        ),
        (
            "'connector' = 'kafka', 'topic' = 't', 'format' = 'json', "
            "'properties.sasl.jaas.config' = 'x'",
            "'properties.sasl.jaas.config' is a secret: give it as the variable "
            "KAFKA_SASL_JAAS_CONFIG",
        ),
        (
            "'connector' = 'kafka', 'topic' = 't', 'format' = 'json', 'scan.startup.mode' = "
            "'from-now'",
            "'scan.startup.mode' 'from-now' is not supported",
        ),
        ("'connector' = 'filesystem', 'path' = '/x'", "'connector' 'filesystem'"),
        (
            "'connector' = 'kafka', 'topic' = 't', 'format' = 'json', 'value.fields-include' = "
            "'EXCEPT_KEY'",
            "'value.fields-include' 'EXCEPT_KEY' is not supported",
        ),
    ],
    ids=["format", "option", "secret", "startup", "connector", "fields-include"],
)
def test_connector_options_streamjoin_does_not_know_are_refused(table: str, says: str) -> None:
    script = (
        f"CREATE TABLE a (k STRING)\n  WITH ({table});\n{PRODUCTS}{OUT}"
        "INSERT INTO out SELECT a.k, p.name, p.price FROM a JOIN products p ON a.k = "
        "p.product_id;"
    )
    message = refusal(script)
    assert message.startswith("line 1: ") and says in message, message


HINTED = (
    "\nINSERT INTO out\nSELECT {hint} o.order_id, p.name, p.price FROM orders o JOIN "
    "products FOR SYSTEM_TIME AS OF o.order_time AS p ON o.product_id = p.product_id;"
)


@pytest.mark.parametrize(
    ("hint", "name"),
    [
        ("/*+ SHUFFLE_HASH(p) */", "SHUFFLE_HASH"),
        ("/*+ NEST_LOOP(p) */", "NEST_LOOP"),
        ("/*+ MULTI_JOIN(o, p), BROADCAST(p) */", "BROADCAST"),
        ("/*+ OPTIONS('scan.startup.mode' = 'latest-offset') */", "OPTIONS"),
    ],
    ids=["shuffle-hash", "nest-loop", "second-of-two", "options"],
)
def test_a_hint_streamjoin_does_not_run_is_refused_not_dropped(hint: str, name: str) -> None:
    message = refusal(ORDERS + PRODUCTS + OUT + HINTED.format(hint=hint))
    assert message == (
        f"line 24: the hint {name} is not supported: the job would run without "
        "it (hints streamjoin runs: EARLY_FIRE, LOOKUP, MULTI_JOIN, STATE_TTL)"
    )


def test_comments_that_are_not_hints_are_comments() -> None:
    script = ORDERS + PRODUCTS + OUT + HINTED.format(hint="/* STATE_TTL('o' = '2 min') */")
    assert compile_script(script).variables["JOIN_TYPE"] == "temporal"


def test_statements_keep_their_lines_past_comments_and_quoted_semicolons() -> None:
    script = "-- a comment; not a statement\nSET 'a' = 'b;c';\n/* two\nlines */ SET x = y;\n"
    assert list(statements(script)) == [(2, "SET 'a' = 'b;c'"), (4, "SET x = y")]


def test_a_variable_that_contradicts_the_sql_is_refused_naming_both() -> None:
    env = {
        "STREAMJOIN_SQL": SCRIPT.format(suffix=""),
        "CHECKPOINT_LOCATION": "/tmp/ck",
        "KAFKA_BOOTSTRAP_SERVERS": "k:9092",
        "JOIN_KIND": "inner",
        "OUTPUT_TOPIC": "orders_enriched",
    }
    with pytest.raises(ConfigError) as refused:
        load_config(env)
    assert str(refused.value) == (
        "JOIN_KIND: expected 'left' as line 23 of STREAMJOIN_SQL says (or unset); got 'inner'"
    )
    del env["JOIN_KIND"]  # the same value as the SQL's is no contradiction
    assert load_config(env).join.kind == "left"


def test_a_variable_set_by_the_sql_that_is_wrong_is_told_as_the_sqls_line() -> None:
    script = SCRIPT.format(suffix="").replace("'topic' = 'orders'", "'topic' = 'bad topic!'")
    env = {
        "STREAMJOIN_SQL": script,
        "CHECKPOINT_LOCATION": "/tmp/ck",
        "KAFKA_BOOTSTRAP_SERVERS": "k:9092",
    }
    with pytest.raises(ConfigError) as refused:
        load_config(env)
    assert str(refused.value).startswith("STREAMJOIN_SQL line 1 (LEFT_TOPIC): expected a Kafka")


def test_the_readmes_example_plans_and_its_ttl_is_a_regular_joins_only() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    script = re.search(r"```sql\n(.*?)```", readme, re.S)[1]
    env = {
        "STREAMJOIN_SQL": script,
        "CHECKPOINT_LOCATION": "/tmp/ck",
        "KAFKA_BOOTSTRAP_SERVERS": "k:9092",
    }
    config = planned(env)
    assert (config.join.type, config.join.state_ttl_ms) == ("temporal", 0)
    regular = script.replace("FOR SYSTEM_TIME AS OF o.order_time ", "").replace(
        "'topic' = 'orders_enriched', 'format' = 'json'",
        "'topic' = 'orders_enriched', 'format' = 'debezium-json'",  # a LEFT join updates
    )
    config = planned(env | {"STREAMJOIN_SQL": regular})
    assert (config.join.type, config.join.state_ttl_ms) == ("regular", 86_400_000)


FLINK_DURATIONS = json.loads(
    (Path(__file__).parent / "fixtures" / "functions" / "flink_durations.json").read_text()
)["reads"]


def test_a_duration_option_is_read_as_flink_reads_it() -> None:
    """`SET 'table.exec.state.ttl'` with each of 647 texts Flink 2.3's `TimeUtils` was given
    (every unit Flink names, its plurals, ISO-8601, a bare number of milliseconds, spaces, case):
    the TTL Flink reads, in milliseconds, or a refusal where Flink refuses the text."""
    script = (
        ORDERS
        + PRODUCTS
        + OUT
        + (
            "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders o "
            "LEFT JOIN products p ON o.product_id = p.product_id;"
        )
    )
    env = {"CHECKPOINT_LOCATION": "/tmp/ck"}
    differ = {}
    for text, flinks in FLINK_DURATIONS.items():
        ttl = f"SET 'table.exec.state.ttl' = '{text}';\n"
        try:
            ours = load_config(env | {"STREAMJOIN_SQL": ttl + script}).join.state_ttl_ms
        except ConfigError:
            ours = None
        if ours != flinks:
            differ[text] = (flinks, ours)
    assert differ == {}
    assert len(FLINK_DURATIONS) == 647


def test_flinks_parallelism_settings_are_the_state_partitions_and_buckets() -> None:
    script = SCRIPT.format(suffix="")
    env = {"CHECKPOINT_LOCATION": "/tmp/ck", "KAFKA_BOOTSTRAP_SERVERS": "k:9092"}
    sets = "SET 'parallelism.default' = '4';\nSET 'pipeline.max-parallelism' = '64';\n"
    config = load_config(env | {"STREAMJOIN_SQL": sets + script})
    assert (config.state_partitions, config.join.state_buckets) == (4, 64)
    with pytest.raises(ConfigError) as refused:
        load_config(env | {"STREAMJOIN_SQL": "SET 'parallelism.default' = 'many';\n" + script})
    assert str(refused.value).startswith(
        "STREAMJOIN_SQL line 1 (STATE_PARTITIONS): expected a positive whole number"
    )


def test_refused_sql_stops_the_start_with_exit_2_and_one_line(tmp_path: Path) -> None:
    script = ORDERS + PRODUCTS + OUT + "\nINSERT INTO out\nSELECT product_id, COUNT(*), 1 FROM "
    env = service_env(
        STREAMJOIN_SQL=script + "orders GROUP BY product_id;",
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
    )
    result = run_to_exit(env, timeout_s=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "streamjoin: STREAMJOIN_SQL: expected Flink SQL streamjoin runs; line 23: GROUP BY is "
        "not supported: streamjoin runs joins only"
    ]


def test_a_hint_it_does_not_run_stops_the_start_with_exit_2_and_one_line(tmp_path: Path) -> None:
    hint = "/*+ SHUFFLE_HASH(p) */"
    env = service_env(
        STREAMJOIN_SQL=ORDERS + PRODUCTS + OUT + HINTED.format(hint=hint),
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
    )
    result = run_to_exit(env, timeout_s=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "streamjoin: STREAMJOIN_SQL: expected Flink SQL streamjoin runs; line 24: the hint "
        "SHUFFLE_HASH is not supported: the job would run without it (hints streamjoin runs: "
        "EARLY_FIRE, LOOKUP, MULTI_JOIN, STATE_TTL)"
    ]


def test_explain_prints_the_plan_and_the_variables_the_sql_stands_for(tmp_path: Path) -> None:
    env = service_env(
        STREAMJOIN_SQL=SCRIPT.format(suffix=""),
        KAFKA_BOOTSTRAP_SERVERS="k:9092",
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
    )
    result = subprocess.run(
        [*streamjoin_command(), "explain"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "join: temporal LEFT" in lines  # no broker answers k:9092: explain does not ask
    assert "  JOIN_ON=L.product_id = R.product_id" in lines
    assert "  RIGHT_METADATA=update_time=value.source.timestamp" in lines
    assert f"  STREAMJOIN_SQL=<{len(SCRIPT.strip().splitlines())} lines of Flink SQL>" in lines


def test_a_cast_computed_column_is_the_column_it_reads_declared_as_a_timestamp() -> None:
    orders = ORDERS.replace("ms BIGINT", "ms STRING").replace(
        "TO_TIMESTAMP_LTZ(ms, 3)", "CAST(ms AS TIMESTAMP(3))"
    )
    variables = compiled(
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders AS o JOIN products FOR "
        "SYSTEM_TIME AS OF o.order_time AS p ON o.product_id = p.product_id;",
        orders + PRODUCTS + OUT,
    )
    assert variables["LEFT_SCHEMA"].endswith("ms TIMESTAMP(3)")
    assert variables["LEFT_TIME"] == "ms"


def test_a_join_the_plan_refuses_is_told_as_the_sqls_line() -> None:
    script = SCRIPT.format(suffix="").replace(
        "ON O.product_id = P.product_id", "ON O.product_id = P.price"
    )
    env = {
        "STREAMJOIN_SQL": script,
        "CHECKPOINT_LOCATION": "/tmp/ck",
        "KAFKA_BOOTSTRAP_SERVERS": "k:9092",
    }
    with pytest.raises(ConfigError) as refused:
        planned(env)
    assert str(refused.value).startswith("STREAMJOIN_SQL line 23 (JOIN_ON): expected a condition")


def test_two_columns_run_together_are_told_at_their_line_as_a_missing_comma() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    script = re.search(r"```sql\n(.*?)```", readme, re.S)[1]
    broken = script.replace("product_name STRING,\n", "product_name STRING\n", 1)
    line = 1 + script[: script.index("product_name STRING,")].count("\n")
    message = refusal(broken)
    assert message == (
        f"line {line}: CREATE TABLE product_changelog: column product_name: STRING price "
        "DECIMAL(10, 2) is not a type streamjoin reads (a comma missing after product_name "
        "STRING?)"
    )
    assert refusal(ORDERS.replace("ms BIGINT", "ms BIGNUM") + PRODUCTS + OUT) == (
        "line 4: CREATE TABLE orders: column ms: BIGNUM is not a type streamjoin reads"
    )


def test_empty_sql_says_so_rather_than_falling_back_to_variables(tmp_path: Path) -> None:
    env = {"CHECKPOINT_LOCATION": "/tmp/ck", "KAFKA_BOOTSTRAP_SERVERS": "k:9092"}
    with pytest.raises(ConfigError) as refused:
        load_config(env | {"STREAMJOIN_SQL": " \n"})
    assert str(refused.value) == (
        "STREAMJOIN_SQL: expected Flink SQL (or unset, to configure the job by variables); "
        "it is empty"
    )
    (tmp_path / "job.sql").write_text("\n")
    with pytest.raises(ConfigError) as refused:
        load_config(env | {"STREAMJOIN_SQL_FILE": str(tmp_path / "job.sql")})
    assert str(refused.value) == (
        f"STREAMJOIN_SQL_FILE: expected a readable file of Flink SQL; "
        f"'{tmp_path / 'job.sql'}' is empty"
    )


def test_a_temporal_table_function_in_lateral_table_is_a_temporal_function_join() -> None:
    """The seeds' `LATERAL TABLE (Rates(o.rowtime))`: Flink defines the function in the Table
    API over a history table; here the function is named as that table, whose WATERMARK and
    PRIMARY KEY are its time and key (`test_replay.py` runs it against Flink's output)."""
    rates = (
        "CREATE TABLE Rates (currency STRING, rate BIGINT, rowtime TIMESTAMP(3),\n"
        "  PRIMARY KEY (currency) NOT ENFORCED, WATERMARK FOR rowtime AS rowtime\n"
        ") WITH ('connector' = 'kafka', 'topic' = 'rates', 'format' = 'json');\n"
    )
    orders = (
        "CREATE TABLE Orders (amount BIGINT, currency STRING, rowtime TIMESTAMP(3),\n"
        "  p AS PROCTIME(), WATERMARK FOR rowtime AS rowtime\n"
        ") WITH ('connector' = 'kafka', 'topic' = 'orders', 'format' = 'json');\n"
        "CREATE TABLE out (amount BIGINT) WITH ('connector' = 'kafka', 'topic' = 'out', "
        "'format' = 'json');\n"
    )
    query = (
        "INSERT INTO out SELECT o.amount * r.rate AS amount FROM Orders AS o,\n"
        "  LATERAL TABLE (Rates(o.rowtime)) AS r WHERE r.currency = o.currency;"
    )
    variables = compile_script(rates + orders + query).variables
    assert (variables["JOIN_TYPE"], variables["JOIN_KIND"], variables["JOIN_ON"]) == (
        "temporal-function",
        "inner",
        "R.currency = L.currency",
    )
    assert (variables["LEFT_TIME"], variables["RIGHT_TIME"]) == ("rowtime", "rowtime")
    assert variables["RIGHT_PRIMARY_KEY"] == "currency"
    proctime = compile_script(rates + orders + query.replace("Rates(o.rowtime)", "Rates(o.p)"))
    assert proctime.variables["LEFT_TIME"] == "proctime"
    left = query.replace(",\n  LATERAL", " LEFT JOIN LATERAL").replace(" WHERE ", " ON ")
    assert refusal(rates + orders + left) == (
        "line 8: a LEFT join of a temporal table function is not supported: join it INNER "
        "(FROM o, LATERAL TABLE (…) WHERE …)"
    )
    keyless = rates.replace("  PRIMARY KEY (currency) NOT ENFORCED, ", "  ")
    assert refusal(keyless + orders + query).endswith(
        "Rates needs a PRIMARY KEY (… NOT ENFORCED): the temporal table function's key"
    )


CUSTOMERS = """CREATE TABLE customers (
  customer_id STRING,
  name STRING,
  PRIMARY KEY (customer_id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = 'customers', 'format' = 'debezium-json');
"""
CHAIN_ORDERS = ORDERS.replace("product_id STRING,", "product_id STRING,\n  customer_id STRING,")
ENRICHED = """CREATE TABLE enriched (order_id STRING, customer STRING, product STRING,
  price DECIMAL(10, 2)) WITH ('connector' = 'kafka', 'topic' = 'enriched',
  'format' = 'debezium-json');
"""
CHAIN = CHAIN_ORDERS + PRODUCTS + CUSTOMERS + ENRICHED  # the INSERT on line 29
CHAIN_QUERY = (
    "INSERT INTO enriched\nSELECT o.order_id, c.name, p.name, p.price\nFROM orders AS o\n"
    "JOIN customers AS c ON o.customer_id = c.customer_id\n"
    "LEFT JOIN products AS p ON o.product_id = p.product_id AND p.price > 1;"
)


def test_a_third_table_is_a_join_of_the_result_so_far_with_it() -> None:
    """Flink's left-deep plan of a FROM clause: each next join takes the result so far as its
    left, its columns named after their table's place (`t0_`, `t1_`)."""
    script = compile_script(CHAIN + CHAIN_QUERY)
    variables = script.variables
    assert (variables["LEFT_TOPIC"], variables["RIGHT_TOPIC"]) == ("orders", "customers")
    assert variables["JOIN_ON"] == "L.customer_id = R.customer_id"
    assert variables["JOIN_SELECT"] == (
        "L.t0_order_id AS order_id, L.t1_name AS customer, R.name AS product, R.price AS price"
    )
    (third,) = script.chain
    assert third.variables["RIGHT_TOPIC"] == "products"
    assert third.variables["RIGHT_FORMAT"] == "upsert"
    assert (third.variables["JOIN_KIND"], third.variables["JOIN_ON"]) == (
        "left",
        "L.t0_product_id = R.product_id AND R.price > 1",
    )
    config = planned({"STREAMJOIN_SQL": CHAIN + CHAIN_QUERY, "CHECKPOINT_LOCATION": "/tmp/ck"})
    assert [s.topic for s in config.inputs()] == ["orders", "customers", "products"]
    assert [s.side for s in config.inputs()] == ["left", "right", "input3"]


def test_a_chains_timestamp_ltz_column_is_written_as_one() -> None:
    """`order_time AS TO_TIMESTAMP_LTZ(ms, 3)` through two joins: a TIMESTAMP_LTZ output column,
    which the JSON output writes with Flink's `Z`."""
    sink = (
        "CREATE TABLE timed (order_id STRING, ordered TIMESTAMP_LTZ(3), product STRING) WITH "
        "('connector' = 'kafka', 'topic' = 'timed', 'format' = 'debezium-json');\n"
    )
    query = CHAIN_QUERY.replace("enriched", "timed").replace(
        "c.name, p.name, p.price", "o.order_time, p.name"
    )
    tables = CHAIN_ORDERS + PRODUCTS + CUSTOMERS + sink
    config = planned({"STREAMJOIN_SQL": tables + query, "CHECKPOINT_LOCATION": "/tmp/ck"})
    assert zoned_columns(config) == {"ordered"}


def test_a_where_of_an_inner_chain_is_a_condition_of_the_first_join_with_its_tables() -> None:
    query = (
        "INSERT INTO enriched SELECT o.order_id, c.name, p.name, p.price FROM orders o "
        "JOIN customers c ON o.customer_id = c.customer_id JOIN products p ON o.product_id = "
        "p.product_id WHERE o.order_id <> 'x' AND p.price > c.name"
    )
    script = compile_script(CHAIN + query)
    assert script.variables["JOIN_ON"] == "L.customer_id = R.customer_id AND L.order_id <> 'x'"
    assert script.chain[0].variables["JOIN_ON"] == (
        "L.t0_product_id = R.product_id AND R.price > L.t1_name"
    )


def test_a_mistake_in_a_later_join_is_told_at_the_sqls_line_of_that_join() -> None:
    env = {"CHECKPOINT_LOCATION": "/tmp/ck"}
    unknown = CHAIN + CHAIN_QUERY.replace("p.price > 1", "p.cost > 1")
    with pytest.raises(SqlError, match=r"^line 29: p\.cost: products has no column cost$"):
        compile_script(unknown)
    mismatched = CHAIN + CHAIN_QUERY.replace("o.product_id = p.product_id", "o.order_id = p.price")
    with pytest.raises(ConfigError) as refused:
        planned(env | {"STREAMJOIN_SQL": mismatched})
    assert str(refused.value).startswith("STREAMJOIN_SQL line 29 (JOIN_ON): expected a condition")


def test_a_temporal_join_after_a_regular_one_on_the_first_tables_columns_runs_first() -> None:
    """Flink runs `o JOIN c … LEFT JOIN p FOR SYSTEM_TIME AS OF o.t` (the replay fixtures hold
    its result): it reads only the orders, which keep their rowtime before the regular join."""
    temporal = CHAIN_QUERY.replace(
        "LEFT JOIN products AS p ON o.product_id = p.product_id AND p.price > 1",
        "LEFT JOIN products FOR SYSTEM_TIME AS OF o.order_time AS p ON o.product_id = p.product_id",
    )
    script = compile_script(CHAIN + temporal)
    assert (script.variables["JOIN_TYPE"], script.variables["RIGHT_TOPIC"]) == (
        "temporal",
        "products",
    )
    assert script.variables["JOIN_SELECT"] == (
        "L.t0_order_id AS order_id, R.name AS customer, L.t1_name AS product, L.t1_price AS price"
    )
    (customers,) = script.chain
    assert customers.variables["JOIN_ON"] == "L.t0_customer_id = R.customer_id"
    # on the customer's columns, it runs after the join that brings them, as of the orders'
    # rowtime that join carries (`ms`, read as `order_time`; Flink's plan too)
    after = compile_script(
        CHAIN + temporal.replace("o.product_id = p.product_id", "c.customer_id = p.product_id")
    )
    assert after.variables["JOIN_TYPE"] == "regular"
    (products,) = after.chain
    assert (products.variables["JOIN_TYPE"], products.variables["LEFT_TIME"]) == (
        "temporal",
        "t0_ms",
    )


RATES = """CREATE TABLE rates (currency STRING, rate INT) WITH ('connector' = 'jdbc',
  'url' = 'jdbc:postgresql://db:5432/shop', 'table-name' = 'rates', 'username' = 'reader');
"""
SHIPMENTS = """CREATE TABLE shipments (order_id STRING, shipped TIMESTAMP(3),
  WATERMARK FOR shipped AS shipped) WITH ('connector' = 'kafka', 'topic' = 'shipments',
  'format' = 'json');
"""
RATED = CHAIN_ORDERS.replace("product_id STRING,", "product_id STRING,\n  currency STRING,")


def test_the_issues_enrichment_is_a_temporal_a_regular_and_a_lookup_join_in_that_order() -> None:
    """The issue's query: the temporal join names only the orders, so it runs first (the
    orders keep their rowtime); the lookup keys on the product's currency, so it runs after the
    join that brings it, over the regular join's changelog, as of the orders' PROCTIME()."""
    query = (
        "INSERT INTO enriched\nSELECT o.order_id, c.name, p.name, p.price * r.rate\n"
        "FROM orders AS o\nJOIN customers AS c ON o.customer_id = c.customer_id\n"
        "LEFT JOIN products FOR SYSTEM_TIME AS OF o.order_time AS p\n"
        "  ON o.product_id = p.product_id\n"
        "LEFT JOIN rates FOR SYSTEM_TIME AS OF o.proc AS r ON p.name = r.currency;"
    )
    env = {"CHECKPOINT_LOCATION": "/tmp/ck", "STREAMJOIN_SQL": CHAIN + RATES + query}
    stages = join_stages(load_config(env))
    assert [(s.join.type, s.join.kind, s.left.time, s.join.on) for s in stages] == [
        ("temporal", "left", "ms", "L.product_id = R.product_id"),
        ("regular", "inner", "proctime", "L.t0_customer_id = R.customer_id"),
        ("lookup", "left", "proctime", "L.t1_name = R.currency"),
    ]
    assert [s.lookup.table if s.lookup else None for s in stages] == [None, None, "rates"]
    assert stages[-1].join.select == (
        "L.t0_order_id AS order_id, L.t2_name AS customer, L.t1_name AS product, "
        "L.t1_price * R.rate AS price"
    )
    # a second lookup join, into a table of its own options; the environment's LOOKUP_* (the
    # password) are both's
    tiers = RATES.replace("rates (currency STRING, rate INT)", "tiers (name STRING, cut INT)")
    tiers = tiers.replace("'rates'", "'tiers', 'lookup.cache' = 'PARTIAL'")
    twice = query.replace(
        ";", "\nLEFT JOIN tiers FOR SYSTEM_TIME AS OF o.proc AS t ON c.name = t.name;"
    )
    secret = {"LOOKUP_PASSWORD": "pw", "STREAMJOIN_SQL": CHAIN + RATES + tiers + twice}
    rates, tiers_stage = join_stages(load_config(env | secret))[-2:]
    assert [
        (s.join.type, s.lookup.table, s.lookup.cache.kind, s.lookup.password)
        for s in (rates, tiers_stage)
        if s.lookup
    ] == [
        ("lookup", "rates", "NONE", "pw"),
        ("lookup", "tiers", "PARTIAL", "pw"),
    ]
    assert tiers_stage.join.on == "L.t2_name = R.name"
    # a lookup after another join has no Kafka record of its own to dead-letter
    with pytest.raises(ConfigError, match="LOOKUP_ON_ERROR: expected fail"):
        planned_joins(env | {"LOOKUP_ON_ERROR": "dead-letter"})


def test_an_interval_join_over_a_temporal_joins_result_bounds_the_orders_rowtime() -> None:
    """A temporal join keeps the orders' rowtime, so after it a condition bounding the
    shipments' time by it is an interval join (after a regular join it is a plain condition);
    over a changelog it is refused at the query's line, as Flink refuses it."""
    query = (
        "INSERT INTO enriched\nSELECT o.order_id, s.order_id, p.name, p.price\n"
        "FROM orders AS o\nLEFT JOIN products FOR SYSTEM_TIME AS OF o.order_time AS p\n"
        "  ON o.product_id = p.product_id\nJOIN shipments AS s ON s.order_id = o.order_id\n"
        "  AND s.shipped BETWEEN o.order_time AND o.order_time + INTERVAL '1' HOUR;"
    )
    tables = CHAIN_ORDERS + PRODUCTS + SHIPMENTS + ENRICHED
    env = {"CHECKPOINT_LOCATION": "/tmp/ck", "STREAMJOIN_SQL": tables + query}
    stages = join_stages(load_config(env))
    assert [(s.join.type, s.left.time, s.right.time) for s in stages] == [
        ("temporal", "ms", "ts"),
        ("interval", "t0_ms", "shipped"),
    ]
    changelog = tables.replace(
        "'topic' = 'orders', 'format' = 'json'", "'topic' = 'orders', 'format' = 'debezium-json'"
    )
    with pytest.raises(
        ConfigError,
        match=r"^STREAMJOIN_SQL line 27 \(LEFT_FORMAT\): expected "
        "an insert-only left",
    ):
        planned_joins(env | {"STREAMJOIN_SQL": changelog + query})


def test_in_and_not_exists_beside_a_chain_are_a_semi_and_an_anti_join_of_its_result() -> None:
    """Flink plans the filter over the joins' result: a semi (anti) join of that result with the
    subquery's table, after every join, an outer one too (the replay fixtures hold Flink's)."""
    query = CHAIN_QUERY.replace(";", "\nWHERE o.order_id IN (SELECT s.order_id FROM shipments s);")
    script = compile_script(CHAIN + SHIPMENTS + query)
    products, shipments = script.chain
    assert products.variables["JOIN_KIND"] == "left"
    assert (shipments.variables["JOIN_KIND"], shipments.variables["JOIN_ON"]) == (
        "semi",
        "L.t0_order_id = R.order_id",
    )
    assert shipments.variables["RIGHT_TOPIC"] == "shipments"
    assert script.variables["JOIN_SELECT"] == (
        "L.t0_order_id AS order_id, L.t1_name AS customer, L.t2_name AS product, "
        "L.t2_price AS price"
    )
    absent = CHAIN_QUERY.replace(
        ";", "\nWHERE NOT EXISTS (SELECT * FROM shipments s WHERE s.order_id = o.order_id);"
    )
    (_, anti) = compile_script(CHAIN + SHIPMENTS + absent).chain
    assert (anti.variables["JOIN_KIND"], anti.variables["JOIN_ON"]) == (
        "anti",
        "R.order_id = L.t0_order_id",
    )


def test_a_left_join_nested_in_an_inner_one_is_the_chain_of_the_two() -> None:
    """`o JOIN (c LEFT JOIN p ON …) ON o.x = c.y`: the same rows as `o JOIN c … LEFT JOIN p …`
    (Flink's final table in the replay fixtures)."""
    query = (
        "INSERT INTO enriched\nSELECT o.order_id, c.name, p.name, p.price\nFROM orders AS o\n"
        "JOIN (customers AS c LEFT JOIN products AS p ON c.customer_id = p.product_id)\n"
        "  ON o.customer_id = c.customer_id;"
    )
    script = compile_script(CHAIN + query)
    joins = [script.variables, *(chained.variables for chained in script.chain)]
    assert [(join["JOIN_KIND"], join["JOIN_ON"]) for join in joins] == [
        ("inner", "L.customer_id = R.customer_id"),
        ("left", "L.t1_customer_id = R.product_id"),
    ]
    inward = query.replace("ON o.customer_id = c.customer_id", "ON o.product_id = p.product_id")
    assert refusal(CHAIN + inward).endswith("may name only its first table among the nested ones")


def planned_joins(env: dict[str, str]) -> None:
    """The joins' checks of `env`'s configuration (no lookup table read)."""
    raise_all(plan_errors(load_config(env)))


def test_flinks_multi_join_option_and_hint_make_a_shared_key_chain_one_operator() -> None:
    """`table.optimizer.multi-join.enabled` or the `MULTI_JOIN` hint: joins whose inputs all
    share one key run as one operator; joins over other keys stay a chain, and `explain` says
    why, as Flink keeps them apart too."""
    shared = CHAIN_QUERY.replace(
        "o.product_id = p.product_id AND p.price > 1", "o.customer_id = p.product_id"
    )
    env = {"CHECKPOINT_LOCATION": "/tmp/ck"}
    option = "SET 'table.optimizer.multi-join.enabled' = 'true';\n"
    config = planned(env | {"STREAMJOIN_SQL": option + CHAIN + shared})
    assert config.multi_way == "STREAMJOIN_SQL line 1 (SET 'table.optimizer.multi-join.enabled')"
    spec = multi_way_spec(config)
    assert spec is not None and spec.keys == ("customer_id", "customer_id", "product_id")
    assert [join.kind for join in spec.joins] == ["inner", "left"]
    hinted = shared.replace("SELECT o.order_id", "SELECT /*+ MULTI_JOIN(o, c, p) */ o.order_id")
    config = planned(env | {"STREAMJOIN_SQL": CHAIN + hinted})
    assert config.multi_way == "STREAMJOIN_SQL line 30 (the MULTI_JOIN hint)"
    assert multi_way_spec(config) is not None
    apart = planned(env | {"STREAMJOIN_SQL": option + CHAIN + CHAIN_QUERY})
    assert multi_way_spec(apart) is None
    assert multi_way_refused(apart).endswith("whose inputs all share one join key (Flink's too)")
    assert multi_way_spec(planned(env | {"STREAMJOIN_SQL": CHAIN + shared})) is None


def test_flinks_mini_batch_options_fold_every_regular_join_of_the_chain() -> None:
    """`table.exec.mini-batch.enabled` turns on the folding of each join's input changes; its
    bounds are taken (a micro-batch is the bundle)."""
    env = {"CHECKPOINT_LOCATION": "/tmp/ck"}
    options = (
        "SET 'table.exec.mini-batch.enabled' = 'true';\n"
        "SET 'table.exec.mini-batch.allow-latency' = '1 s';\n"
        "SET 'table.exec.mini-batch.size' = '1000';\n"
    )
    folded = planned(env | {"STREAMJOIN_SQL": options + CHAIN + CHAIN_QUERY})
    assert [join_spec(stage).mini_batch for stage in join_stages(folded)] == [True, True]
    plain = planned(env | {"STREAMJOIN_SQL": CHAIN + CHAIN_QUERY})
    assert [join_spec(stage).mini_batch for stage in join_stages(plain)] == [False, False]


def test_the_state_ttl_hint_gives_each_input_of_a_chain_what_flinks_plan_gives_it() -> None:
    """Flink 2.3's compiled plan of this query (`table.exec.state.ttl` 5 min): the first join
    keeps the orders 1 day and the customers for ever ('0'), the second keeps the result so far
    for the job's 5 minutes and the products 2 hours; one multi-way operator keeps each input
    for its own."""
    hinted = CHAIN_QUERY.replace(
        "SELECT o.order_id",
        "SELECT /*+ STATE_TTL('o' = '1d', 'customers' = '0', 'p' = '2h') */ o.order_id",
    )
    ttl = "SET 'table.exec.state.ttl' = '5 min';\n"
    env = {"CHECKPOINT_LOCATION": "/tmp/ck", "STREAMJOIN_SQL": ttl + CHAIN + hinted}
    stages = join_stages(planned(env))
    assert [join_spec(stage).retention_ms for stage in stages] == [
        (86_400_000, 0),
        (300_000, 7_200_000),
    ]
    shared = hinted.replace(
        "o.product_id = p.product_id AND p.price > 1", "o.customer_id = p.product_id"
    )
    multi = "SET 'table.optimizer.multi-join.enabled' = 'true';\n"
    spec = multi_way_spec(planned(env | {"STREAMJOIN_SQL": multi + ttl + CHAIN + shared}))
    assert spec is not None and spec.retention_ms == (86_400_000, 0, 7_200_000)


def test_a_state_ttl_hint_that_names_no_input_or_a_time_bounded_join_is_refused() -> None:
    unknown = CHAIN_QUERY.replace(
        "SELECT o.order_id", "SELECT /*+ STATE_TTL('x' = '1d') */ o.order_id"
    )
    assert refusal(CHAIN + unknown) == (
        "line 30: STATE_TTL names 'x', which is no table or alias the SELECT joins"
    )
    env = {"CHECKPOINT_LOCATION": "/tmp/ck"}
    temporal = ORDERS + PRODUCTS + OUT + HINTED.format(hint="/*+ STATE_TTL('o' = '2 min') */")
    errors = plan_errors(load_config(env | {"STREAMJOIN_SQL": temporal}))
    assert [str(error) for error in errors] == [
        "STREAMJOIN_SQL line 24 (LEFT_STATE_TTL): expected unset: an input's own retention is a "
        "regular join's, not the temporal join's; got '120000ms'"
    ]


def test_the_lookup_hint_retries_a_miss_of_its_own_table_in_a_chain() -> None:
    """Flink's `LOOKUP` hint (FLIP-234) on the second lookup of a chain: its table's lookups
    retry a miss 3 more times, 2 s apart, asynchronously; the first lookup's do not."""
    query = (
        "INSERT INTO enriched\nSELECT /*+ LOOKUP('table' = 't', 'retry-predicate' = "
        "'lookup_miss', 'retry-strategy' = 'fixed_delay', 'fixed-delay' = '2s', "
        "'max-attempts' = '3', 'async' = 'true', 'output-mode' = 'ordered') */\n"
        "  o.order_id, c.name, r.currency, o.product_id\n"
        "FROM orders AS o\nJOIN customers AS c ON o.customer_id = c.customer_id\n"
        "LEFT JOIN rates FOR SYSTEM_TIME AS OF o.proc AS r ON c.name = r.currency\n"
        "LEFT JOIN tiers FOR SYSTEM_TIME AS OF o.proc AS t ON c.name = t.name;"
    )
    tiers = RATES.replace("rates (currency STRING, rate INT)", "tiers (name STRING, cut INT)")
    tiers = tiers.replace("'rates'", "'tiers'")
    env = {"CHECKPOINT_LOCATION": "/tmp/ck", "STREAMJOIN_SQL": CHAIN + RATES + tiers + query}
    rates, hinted = join_stages(load_config(env))[-2:]
    assert (rates.lookup.miss_retries, hinted.lookup.miss_retries) == (0, 3)
    assert hinted.lookup.miss_retry_delay_ms == 2000 and hinted.lookup.asynchronous


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("'table' = 'c'", "LOOKUP names 'c', which is no lookup join's table"),
        (
            "'table' = 'r', 'retry-predicate' = 'lookup_miss'",
            "a lookup retry needs 'retry-predicate' = 'lookup_miss', 'retry-strategy' = "
            "'fixed_delay', 'fixed-delay' and 'max-attempts'",
        ),
        (
            "'table' = 'r', 'retry-predicate' = 'lookup_miss', 'retry-strategy' = "
            "'exponential_delay', 'fixed-delay' = '1s', 'max-attempts' = '2'",
            "LOOKUP 'retry-strategy' = 'exponential_delay' is not supported (fixed_delay)",
        ),
        ("'table' = 'r', 'timeout' = '1s'", "LOOKUP 'timeout' is not supported"),
    ],
    ids=["not-a-lookup", "half-a-retry", "other-strategy", "other-option"],
)
def test_a_lookup_hint_streamjoin_cannot_run_as_written_is_refused(options: str, says: str) -> None:
    query = (
        f"INSERT INTO enriched\nSELECT /*+ LOOKUP({options}) */ o.order_id, c.name, r.currency, "
        "o.product_id\nFROM orders AS o\nJOIN customers AS c ON o.customer_id = c.customer_id\n"
        "LEFT JOIN rates FOR SYSTEM_TIME AS OF o.proc AS r ON c.name = r.currency;"
    )
    message = refusal(CHAIN + RATES + query)
    assert message.startswith("line 32: " + says), message


PRICES = """CREATE TABLE products (
  product_id STRING,
  name STRING,
  price DECIMAL(10, 2),
  ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',
  WATERMARK FOR ts AS ts
) WITH ('connector' = 'kafka', 'topic' = 'products', 'format' = 'json');
"""
INTERVAL_LEFT = (
    "INSERT INTO out SELECT {hint} o.order_id, p.name, p.price FROM orders o LEFT JOIN products p "
    "ON o.product_id = p.product_id AND o.order_time BETWEEN p.ts - INTERVAL '1' HOUR AND p.ts;"
)


def test_the_early_fire_hint_pads_an_outer_interval_joins_rows_early_and_makes_it_update() -> None:
    """Flink's `EARLY_FIRE` hint (FLIP-497): the interval join's delay, in its own time; the
    result then corrects padded rows, so an append output is refused as for any update."""
    hint = "/*+ EARLY_FIRE('delay' = '5s', 'time_mode' = 'rowtime') */"
    env = {"CHECKPOINT_LOCATION": "/tmp/ck"}
    config = planned(
        env | {"STREAMJOIN_SQL": ORDERS + PRICES + OUT + INTERVAL_LEFT.format(hint=hint)}
    )
    spec = join_spec(config)
    assert spec.early_fire_ms == 5000 and spec.produces_updates
    append = OUT.replace("'debezium-json'", "'json'")
    errors = plan_errors(
        load_config(
            env | {"STREAMJOIN_SQL": ORDERS + PRICES + append + INTERVAL_LEFT.format(hint=hint)}
        )
    )
    assert any(error.variable == "OUTPUT_ENCODING" for error in errors), errors
    proctime = hint.replace("rowtime", "proctime")
    assert refusal(ORDERS + PRICES + OUT + INTERVAL_LEFT.format(hint=proctime)) == (
        "line 20: EARLY_FIRE 'time_mode' = 'proctime' is not supported: the interval join runs "
        "on rowtime (Flink's default)"
    )
    temporal = ORDERS + PRODUCTS + OUT + HINTED.format(hint="/*+ EARLY_FIRE('delay' = '5s') */")
    assert refusal(temporal) == "line 24: EARLY_FIRE is an interval join's: the SELECT has none"


def test_a_sink_option_of_a_table_read_changes_nothing_one_of_the_output_is_refused() -> None:
    """Nexmark's Kafka table says `'sink.partitioner' = 'round-robin'`: Flink ignores how a
    table it only reads would be written; the output is written with the default partitioner."""
    source = ORDERS.replace("'format' = 'json'", "'format' = 'json', 'sink.partitioner' = 'x'")
    query = (
        "INSERT INTO out SELECT o.order_id, p.name, p.price FROM orders o "
        "JOIN products p ON o.product_id = p.product_id;"
    )
    assert compiled(query, source + PRODUCTS + OUT)["LEFT_TOPIC"] == "orders"
    round_robin = OUT.replace("'debezium-json'", "'debezium-json', 'sink.partitioner' = 'x'")
    assert "'sink.partitioner' 'x' is not supported" in refusal(
        ORDERS + PRODUCTS + round_robin + query
    )


NEXMARK = Path(__file__).resolve().parent.parent / "bench" / "nexmark"


def nexmark(query: str) -> str:
    """Nexmark's own script for `query`: its Kafka table, its views, its query and sink."""
    table = (NEXMARK / "ddl_kafka.sql").read_text().replace("${BOOTSTRAP_SERVERS}", "kafka:9092")
    views = (NEXMARK / "ddl_views.sql").read_text().replace("${NEXMARK_TABLE}", "kafka")
    return f"{table};\n{views};\n{(NEXMARK / f'{query}.sql').read_text()}"


def test_nexmarks_views_read_one_kind_of_record_and_its_fields_from_the_one_topic() -> None:
    """q20 as Nexmark writes it: `bid` and `auction` are views of the one topic, each its
    records (`WHERE event_type = …`) and its ROW's fields, the time the CASE column's branch
    for its kind, with the table's watermark; the sink Flink's blackhole."""
    variables = compile_script(nexmark("q20")).variables
    assert variables["LEFT_TOPIC"] == variables["RIGHT_TOPIC"] == "nexmark"
    assert variables["LEFT_WHERE"] == "event_type=2" and variables["RIGHT_WHERE"] == "event_type=1"
    assert variables["LEFT_FIELDS"].startswith("auction=bid.auction,bidder=bid.bidder,")
    assert "dateTime=bid.dateTime" in variables["LEFT_FIELDS"]
    assert variables["LEFT_SCHEMA"].startswith("auction BIGINT, bidder BIGINT, price BIGINT")
    assert variables["RIGHT_TIME"] == "dateTime" and variables["RIGHT_WATERMARK_DELAY"] == "4000ms"
    assert variables["JOIN_ON"] == "L.auction = R.id AND R.category = 10"
    assert variables["OUTPUT_SINK"] == "blackhole" and variables["OUTPUT_TOPIC"] == "nexmark_q20"
    config = planned({"STREAMJOIN_SQL": nexmark("q23"), "CHECKPOINT_LOCATION": "/tmp/ck"})
    assert [c.input.where for c in config.chain] == [(("event_type", 1),)]
    assert config.left.fields[0] == ("auction", ("bid", "auction"))


@pytest.mark.parametrize(
    ("where", "says"),
    [("event_type = '2'", "'2' is no INT value"), ("event_type = 2.5", "2.5 is no INT value")],
)
def test_a_views_where_literal_of_another_type_than_its_column_is_refused(
    where: str, says: str
) -> None:
    """As Flink refuses `event_type = '2'` on an INT column (no implicit cast from CHAR), and
    an INT never equals 2.5."""
    script = nexmark("q20").replace("WHERE event_type = 2", f"WHERE {where}")
    assert f"WHERE {where}: {says}" in refusal(script)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            ("FROM ${NEXMARK_TABLE} WHERE event_type = 0;", "FROM ${NEXMARK_TABLE};"),
            "the view's WHERE does not decide WHEN event_type = 0",
        ),
        (
            ("WHERE event_type = 0", "WHERE event_type > 0"),
            "WHERE event_type > 0 is not supported (only a column of kafka = a literal, ANDed)",
        ),
        (("person.name,", "UPPER(person.name),"), "UPPER(person.name) is not supported"),
        (("person.name,", "person.nom,"), "kafka has no field person.nom"),
    ],
    ids=["case-undecided", "where", "expression", "field"],
)
def test_a_view_streamjoin_cannot_read_is_refused_naming_what(
    change: tuple[str, str], says: str
) -> None:
    script = nexmark("q3").replace(
        (NEXMARK / "ddl_views.sql").read_text().replace("${NEXMARK_TABLE}", "kafka"),
        (NEXMARK / "ddl_views.sql")
        .read_text()
        .replace(*change, 1)
        .replace("${NEXMARK_TABLE}", "kafka"),
    )
    assert says in refusal(script)


def test_a_table_of_rows_is_read_through_a_view_not_joined_itself() -> None:
    script = nexmark("q3").replace("FROM\n    auction AS A", "FROM\n    kafka AS A")
    script = script.replace("A.category = 10", "A.event_type = 1").replace(
        "A.seller", "A.event_type"
    )
    script = script.replace("A.id", "A.event_type")
    assert "the column person is read through a view" in refusal(script)


def test_nexmarks_q8_is_a_window_join_of_two_window_aggregates() -> None:
    """q8 as written: each side a `GROUP BY` of its columns and window bounds without aggregate
    functions, renamed (`window_start AS starttime`), joined on those windows."""
    variables = compile_script(nexmark("q8")).variables
    assert variables["JOIN_TYPE"] == "window" and variables["JOIN_WINDOW"] == "TUMBLE(10000ms)"
    assert variables["LEFT_WINDOW_GROUP_BY"] == "id,name"
    assert variables["RIGHT_WINDOW_GROUP_BY"] == "seller"
    assert variables["JOIN_ON"] == (
        "L.id = R.seller AND L.window_start = R.window_start AND L.window_end = R.window_end"
    )
    assert variables["JOIN_SELECT"] == "L.id AS id, L.name AS name, L.window_start AS stime"
    summed = nexmark("q8").replace("SELECT seller,", "SELECT seller, COUNT(*) AS n,")
    assert "COUNT(*) AS n: a window aggregate before a window join selects its grouping" in (
        refusal(summed)
    )


def test_a_views_metadata_column_is_still_read_from_the_record_and_not_filtered_on() -> None:
    """A view selecting the table's `METADATA FROM 'timestamp'` column keeps reading it from
    the Kafka record (the value has no such field); its WHERE cannot test it."""
    script = nexmark("q3").replace(
        "    event_type int,",
        "    event_type int,\n    at TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',",
    )
    with_time = script.replace("    person.extra\nFROM", "    person.extra,\n    at\nFROM")
    assert compile_script(with_time).variables["RIGHT_METADATA"] == "at=timestamp"
    filtered = script.replace("WHERE event_type = 0", "WHERE event_type = 0 AND at = 1")
    assert "WHERE at = 1 is not supported" in refusal(filtered)
