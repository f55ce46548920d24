"""`streamjoin run` with a lookup join: orders from Kafka enriched from a PostgreSQL table."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config.redaction import MASK
from serdes.postgres.client import LookupFailed, PostgresTable, TableLookup
from tests.alerting import assert_monitoring_reads_what_is_served
from tests.kafka_io import committed_output, create_topics, output_topics, produce, unique
from tests.postgres import PostgresCluster
from tests.service import Service, run_to_exit, service_env, streamjoin_command
from tests.test_join_service import scrape
from tests.test_service import wait_for

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not PostgresCluster.available(), reason="PostgreSQL 15 is not installed"),
]

DOWNTIME_S = 5.0
PRODUCTS = [
    ("p1", "scooter", "11.11", "toys"),
    ("p2", "basketball", "23.11", "sport"),
    ("p3", "kite", "5.00", "toys"),
    ("p5", "hoop", "3.00", "retired"),
]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    with PostgresCluster(settings="log_statement = 'all'\n") as cluster:
        yield cluster


@pytest.fixture
def table(postgres: PostgresCluster) -> str:
    name = unique("products").replace("-", "_")
    postgres.sql(
        f"CREATE TABLE {name} (product_id text PRIMARY KEY, name text, "
        "price numeric(10,2), category text)"
    )
    postgres.sql(
        f"INSERT INTO {name} VALUES "
        + ", ".join(f"('{p}', '{n}', {price}, '{c}')" for p, n, price, c in PRODUCTS)
    )
    return name


def lookup_env(
    kafka: str,
    postgres: PostgresCluster,
    table: str,
    orders: str,
    out: str,
    checkpoint: Path,
    **variables: str,
) -> dict[str, str]:
    return service_env(
        **{
            "KAFKA_BOOTSTRAP_SERVERS": kafka,
            "LEFT_TOPIC": orders,
            "OUTPUT_TOPIC": out,
            "CHECKPOINT_LOCATION": str(checkpoint),
            "TRIGGER_INTERVAL": "200ms",
            "LEFT_SCHEMA": "order_id STRING, product_id STRING",
            "JOIN_TYPE": "lookup",
            "JOIN_ON": "L.product_id = R.product_id",
            "OUTPUT_ENCODING": "append",
            "JOIN_SELECT": "L.order_id, R.name, R.price",
            "LOOKUP_URL": f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres",
            "LOOKUP_TABLE": table,
            **variables,
        }
    )


def send_orders(kafka: str, topic: str, orders: list[tuple[str, str]]) -> None:
    produce(
        kafka, topic, [json.dumps({"order_id": o, "product_id": p}).encode() for o, p in orders]
    )


def rows(kafka: str, out: str) -> list[tuple]:
    return sorted(
        (v["order_id"], v["name"], v["price"])
        for v in (json.loads(r.value) for r in committed_output(kafka, out, f"{out}.markers"))
    )


@pytest.fixture
def topics(kafka: str) -> tuple[str, str]:
    orders, out = unique("orders"), unique("out")
    create_topics(kafka, [orders])
    output_topics(kafka, out)
    return orders, out


def run_until(env: dict[str, str], log: Path, done, what: str) -> Service:
    service = Service(env, log)
    wait_for(done, 240, what, service)
    return service


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_orders_are_enriched_from_the_table_filtered_by_the_database_by_join_kind(
    kafka: str, postgres: PostgresCluster, table: str, topics, tmp_path: Path, kind: str
) -> None:
    """A condition on the table alone is the database's to filter, its literal a parameter;
    the rest is evaluated on each pair found; an order whose product is missing or filtered
    out, or whose pair fails the rest, is dropped (INNER) or padded (LEFT)."""
    orders, out = topics
    send_orders(
        kafka,
        orders,
        [("o1", "p1"), ("o2", "p9"), ("o3", "p2"), ("o4", "p1"), ("o5", "p5"), ("o6", "p1")],
    )
    env = lookup_env(
        kafka,
        postgres,
        table,
        orders,
        out,
        tmp_path / "ck",
        JOIN_KIND=kind,
        JOIN_ON="L.product_id = R.product_id AND R.category <> 'retired' AND L.order_id <> 'o6'",
    )
    expected = [("o1", "scooter", 11.11), ("o3", "basketball", 23.11), ("o4", "scooter", 11.11)]
    if kind == "left":
        expected = sorted([*expected, ("o2", None, None), ("o5", None, None), ("o6", None, None)])
    service = run_until(
        env,
        tmp_path / "log",
        lambda: len(rows(kafka, out)) >= len(expected),
        "the enriched orders never came",
    )
    # a lookup's counts reach the driver as its task ends, after its transaction committed:
    # each reading task's own, so the output can be complete before the last of them
    keys, misses = (f'streamjoin_lookup_events_total{{event="{e}"}}' for e in ("key", "miss"))
    joined = 'streamjoin_changes_total{kind="+I"}'  # the join's output, counted by those tasks
    wait_for(
        lambda: (
            metric(service, keys) >= 4
            and metric(service, misses) >= 4
            and metric(service, joined) >= len(expected)
        ),
        60,
        "the lookups never reached /metrics",
        service,
    )
    page = scrape(service)
    assert service.terminate() == 0, service.log()[-3000:]
    assert rows(kafka, out) == expected
    assert metric_in(page, "streamjoin_lookup_seconds_count") >= 1
    assert metric_in(page, joined) == len(expected)
    assert_monitoring_reads_what_is_served(page)
    sent = [line for line in postgres.log.read_text().splitlines() if f'"{table}"' in line]
    assert any(
        f'FROM "{table}" AS t WHERE t."product_id" = ANY($1::text[]) AND "category" <> $2' in line
        for line in sent
    ), sent
    assert not any("'retired'" in line for line in sent)


def test_a_database_down_mid_run_costs_retries_and_loses_nothing(
    kafka: str, postgres: PostgresCluster, table: str, topics, tmp_path: Path
) -> None:
    orders, out = topics
    env = lookup_env(kafka, postgres, table, orders, out, tmp_path / "ck", LOOKUP_MAX_RETRIES="8")
    first = [(f"o{i}", f"p{1 + i % 3}") for i in range(20)]
    send_orders(kafka, orders, first)
    service = run_until(env, tmp_path / "log", lambda: len(rows(kafka, out)) == 20, "no output")
    second = [(f"o{i}", f"p{1 + i % 3}") for i in range(20, 40)]
    try:
        postgres.crash()
        send_orders(kafka, orders, second)  # looked up while the database is down
        time.sleep(DOWNTIME_S)  # the fault itself: retries span 25 s with LOOKUP_MAX_RETRIES=8
        postgres.start()
        wait_for(lambda: len(rows(kafka, out)) >= 40, 120, "orders lost after the restart", service)
        wait_for(
            lambda: metric(service, 'streamjoin_lookup_events_total{event="retry"}') >= 1,
            60,
            "no lookup was retried",
            service,
        )
    finally:
        postgres.start()
        assert service.terminate() == 0, service.log()[-3000:]
    names = {p: n for p, n, _, _ in PRODUCTS}
    assert [(o, n) for o, n, _ in rows(kafka, out)] == sorted(
        (o, names[p]) for o, p in first + second
    )


def metric_in(page: str, name: str) -> float:
    values = [
        float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(name + " ")
    ]
    return values[0] if values else 0.0


def metric(service: Service, name: str) -> float:
    return metric_in(scrape(service), name)


@pytest.mark.parametrize("cache", ["partial", "full"])
def test_a_table_change_is_seen_once_the_cache_expires_or_reloads(
    kafka: str, postgres: PostgresCluster, table: str, topics, tmp_path: Path, cache: str
) -> None:
    """Caches live per Python worker process: a row is at most as old as the expiry (partial)
    or the reload interval (full), and may be fresher, when another worker's cache answers."""
    orders, out = topics
    ttl = (
        {"LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE": "3s"}
        if cache == "partial"
        else {"LOOKUP_FULL_CACHE_RELOAD_INTERVAL": "3s"}
    )
    env = lookup_env(
        kafka,
        postgres,
        table,
        orders,
        out,
        tmp_path / "ck",
        JOIN_KIND="left",
        LOOKUP_CACHE=cache,
        **ttl,
    )
    send_orders(kafka, orders, [("o1", "p1"), ("o2", "p4")])
    service = run_until(env, tmp_path / "log", lambda: len(rows(kafka, out)) == 2, "no output")
    try:
        postgres.sql(f"UPDATE {table} SET price = 12.50 WHERE product_id = 'p1'")
        postgres.sql(f"INSERT INTO {table} VALUES ('p4', 'yoyo', 2.00, 'toys')")
        changed = time.monotonic()
        while time.monotonic() - changed < 3.5:  # past expiry and reload, whatever the load
            time.sleep(0.1)
        send_orders(kafka, orders, [("o3", "p1"), ("o4", "p4")])
        wait_for(lambda: len(rows(kafka, out)) == 4, 60, "no rows after the change", service)
        if cache == "full":  # every key answered from the loaded table, counted as tasks end
            hits = 'streamjoin_lookup_events_total{event="hit"}'
            wait_for(lambda: metric(service, hits) >= 2, 60, "no hits on /metrics", service)
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert rows(kafka, out) == [
        ("o1", "scooter", 11.11),
        ("o2", None, None),
        ("o3", "scooter", 12.5),
        ("o4", "yoyo", 2.0),
    ]


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            {"LOOKUP_TABLE": "no_such_table"},
            "streamjoin: LOOKUP_TABLE: expected a PostgreSQL table the service can query; no "
            "table 'no_such_table' in the database",
        ),
        (
            {"LOOKUP_URL": "postgresql://postgres@127.0.0.1:1/postgres"},
            "streamjoin: LOOKUP_URL: expected a PostgreSQL table the service can query; cannot "
            "query the database: ",
        ),
        (
            {"RIGHT_SCHEMA": "product_id STRING, colour STRING"},
            "streamjoin: RIGHT_SCHEMA: expected columns of ",
        ),
        (
            {"RIGHT_SCHEMA": "product_id STRING, name STRING, price DOUBLE, category INT"},
            "streamjoin: RIGHT_SCHEMA: expected types the table's columns can be read into (the "
            "same, or wider); price DOUBLE for its numeric(10,2), category INT for its text",
        ),
        (
            {"JOIN_KIND": "full"},
            "streamjoin: JOIN_KIND: expected inner or left, for JOIN_TYPE=lookup",
        ),
    ],
)
def test_a_lookup_that_cannot_work_is_refused_at_start_up(
    kafka: str,
    postgres: PostgresCluster,
    table: str,
    topics,
    tmp_path: Path,
    change: dict,
    line: str,
) -> None:
    orders, out = topics
    env = lookup_env(kafka, postgres, table, orders, out, tmp_path / "ck", **change)
    result = run_to_exit(env)
    assert result.returncode == 2, result.stderr
    [printed] = result.stderr.splitlines()
    assert printed.startswith(line), printed


def test_check_shows_the_lookup_plan_with_the_query_sent_and_no_password(
    kafka: str, postgres: PostgresCluster, table: str, topics, tmp_path: Path
) -> None:
    orders, out = topics
    env = lookup_env(
        kafka,
        postgres,
        table,
        orders,
        out,
        tmp_path / "ck",
        JOIN_ON="L.product_id = R.product_id AND R.price > 10 AND L.order_id <> R.name",
        LOOKUP_CACHE="partial",
        LOOKUP_PASSWORD="hunter2-lookup",
    )
    result = subprocess.run(
        [*streamjoin_command(), "check"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    where = f"postgresql://{MASK}@127.0.0.1:{postgres.port}/postgres"  # the user masked too
    assert f"right: table {table} (PostgreSQL, {where})" in lines
    assert "join: lookup INNER (processing time), append-only" in lines
    assert (
        f'  query: SELECT t."product_id", t."name", t."price", t."category" FROM "{table}" '
        'AS t WHERE t."product_id" = ANY($1::text[]) AND "price" > $2'
    ) in lines
    assert "  evaluated after the lookup: L.order_id <> R.name" in lines
    assert "hunter2-lookup" not in result.stdout + result.stderr


def test_a_numeric_value_is_fitted_to_its_decimal_column_as_flinks_jdbc_source_does(
    kafka: str, postgres: PostgresCluster, topics, tmp_path: Path
) -> None:
    """An unbounded `numeric` is read as DECIMAL(38,18): a value of more decimals is rounded
    half up, one beyond its 20 whole digits is NULL (Flink's `DecimalData.fromBigDecimal`);
    such a value failed the lookup's task, and the query with it."""
    orders, out = topics
    table = unique("amounts").replace("-", "_")
    postgres.sql(f"CREATE TABLE {table} (product_id text PRIMARY KEY, name text, price numeric)")
    postgres.sql(
        f"INSERT INTO {table} VALUES ('p1', 'fine', 1.2345678901234567895), ('p2', 'huge', 1e25)"
    )
    send_orders(kafka, orders, [("o1", "p1"), ("o2", "p2")])
    env = lookup_env(kafka, postgres, table, orders, out, tmp_path / "ck")
    service = run_until(
        env, tmp_path / "log", lambda: len(rows(kafka, out)) >= 2, "the enriched orders never came"
    )
    assert service.terminate() == 0, service.log()[-3000:]
    assert rows(kafka, out) == [("o1", "fine", 1.23456789012345679), ("o2", "huge", None)]
    [fine] = [r for r in committed_output(kafka, out, f"{out}.markers") if b"o1" in r.value]
    assert b'"price":1.234567890123456790' in fine.value


def test_after_a_database_restart_the_first_lookup_needs_no_retry(
    postgres: PostgresCluster, table: str
) -> None:
    """A worker's pooled connection died with the server: its next lookup is re-sent on a fresh
    connection, not failed, even with `LOOKUP_MAX_RETRIES=0`; a server still down fails it."""
    lookup = TableLookup(
        f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres",
        table,
        ("product_id", "name"),
        ("product_id",),
        ("text",),
        max_retries=0,
        timeout_s=5,
    )
    worker = PostgresTable(lookup)
    assert worker.fetch([("p1",)]) == {("p1",): [("p1", "scooter")]}
    postgres.crash()
    postgres.start()
    assert worker.fetch([("p3",)]) == {("p3",): [("p3", "kite")]}
    assert (worker.stats.retries, worker.stats.errors) == (0, 0)
    postgres.crash()
    try:
        with pytest.raises(LookupFailed, match="failed after 1 attempts"):
            worker.fetch([("p2",)])
    finally:
        postgres.start()


def test_with_dead_letters_a_failed_lookup_sends_its_order_there_and_the_run_goes_on(
    kafka: str, postgres: PostgresCluster, table: str, topics, tmp_path: Path
) -> None:
    """With a FULL cache: the reload after the crash fails, and the orders of that batch are
    dead-lettered (a lookup query failing, without a cache, is the timeout test's)."""
    orders, out = topics
    env = lookup_env(
        kafka,
        postgres,
        table,
        orders,
        out,
        tmp_path / "ck",
        LOOKUP_ON_ERROR="dead-letter",
        LOOKUP_MAX_RETRIES="0",
        LOOKUP_TIMEOUT="2s",
        LOOKUP_CACHE="full",
        LOOKUP_FULL_CACHE_RELOAD_INTERVAL="1s",
    )
    send_orders(kafka, orders, [("o1", "p1")])
    service = run_until(env, tmp_path / "log", lambda: len(rows(kafka, out)) == 1, "no output")
    try:
        postgres.crash()
        crashed = time.monotonic()
        while time.monotonic() - crashed < 1.1:  # past the reload interval, whatever the load
            time.sleep(0.1)
        send_orders(kafka, orders, [("o2", "p2"), ("o3", "p3")])
        letters = lambda: committed_output(kafka, f"{out}.dlq", f"{out}.markers")  # noqa: E731
        wait_for(lambda: len(letters()) == 2, 120, "no dead letters", service)
        postgres.start()
        send_orders(kafka, orders, [("o4", "p2")])
        wait_for(lambda: len(rows(kafka, out)) == 2, 120, "the run did not go on", service)
        dead = metric(service, 'streamjoin_dead_letters_total{input="left",reason="lookup-failed"}')
    finally:
        postgres.start()
        assert service.terminate() == 0, service.log()[-3000:]
    assert [o for o, _, _ in rows(kafka, out)] == ["o1", "o4"]
    sent = letters()  # from the tasks of two keys: no order between them
    assert sorted(json.loads(r.value)["order_id"] for r in sent) == ["o2", "o3"]
    for record in sent:
        assert record.header("streamjoin.error.reason") == b"lookup-failed"
        assert record.header("streamjoin.source.topic") == orders.encode()
        assert b"failed after 1 attempts" in record.header("streamjoin.error")
    assert dead == 2


@pytest.mark.parametrize("on_error", ["fail", "dead-letter"])
def test_a_lookup_that_times_out_fails_the_run_or_dead_letters_its_order_as_configured(
    kafka: str, postgres: PostgresCluster, table: str, topics, tmp_path: Path, on_error: str
) -> None:
    """fail (Flink's behaviour): the run stops, nothing of the order is written, and a restart
    from the checkpoint enriches it; dead-letter: the order leaves with the error, the run goes
    on."""
    orders, out = topics
    env = lookup_env(
        kafka,
        postgres,
        table,
        orders,
        out,
        tmp_path / "ck",
        LOOKUP_ON_ERROR=on_error,
        LOOKUP_MAX_RETRIES="0",
        LOOKUP_TIMEOUT="1s",
    )
    send_orders(kafka, orders, [("o1", "p1")])
    service = run_until(env, tmp_path / "log", lambda: len(rows(kafka, out)) == 1, "no output")
    letters = lambda: committed_output(kafka, f"{out}.dlq", f"{out}.markers")  # noqa: E731
    expected = [("o1", "scooter", 11.11), ("o3", "kite", 5.0)]
    if on_error == "fail":  # the restart writes o2 too, maybe a micro-batch before o3
        expected.insert(1, ("o2", "basketball", 23.11))
    try:
        with postgres.locked(table):  # the lookups of o2 wait past LOOKUP_TIMEOUT
            send_orders(kafka, orders, [("o2", "p2")])
            if on_error == "fail":
                assert service.process.wait(120) != 0
            else:
                wait_for(lambda: len(letters()) == 1, 120, "no dead letter", service)
        if on_error == "fail":
            failure = [line for line in service.log().splitlines() if "timed out" in line]
            assert failure and f"lookup in {table} failed after 1 attempts" in failure[0], failure
            assert rows(kafka, out) == [("o1", "scooter", 11.11)]
            service = Service(env, tmp_path / "log-again")  # the pod's restart
        send_orders(kafka, orders, [("o3", "p3")])
        wait_for(
            lambda: len(rows(kafka, out)) >= len(expected), 240, "the run did not go on", service
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    if on_error == "fail":
        assert letters() == []
    else:
        [letter] = letters()
        assert json.loads(letter.value)["order_id"] == "o2"
        assert b"timed out" in letter.header("streamjoin.error")
    assert rows(kafka, out) == expected


def test_an_order_whose_row_is_written_after_it_is_looked_up_again_and_joined(
    kafka: str, postgres: PostgresCluster, table: str, topics, tmp_path: Path
) -> None:
    """`LOOKUP_MISS_RETRIES` (Flink's LOOKUP hint, 'retry-predicate' = 'lookup_miss'): an order
    of a product the table does not have yet is looked up again, 2 s apart, and joined with the
    row written meanwhile (without retries this INNER join would drop it)."""
    orders, out = topics
    retries = {"LOOKUP_MISS_RETRIES": "20", "LOOKUP_MISS_RETRY_DELAY": "2s"}
    env = lookup_env(kafka, postgres, table, *topics, tmp_path / "ck", **retries)
    send_orders(kafka, orders, [("o1", "p1")])
    service = run_until(env, tmp_path / "log", lambda: len(rows(kafka, out)) == 1, "no output")
    late = unique("late-product")
    try:
        send_orders(kafka, orders, [("o9", late)])
        wait_for(lambda: late in postgres.log.read_text(), 120, "o9 was never looked up", service)
        postgres.sql(f"INSERT INTO {table} VALUES ('{late}', 'yoyo', 2.50, 'toys')")
        wait_for(lambda: len(rows(kafka, out)) == 2, 120, "o9 was never joined", service)
        retried = 'streamjoin_lookup_events_total{event="miss-retry"}'
        # counted as the looking-up task ends, after its transaction committed
        wait_for(lambda: metric(service, retried) >= 1, 60, "no retry on /metrics", service)
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert rows(kafka, out) == [("o1", "scooter", 11.11), ("o9", "yoyo", 2.5)]
