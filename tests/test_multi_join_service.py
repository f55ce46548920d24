"""A chain of joins over three topics and a PostgreSQL table through `streamjoin run`,
configured by Flink SQL: orders, an upsert topic of customers, a Debezium table of products and
a lookup of exchange rates, joined in one Spark query, written exactly once; SIGKILLed in the
middle of the run."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from app.replay import stream_input, stream_records
from tests.kafka_io import committed_output, create_topics, output_topics, produce, unique
from tests.postgres import PostgresCluster
from tests.service import Service, run_to_exit, service_env
from tests.test_faults import commits, killed_runs, product_row
from tests.test_join_service import (
    debezium_changelog,
    final_table,
    produce_events,
    state_report,
)
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

SCRIPT = """CREATE TABLE orders (
  order_id STRING, customer_id STRING, product_id STRING, qty INT, currency STRING,
  proc AS PROCTIME()
) WITH ('connector' = 'kafka', 'topic' = '{orders}', 'format' = 'json');
CREATE TABLE customers (
  customer_id STRING, name STRING,
  PRIMARY KEY (customer_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{customers}', 'key.format' = 'json',
        'value.format' = 'json');
CREATE TABLE products (
  product_id STRING, name STRING, price DECIMAL(10, 2),
  PRIMARY KEY (product_id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = '{products}', 'format' = 'debezium-json');
CREATE TABLE rates (currency STRING, rate INT) WITH (
  'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:{port}/postgres',
  'table-name' = 'rates', 'username' = 'postgres');
CREATE TABLE enriched (
  order_id STRING, customer STRING, product STRING, price DECIMAL(10, 2), qty INT, rate INT
) WITH ('connector' = 'kafka', 'topic' = '{out}', 'format' = 'debezium-json');
INSERT INTO enriched
SELECT o.order_id, c.name, p.name, p.price, o.qty, r.rate
FROM orders AS o
JOIN customers AS c ON o.customer_id = c.customer_id
LEFT JOIN products AS p ON o.product_id = p.product_id
LEFT JOIN rates FOR SYSTEM_TIME AS OF o.proc AS r ON r.currency = o.currency;
"""
RATES = {"EUR": 114, "USD": 102}
MULTI_WAY = "SET 'table.optimizer.multi-join.enabled' = 'true';\n"


def upserts(rng: random.Random, count: int, key: str) -> list[tuple[str, dict | None]]:
    """An upsert topic's records over `count` ids (`key`, with its first letter before each):
    (id, row), None a tombstone."""
    live: set[str] = set()
    records: list[tuple[str, dict | None]] = []
    for _ in range(count * 3):
        rid = f"{key[0]}{rng.randrange(count)}"
        if rid in live and rng.random() < 0.25:
            live.discard(rid)
            records.append((rid, None))
        else:
            live.add(rid)
            records.append((rid, {key: rid, "name": f"name{rng.randrange(99)}"}))
    return records


def live_rows(records: list[tuple[str, dict | None]]) -> dict[str, dict]:
    """What an upsert topic's records leave, by id."""
    live: dict[str, dict] = {}
    for rid, row in records:
        if row is None:
            live.pop(rid, None)
        else:
            live[rid] = row
    return live


def produce_upserts(
    bootstrap: str, topic: str, records: list[tuple[str, dict | None]], key: str
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for rid, row in records:
        value = None if row is None else json.dumps(row).encode()
        producer.produce(topic, value, json.dumps({key: rid}).encode())
    assert producer.flush(30) == 0


def expected(orders: list[dict], customers: dict, products: dict) -> Counter:
    """orders JOIN customers LEFT JOIN products LEFT JOIN rates, over the final tables."""
    table: Counter = Counter()
    for order in orders:
        customer = customers.get(order["customer_id"])
        if customer is None:
            continue
        product = products.get(order["product_id"]) or {"name": None, "price": None}
        table[
            (
                order["order_id"],
                customer["name"],
                product["name"],
                product["price"],
                order["qty"],
                RATES.get(order["currency"]),
            )
        ] += 1
    return table


def committed_table(kafka: str, out: str) -> tuple[Counter, Counter]:
    """The committed Debezium output applied (a change applied twice shows as a count of 2 or
    -1), and its records themselves."""
    table: Counter = Counter()
    records: Counter = Counter()
    for record in committed_output(kafka, out, f"{out}.markers"):
        value = json.loads(record.value, parse_float=Decimal)
        row, sign = (value["after"], 1) if value["after"] is not None else (value["before"], -1)
        price = row["price"]
        key = (
            row["order_id"],
            row["customer"],
            row["product"],
            None if price is None else f"{price:.2f}",
            row["qty"],
            row["rate"],
        )
        table[key] += sign
        records[(value["op"], key)] += 1
    return table, records


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    if not PostgresCluster.available():
        pytest.skip("PostgreSQL 15 is not installed")
    with PostgresCluster() as cluster:
        cluster.sql("CREATE TABLE rates (currency text PRIMARY KEY, rate integer)")
        cluster.sql(
            "INSERT INTO rates VALUES " + ", ".join(f"('{c}', {r})" for c, r in RATES.items())
        )
        cluster.sql("CREATE TABLE tiers (tier text PRIMARY KEY, cut integer)")
        cluster.sql("INSERT INTO tiers VALUES ('gold', 10), ('silver', 5), ('bronze', 2)")
        yield cluster


def test_three_topics_and_a_lookup_joined_in_one_query_survive_sigkills_exactly_once(
    kafka: str,
    tmp_path: Path,
    spark: SparkSession,
    capsys: pytest.CaptureFixture,
    postgres: PostgresCluster,
) -> None:
    """The lookup, written last, names only the orders: it runs first, on the orders."""
    rng = random.Random(3)
    products = debezium_changelog(rng, "p", 30, product_row(rng), key="product_id")
    orders = [
        {
            "order_id": f"o{i}",
            "customer_id": f"c{rng.randrange(25)}",
            "product_id": f"p{rng.randrange(32)}",
            "qty": rng.randrange(1, 5),
            "currency": rng.choice(["EUR", "USD", "GBP"]),
        }
        for i in range(400)
    ]
    customers = upserts(rng, 20, "customer_id")
    topics = {name: unique(name) for name in ("orders", "customers", "products")}
    create_topics(kafka, list(topics.values()), partitions=2)
    produce_events(kafka, topics["products"], products, "product_id")
    produce_upserts(kafka, topics["customers"], customers, "customer_id")
    produce(kafka, topics["orders"], [json.dumps(order).encode() for order in orders], 2)
    live_customers = live_rows(customers)
    want = expected(orders, live_customers, final_table(products, "product_id"))

    def env(out: str, checkpoint: Path) -> dict[str, str]:
        return service_env(
            KAFKA_BOOTSTRAP_SERVERS=kafka,
            CHECKPOINT_LOCATION=str(checkpoint),
            STREAMJOIN_SQL=SCRIPT.format(out=out, port=postgres.port, **topics),
            TRIGGER_INTERVAL="available-now",
            MAX_RECORDS_PER_TRIGGER="60",
            SPARK_CONF_spark_sql_shuffle_partitions="2",
        )

    reference, out = unique("reference"), unique("enriched")
    for topic in (reference, out):
        output_topics(kafka, topic)
    done = run_to_exit(env(reference, tmp_path / "reference"), timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]
    reference_table, reference_records = committed_table(kafka, reference)
    assert +reference_table == want and -reference_table == Counter()
    batches = commits(tmp_path / "reference")
    assert batches >= 6, batches

    checkpoint = tmp_path / "killed"
    kill_after = sorted(rng.sample(range(1, batches - 2), 2))
    killed = killed_runs(
        env(out, checkpoint), lambda: commits(checkpoint), kill_after, rng, tmp_path
    )
    last = run_to_exit(env(out, checkpoint), timeout_s=600)
    assert last.returncode == 0, last.stderr[-3000:]
    assert killed >= 1
    # the same batches (their offsets are in the checkpoint) write the same changes, once each
    assert committed_table(kafka, out) == (reference_table, reference_records)
    # each join's state read back under its own name: the lookup holds none; the second join
    # holds the looked-up orders by customer, the third the second's result by product
    held = state_report(env(out, checkpoint), capsys, spark)
    keys = {(o["operator"], o["side"]): o["keys"] for o in held["operators"]}
    joined = [o for o in orders if o["customer_id"] in live_customers]
    assert keys == {
        ("join3", "left"): len({o["product_id"] for o in joined}),
        ("join3", "right"): len(final_table(products, "product_id")),
        ("join2", "left"): len({o["customer_id"] for o in orders}),
        ("join2", "right"): len(live_customers),
        ("normalizer", "input3"): len(live_customers),
        ("normalizer", "input4"): len(final_table(products, "product_id")),
    }


STAR = """{multi}CREATE TABLE orders (
  order_id STRING, user_id STRING, amount INT, PRIMARY KEY (order_id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = '{orders}', 'format' = 'debezium-json');
CREATE TABLE users (
  user_id STRING, name STRING, PRIMARY KEY (user_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{users}', 'key.format' = 'json',
        'value.format' = 'json');
CREATE TABLE accounts (user_id STRING, tier STRING)
WITH ('connector' = 'kafka', 'topic' = '{accounts}', 'format' = 'json');
CREATE TABLE enriched (order_id STRING, name STRING, tier STRING, amount INT)
WITH ('connector' = 'kafka', 'topic' = '{out}', 'format' = 'debezium-json');
INSERT INTO enriched
SELECT o.order_id, u.name, a.tier, o.amount
FROM orders AS o
JOIN users AS u ON o.user_id = u.user_id
LEFT JOIN accounts AS a ON o.user_id = a.user_id;
"""


def test_a_star_over_one_key_runs_as_one_operator_keeping_only_the_inputs_rows(
    kafka: str, tmp_path: Path, spark: SparkSession, capsys: pytest.CaptureFixture
) -> None:
    """`table.optimizer.multi-join.enabled`: orders (Debezium), users (upsert) and accounts
    (append-only) over the user id, as one multi-way operator: the chain's output, and state of
    the inputs' rows only."""
    rng = random.Random(11)
    orders = debezium_changelog(
        rng,
        "o",
        120,
        lambda oid: {
            "order_id": oid,
            "user_id": f"u{rng.randrange(12)}",
            "amount": rng.randrange(1, 9),
        },
    )
    users = upserts(rng, 10, "user_id")
    accounts = [
        {"user_id": f"u{i}", "tier": tier}
        for i in range(0, 12, 2)
        for tier in ("gold", "silver")[: 1 + i % 3 // 2]
    ]
    topics = {name: unique(name) for name in ("orders", "users", "accounts")}
    create_topics(kafka, list(topics.values()), partitions=2)
    produce_events(kafka, topics["orders"], orders, "order_id")
    produce_upserts(kafka, topics["users"], users, "user_id")
    produce(kafka, topics["accounts"], [json.dumps(a).encode() for a in accounts], 2)
    live_users = {uid: row["name"] for uid, row in live_rows(users).items()}
    want: Counter = Counter()
    for order in final_table(orders, "order_id").values():
        if order["user_id"] in live_users:
            tiers = [a["tier"] for a in accounts if a["user_id"] == order["user_id"]] or [None]
            for tier in tiers:
                want[(order["order_id"], live_users[order["user_id"]], tier, order["amount"])] += 1
    out = unique("enriched")
    output_topics(kafka, out)
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        STREAMJOIN_SQL=STAR.format(multi=MULTI_WAY, out=out, **topics),
        TRIGGER_INTERVAL="available-now",
    )
    done = run_to_exit(env, timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]
    table: Counter = Counter()
    for record in committed_output(kafka, out, f"{out}.markers"):
        value = json.loads(record.value)
        row, sign = (value["after"], 1) if value["after"] is not None else (value["before"], -1)
        table[(row["order_id"], row["name"], row["tier"], row["amount"])] += sign
    assert +table == want and -table == Counter()
    held = state_report(env, capsys, spark)
    rows = {(o["operator"], o["side"]): o["rows"] for o in held["operators"]}
    live_orders = final_table(orders, "order_id")
    assert rows == {  # one operator: each input's rows, no result of a join
        ("join", "left"): len(live_orders),
        ("join", "right"): len(live_users),
        ("join", "input3"): len(accounts),
        ("normalizer", "left"): len(live_orders),
        ("normalizer", "right"): len(live_users),
    }


ENRICHMENT = """CREATE TABLE orders (
  order_id STRING, customer_id STRING, product_id STRING, order_time TIMESTAMP(3),
  proc_time AS PROCTIME(), WATERMARK FOR order_time AS order_time
) WITH ('connector' = 'kafka', 'topic' = '{orders}', 'format' = 'json');
CREATE TABLE customers (
  customer_id STRING, name STRING, tier STRING, PRIMARY KEY (customer_id) NOT ENFORCED
) WITH ('connector' = 'upsert-kafka', 'topic' = '{customers}', 'key.format' = 'json',
        'value.format' = 'json');
CREATE TABLE products (
  product_id STRING, name STRING, price DECIMAL(10, 2), currency STRING,
  update_time TIMESTAMP(3), PRIMARY KEY (product_id) NOT ENFORCED,
  WATERMARK FOR update_time AS update_time
) WITH ('connector' = 'kafka', 'topic' = '{products}', 'format' = 'debezium-json');
CREATE TABLE rates (currency STRING, rate INT) WITH (
  'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:{port}/postgres',
  'table-name' = 'rates', 'username' = 'postgres');
CREATE TABLE tiers (tier STRING, cut INT) WITH (
  'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:{port}/postgres',
  'table-name' = 'tiers', 'username' = 'postgres', 'lookup.cache' = 'PARTIAL');
CREATE TABLE enriched (
  order_id STRING, name STRING, tier STRING, product STRING, price DECIMAL(10, 2), rate INT,
  cut INT
) WITH ('connector' = 'kafka', 'topic' = '{out}', 'format' = 'debezium-json');
INSERT INTO enriched
SELECT o.order_id, c.name, c.tier, p.name, p.price, r.rate, t.cut
FROM orders AS o
JOIN customers AS c ON o.customer_id = c.customer_id
LEFT JOIN products FOR SYSTEM_TIME AS OF o.order_time AS p ON o.product_id = p.product_id
LEFT JOIN rates FOR SYSTEM_TIME AS OF o.proc_time AS r ON p.currency = r.currency
JOIN tiers FOR SYSTEM_TIME AS OF o.proc_time AS t ON c.tier = t.tier;
"""


def at(clock: str) -> int:
    """Epoch ms of a time of 2026-11-24 (UTC)."""
    return round(datetime.fromisoformat(f"2026-11-24 {clock}+00:00").timestamp() * 1000)


def test_the_issues_enrichment_runs_a_regular_a_temporal_and_two_lookup_joins_in_one_query(
    kafka: str, tmp_path: Path, postgres: PostgresCluster
) -> None:
    """The issue's own query: customers (upsert) joined regularly, products (Debezium) as of
    the order's time, the rate looked up by the product's currency, which only the temporal
    join brings; and an INNER lookup of the customer's tier in a second table (a cache of its
    own). The temporal join names only the orders, so it runs first; the lookups then take the
    regular join's changelog, a customer's update looked up again."""
    products = {
        "fields": [
            ["product_id", "STRING"],
            ["name", "STRING"],
            ["price", "DECIMAL(10, 2)"],
            ["currency", "STRING"],
        ],
        "rowtime": "update_time",
        "primary_key": ["product_id"],
        "changelog": "all",
        "rows": [
            {"op": "+I", "ts": at("10:00"), "v": ["p1", "ball", "10.00", "EUR"]},
            {"op": "+I", "ts": at("10:00"), "v": ["p2", "scooter", "20.00", "USD"]},
            {"op": "+I", "ts": at("10:00"), "v": ["p4", "kite", "5.00", "GBP"]},
            {"op": "-U", "ts": at("10:00"), "v": ["p1", "ball", "10.00", "EUR"]},
            {"op": "+U", "ts": at("11:00"), "v": ["p1", "ball", "12.00", "USD"]},
            # one closing row in each of the topic's two partitions: an input's watermark is its
            # partitions' least, as in Flink, so each must move past the orders
            {"op": "+I", "ts": at("23:00"), "v": ["p9", "closing", "1.00", "EUR"]},
            {"op": "+I", "ts": at("23:00"), "v": ["p10", "closing", "1.00", "EUR"]},
        ],
    }
    orders = {
        "fields": [["order_id", "STRING"], ["customer_id", "STRING"], ["product_id", "STRING"]],
        "rowtime": "order_time",
        "rows": [
            {"op": "+I", "ts": at(clock), "v": [oid, cid, pid]}
            for oid, cid, pid, clock in (
                ("o1", "c1", "p1", "10:30"),
                ("o2", "c2", "p1", "11:30"),
                ("o3", "c1", "p2", "10:15"),
                ("o4", "c2", "p3", "10:45"),
                ("o5", "c3", "p1", "10:40"),
                ("o6", "c1", "p2", "09:00"),
                ("o7", "c2", "p4", "10:50"),
                ("o8", "c4", "p1", "11:40"),
                ("closing", "c9", "p9", "23:00"),
                ("closing too", "c9", "p9", "23:00"),
            )
        ],
    }
    customers = [
        ("c1", {"customer_id": "c1", "name": "Ann", "tier": "gold"}),
        ("c2", {"customer_id": "c2", "name": "Bob", "tier": "silver"}),
        ("c3", {"customer_id": "c3", "name": "Cid", "tier": "bronze"}),
        ("c1", {"customer_id": "c1", "name": "Anna", "tier": "gold"}),
        ("c3", None),
        ("c4", {"customer_id": "c4", "name": "Dee", "tier": "platinum"}),
    ]
    topics = {name: unique(name) for name in ("orders", "customers", "products")}
    create_topics(kafka, list(topics.values()), partitions=2)
    produce_upserts(kafka, topics["customers"], customers, "customer_id")
    for name, stream in (("orders", orders), ("products", products)):
        records = stream_records(stream, stream_input("left", name, stream))
        produce(kafka, topics[name], [value for _key, value, _ts in records], 2)
    out = unique("enriched")
    output_topics(kafka, out)
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        STREAMJOIN_SQL=ENRICHMENT.format(out=out, port=postgres.port, **topics),
        TRIGGER_INTERVAL="200ms",
    )
    want = Counter(
        {  # Dee's platinum tier has no row: her order is not joined
            ("o1", "Anna", "gold", "ball", "10.00", 114, 10): 1,  # the ball's euro price at 10:30
            ("o2", "Bob", "silver", "ball", "12.00", 102, 5): 1,  # its dollar price from 11:00
            ("o3", "Anna", "gold", "scooter", "20.00", 102, 10): 1,
            ("o4", "Bob", "silver", None, None, None, 5): 1,  # no such product
            ("o6", "Anna", "gold", None, None, None, 10): 1,  # before the scooter's first version
            ("o7", "Bob", "silver", "kite", "5.00", None, 5): 1,  # no rate for GBP
        }
    )
    service = Service(env, tmp_path / "log")
    try:
        wait_for(
            lambda: enriched(kafka, out) == want,
            300,
            "the output never became the query's",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]


def enriched(kafka: str, out: str) -> Counter:
    """The committed Debezium output of the issue's query, applied."""
    applied: Counter = Counter()
    for record in committed_output(kafka, out, f"{out}.markers"):
        value = json.loads(record.value, parse_float=Decimal)
        row, sign = (value["after"], 1) if value["after"] else (value["before"], -1)
        price = None if row["price"] is None else f"{row['price']:.2f}"
        applied[
            (
                row["order_id"],
                row["name"],
                row["tier"],
                row["product"],
                price,
                row["rate"],
                row["cut"],
            )
        ] += sign
    return applied


LOOKUP_ADDED = """CREATE TABLE orders (
  order_id STRING, product_id STRING, qty INT, proc AS PROCTIME()
) WITH ('connector' = 'kafka', 'topic' = '{orders}', 'format' = 'json');
CREATE TABLE products (
  product_id STRING, name STRING, currency STRING,
  PRIMARY KEY (product_id) NOT ENFORCED
) WITH ('connector' = 'kafka', 'topic' = '{products}', 'format' = 'debezium-json');
CREATE TABLE rates (currency STRING, rate INT) WITH (
  'connector' = 'jdbc', 'url' = 'jdbc:postgresql://127.0.0.1:{port}/postgres',
  'table-name' = 'rates', 'username' = 'postgres');
CREATE TABLE enriched (order_id STRING, product STRING, qty INT{rate_column})
WITH ('connector' = 'kafka', 'topic' = '{out}', 'format' = 'debezium-json');
INSERT INTO enriched
SELECT o.order_id, p.name, o.qty{rate}
FROM orders AS o
LEFT JOIN products AS p ON o.product_id = p.product_id{lookup};
"""


def test_a_lookup_added_after_the_stateful_join_resumes_and_writes_what_the_new_job_writes(
    kafka: str, tmp_path: Path, postgres: PostgresCluster
) -> None:
    """A job gains a lookup of each joined product's rate, after its regular join (the lookup
    names the product): it keeps no state, so the job resumes on its checkpoint, and from
    there writes, change for change, what the new job started from the topics writes."""
    topics = {name: unique(name) for name in ("orders", "products")}
    create_topics(kafka, list(topics.values()))
    p1, p2 = (
        {"product_id": pid, "name": name, "currency": currency}
        for pid, name, currency in (("p1", "ball", "EUR"), ("p2", "kite", "USD"))
    )
    produce_events(
        kafka, topics["products"], [{"before": None, "after": p1, "op": "c"}], "product_id"
    )
    orders = [{"order_id": "o1", "product_id": "p1", "qty": 1}]
    produce(kafka, topics["orders"], [json.dumps(order).encode() for order in orders], 1)

    def env(out: str, checkpoint: str, looked_up: bool) -> dict[str, str]:
        lookup = {"rate_column": "", "rate": "", "lookup": ""}
        if looked_up:
            lookup = {
                "rate_column": ", rate INT",
                "rate": ", r.rate",
                "lookup": "\nLEFT JOIN rates FOR SYSTEM_TIME AS OF o.proc AS r "
                "ON r.currency = p.currency",
            }
        sql = LOOKUP_ADDED.format(out=out, port=postgres.port, **topics, **lookup)
        return service_env(
            KAFKA_BOOTSTRAP_SERVERS=kafka,
            CHECKPOINT_LOCATION=str(tmp_path / checkpoint),
            STREAMJOIN_SQL=sql,
            TRIGGER_INTERVAL="available-now",
        )

    out, fresh_out = unique("enriched"), unique("fresh")
    for topic in (out, fresh_out):
        output_topics(kafka, topic)
    for first in (env(out, "ck", looked_up=False), env(fresh_out, "fresh", looked_up=True)):
        done = run_to_exit(first, timeout_s=300)
        assert done.returncode == 0, done.stderr[-3000:]
    written = [len(committed_output(kafka, t, f"{t}.markers")) for t in (out, fresh_out)]
    changes = [
        {"before": p1, "after": p1 | {"currency": "USD"}, "op": "u"},
        {"before": None, "after": p2, "op": "c"},
    ]
    produce_events(kafka, topics["products"], changes, "product_id")
    orders = [{"order_id": "o2", "product_id": "p2", "qty": 2}]
    produce(kafka, topics["orders"], [json.dumps(order).encode() for order in orders], 1)
    resumed, new = Counter(), Counter()
    for counted, topic, checkpoint, before in (
        (resumed, out, "ck", written[0]),
        (new, fresh_out, "fresh", written[1]),
    ):
        done = run_to_exit(env(topic, checkpoint, looked_up=True), timeout_s=300)
        assert done.returncode == 0, done.stderr[-3000:]
        for record in committed_output(kafka, topic, f"{topic}.markers")[before:]:
            value = json.loads(record.value)
            counted[(value["op"], json.dumps([value["before"], value["after"]]))] += 1
    assert resumed == new
    o2 = {"order_id": "o2", "product": "kite", "qty": 2, "rate": 102}
    assert resumed[("c", json.dumps([None, o2]))] == 1
