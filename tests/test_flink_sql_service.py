"""The seed texts' join statements, as Flink SQL (`STREAMJOIN_SQL`), through `streamjoin run`.

Each is the seed's statement with the DDL and connector options Flink needs around it; the
inputs are small tables whose joined rows follow from the seed's semantics (and Flink's: the
null-aware NOT IN). The event-time temporal join of the seed is the demo's (`test_demo.py`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kafka_io import committed_output, create_topics, output_topics, produce, unique
from tests.postgres import PostgresCluster
from tests.service import run_to_exit, service_env

pytestmark = pytest.mark.spark


def kafka_table(name: str, columns: str, topic: str, fmt: str = "json") -> str:
    return (
        f"CREATE TABLE {name} (\n  {columns}\n) WITH ('connector' = 'kafka', "
        f"'topic' = '{topic}', 'format' = '{fmt}');\n"
    )


def rows(values: list[dict]) -> list[bytes]:
    return [json.dumps(value).encode() for value in values]


def final_table(kafka: str, out: str) -> Counter:
    """The output's rows once every change is applied (Debezium JSON: `after` adds, `before`
    removes), or the rows of an insert-only output."""
    table: Counter = Counter()
    for record in committed_output(kafka, out, f"{out}.markers"):
        value = json.loads(record.value)
        if "op" in value and "after" in value:
            row, sign = (value["after"], 1) if value["after"] is not None else (value["before"], -1)
        else:
            row, sign = value, 1
        table[tuple(row.values())] += sign
    return +table


def run_script(
    kafka: str, tmp_path: Path, script: str, inputs: dict[str, list[dict]], **variables: str
) -> tuple[Counter, str]:
    """`script` with its `{topic}` names given topics of this run, its inputs produced, run to
    the end of what is there; the final output table."""
    topics = {name: unique(name.lower()) for name in [*inputs, "out"]}
    create_topics(kafka, [topics[name] for name in inputs])
    output_topics(kafka, topics["out"])
    for name, values in inputs.items():
        produce(kafka, topics[name], rows(values))
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        STREAMJOIN_SQL=script.format(**topics),
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        TRIGGER_INTERVAL="available-now",
        **variables,
    )
    result = run_to_exit(env, timeout_s=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return final_table(kafka, topics["out"]), result.stderr


def test_a_regular_join_qualified_by_table_names(kafka: str, tmp_path: Path) -> None:
    """SELECT * FROM Orders INNER JOIN Product ON Orders.productId = Product.id"""
    script = (
        kafka_table("Orders", "id STRING, productId STRING, amount INT", "{Orders}")
        + kafka_table("Product", "id STRING, name STRING", "{Product}")
        + kafka_table(
            "out", "id STRING, productId STRING, amount INT, pid STRING, name STRING", "{out}"
        )
        + "INSERT INTO out\nSELECT * FROM Orders\nINNER JOIN Product\n"
        "ON Orders.productId = Product.id;"
    )
    orders = [
        {"id": "o1", "productId": "p1", "amount": 10},
        {"id": "o2", "productId": "p2", "amount": 20},
        {"id": "o3", "productId": "p9", "amount": 30},
    ]
    products = [{"id": "p1", "name": "scooter"}, {"id": "p2", "name": "ball"}]
    table, _ = run_script(kafka, tmp_path, script, {"Orders": orders, "Product": products})
    assert table == Counter(
        {("o1", "p1", 10, "p1", "scooter"): 1, ("o2", "p2", 20, "p2", "ball"): 1}
    )


def test_each_column_is_written_as_the_output_table_declares_its_type(
    kafka: str, tmp_path: Path
) -> None:
    """As Flink's INSERT casts a query's column to its output column's type (Flink 2.3's
    output in `fixtures/functions/flink_sink_casts.json`): a name cut to VARCHAR(3), a DOUBLE
    rounded half up to DECIMAL(5,2), a TIMESTAMP(3) cut to TIMESTAMP(0), to its DATE, and
    written with a `Z` as a TIMESTAMP_LTZ(3)."""
    script = (
        kafka_table("Orders", "id STRING, productId STRING, at TIMESTAMP(3)", "{Orders}")
        + kafka_table("Product", "id STRING, name STRING, price DOUBLE", "{Product}")
        + kafka_table(
            "out",
            "id STRING, name VARCHAR(3), price DECIMAL(5,2), at TIMESTAMP(0), "
            "day DATE, zoned TIMESTAMP_LTZ(3)",
            "{out}",
        )
        + "INSERT INTO out\nSELECT o.id, p.name, p.price, o.at, o.at, o.at\n"
        "FROM Orders AS o JOIN Product AS p ON o.productId = p.id;"
    )
    orders = [{"id": "o1", "productId": "p1", "at": "2024-01-01 10:00:00.923"}]
    products = [{"id": "p1", "name": "scooter", "price": 2.675}]
    table, _ = run_script(kafka, tmp_path, script, {"Orders": orders, "Product": products})
    assert table == Counter(
        {
            (
                "o1",
                "sco",
                2.68,
                "2024-01-01 10:00:00",
                "2024-01-01",
                "2024-01-01 10:00:00.923Z",
            ): 1
        }
    )


def test_an_interval_join_written_as_a_comma_join_with_its_bounds_in_where(
    kafka: str, tmp_path: Path
) -> None:
    """WHERE o.id = s.orderId AND o.ordertime BETWEEN s.shiptime - INTERVAL '4' HOUR AND
    s.shiptime"""
    script = (
        kafka_table(
            "Orders",
            "id STRING, ordertime TIMESTAMP(3),\n  WATERMARK FOR ordertime AS "
            "ordertime - INTERVAL '5' SECOND",
            "{Orders}",
        )
        + kafka_table(
            "Shipments",
            "orderId STRING, shiptime TIMESTAMP(3),\n  WATERMARK FOR shiptime AS shiptime",
            "{Shipments}",
        )
        + kafka_table("out", "id STRING, shipped TIMESTAMP(3)", "{out}")
        + "INSERT INTO out\nSELECT o.id, s.shiptime\nFROM\n  Orders o,\n  Shipments s\n"
        "WHERE o.id = s.orderId AND\n"
        "      o.ordertime BETWEEN s.shiptime - INTERVAL '4' HOUR AND s.shiptime;"
    )
    orders = [
        {"id": "o1", "ordertime": "2026-11-24 10:00:00"},
        {"id": "o2", "ordertime": "2026-11-24 10:00:00"},
        {"id": "o3", "ordertime": "2026-11-24 10:30:00"},
    ]
    shipments = [
        {"orderId": "o1", "shiptime": "2026-11-24 12:00:00"},
        {"orderId": "o2", "shiptime": "2026-11-24 15:00:00"},
    ]
    table, _ = run_script(kafka, tmp_path, script, {"Orders": orders, "Shipments": shipments})
    assert table == Counter({("o1", "2026-11-24 12:00:00"): 1})


def test_unqualified_columns_and_a_residual_condition(kafka: str, tmp_path: Path) -> None:
    """SELECT a1, b1 FROM A JOIN B ON a1 = b1 and a2 > b2"""
    script = (
        kafka_table("A", "a1 INT, a2 INT, a3 INT", "{A}")
        + kafka_table("B", "b1 INT, b2 INT, b3 INT", "{B}")
        + kafka_table("out", "a1 INT, b1 INT", "{out}")
        + "INSERT INTO out SELECT a1, b1 FROM A JOIN B ON a1 = b1 and a2 > b2;"
    )
    a = [{"a1": 1, "a2": 5, "a3": 0}, {"a1": 2, "a2": 1, "a3": 0}, {"a1": 3, "a2": 3, "a3": 0}]
    b = [{"b1": 1, "b2": 2, "b3": 0}, {"b1": 2, "b2": 2, "b3": 0}, {"b1": 3, "b2": 3, "b3": 0}]
    table, _ = run_script(kafka, tmp_path, script, {"A": a, "B": b})
    assert table == Counter({(1, 1): 1})


SEMI_ANTI_TABLES = (
    kafka_table("l", "a INT, b STRING", "{l}")
    + kafka_table("r", "d INT, e STRING", "{r}")
    + kafka_table("out", "a INT, b STRING", "{out}", "debezium-json")
)
L_ROWS = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": None, "b": "z"}]


@pytest.mark.parametrize(
    ("query", "right", "expected"),
    [
        ("SELECT * FROM l WHERE a IN (SELECT d FROM r)", [1, 1, None], {(1, "x")}),
        # NOT IN is null-aware: a NULL a is in no list, and a NULL d leaves no row
        ("SELECT * FROM l WHERE a NOT IN (SELECT d FROM r)", [1, 3], {(2, "y")}),
        ("SELECT * FROM l WHERE a NOT IN (SELECT d FROM r)", [1, None], set()),
    ],
    ids=["semi", "anti", "anti-null"],
)
def test_in_and_not_in_subqueries_are_semi_and_anti_joins(
    kafka: str, tmp_path: Path, query: str, right: list, expected: set
) -> None:
    r = [{"d": d, "e": "-"} for d in right]
    table, _ = run_script(
        kafka, tmp_path, SEMI_ANTI_TABLES + f"INSERT INTO out {query};", {"l": L_ROWS, "r": r}
    )
    assert table == Counter(dict.fromkeys(expected, 1))


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    with PostgresCluster() as cluster:
        cluster.sql("CREATE TABLE rates (currency text PRIMARY KEY, rate integer)")
        cluster.sql("INSERT INTO rates VALUES ('Euro', 114), ('US Dollar', 102), ('Yen', 1)")
        yield cluster


@pytest.mark.skipif(not PostgresCluster.available(), reason="PostgreSQL 15 is not installed")
@pytest.mark.parametrize(
    ("key", "written"),
    [("o.currency", "{}"), ("TRIM(o.currency)", " {} ")],
    ids=["column", "computed"],
)
def test_the_latest_rates_as_of_processing_time_are_a_lookup_into_the_rates_table(
    kafka: str, tmp_path: Path, postgres: PostgresCluster, key: str, written: str
) -> None:
    """JOIN LatestRates FOR SYSTEM_TIME AS OF o.proctime AS r ON r.currency = o.currency, where
    LatestRates is the rates table's latest content: a JDBC table; or, as Flink computes a
    lookup key from the order, ON r.currency = TRIM(o.currency)."""
    script = (
        kafka_table("Orders", "amount INT, currency STRING, proctime AS PROCTIME()", "{Orders}")
        + "CREATE TABLE LatestRates (currency STRING, rate INT) WITH (\n"
        f"  'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:{postgres.port}/postgres',"
        "\n  'table-name' = 'rates', 'username' = 'postgres', 'lookup.cache' = 'PARTIAL',\n"
        "  'lookup.partial-cache.max-rows' = '100', "
        "'lookup.partial-cache.expire-after-write' = '1 min');\n"
        + kafka_table("out", "amount INT, currency STRING, rate INT, yen INT", "{out}")
        + "INSERT INTO out\nSELECT\n  o.amount, r.currency, r.rate, o.amount * r.rate\nFROM\n"
        "  Orders AS o\n  JOIN LatestRates FOR SYSTEM_TIME AS OF o.proctime AS r\n"
        f"  ON r.currency = {key};"
    )
    orders = [
        {"amount": 2, "currency": written.format("Euro")},
        {"amount": 1, "currency": written.format("US Dollar")},
        {"amount": 5, "currency": written.format("Pounds")},
    ]
    table, _ = run_script(kafka, tmp_path, script, {"Orders": orders})
    assert table == Counter({(2, "Euro", 114, 228): 1, (1, "US Dollar", 102, 102): 1})


def test_an_upsert_output_filtered_after_a_left_join_deletes_a_row_an_update_took_out(
    kafka: str, tmp_path: Path
) -> None:
    """`WHERE o.qty < 3` after a LEFT JOIN, into an upsert-kafka table keyed by the join key:
    the update of o1 to 5, in a second run from the first's checkpoint, leaves the filter, so
    the topic must lose o1 (the join retracts o1's joined row; the filter drops its new one)."""
    topics = {name: unique(name) for name in ("orders", "shipments", "out")}
    create_topics(kafka, [topics["orders"], topics["shipments"]])
    output_topics(kafka, topics["out"])
    script = (
        "CREATE TABLE orders (order_id STRING, qty INT, PRIMARY KEY (order_id) NOT ENFORCED) "
        "WITH ('connector' = 'upsert-kafka', 'topic' = '{orders}', 'key.format' = 'json', "
        "'value.format' = 'json');\n"
        + kafka_table("shipments", "ship_id STRING, order_id STRING", "{shipments}")
        + "CREATE TABLE out (order_id STRING, qty INT, ship_id STRING, PRIMARY KEY (order_id) "
        "NOT ENFORCED) WITH ('connector' = 'upsert-kafka', 'topic' = '{out}', "
        "'key.format' = 'json', 'value.format' = 'json');\n"
        "INSERT INTO out SELECT o.order_id, o.qty, s.ship_id FROM orders o LEFT JOIN shipments "
        "s ON s.order_id = o.order_id WHERE o.qty < 3;"
    )
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        STREAMJOIN_SQL=script.format(**topics),
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        TRIGGER_INTERVAL="available-now",
    )

    def run_with(orders: list[dict]) -> dict:
        produce(kafka, topics["orders"], rows(orders))
        result = run_to_exit(env, timeout_s=300)
        assert result.returncode == 0, result.stderr[-4000:]
        table = {}
        for record in committed_output(kafka, topics["out"], f"{topics['out']}.markers"):
            key = json.loads(record.key)["order_id"]
            table[key] = json.loads(record.value) if record.value is not None else None
        return {key: row for key, row in table.items() if row is not None}

    produce(kafka, topics["shipments"], rows([{"ship_id": "s1", "order_id": "o1"}]))
    first = run_with([{"order_id": "o1", "qty": 1}, {"order_id": "o2", "qty": 2}])
    assert first == {
        "o1": {"order_id": "o1", "qty": 1, "ship_id": "s1"},
        "o2": {"order_id": "o2", "qty": 2, "ship_id": None},
    }
    assert run_with([{"order_id": "o1", "qty": 5}]) == {
        "o2": {"order_id": "o2", "qty": 2, "ship_id": None}
    }
