"""`streamjoin run` joining two Debezium changelogs through a real broker."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from decimal import Decimal
from pathlib import Path
from unittest.mock import patch

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from app.cli import main
from app.run.checkpoint import SPREAD_BUCKETS, STATE_RECORD
from tests.class_archive import recorded
from tests.kafka_io import join_topics, produce, read_topic
from tests.service import Service, run_to_exit, service_env, streamjoin_command
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

ORDER_COLUMNS = ("order_id", "product_id", "qty")
PRODUCT_COLUMNS = ("product_id", "name", "price")


def debezium_changelog(
    rng: random.Random, prefix: str, count: int, make_row, key: str | None = None
) -> list[dict]:
    """Create, update and delete events over `count` ids, each id's events in order.

    With `key`, as with REPLICA IDENTITY DEFAULT: updates carry no `before` image and deletes
    only the key (the normalizer must supply the real old rows)."""
    live: dict[str, dict] = {}
    events = []
    for _ in range(count * 4):
        rid = f"{prefix}{rng.randrange(count)}"
        if rid not in live:
            live[rid] = make_row(rid)
            events.append({"before": None, "after": live[rid], "op": "c"})
        elif rng.random() < 0.7:
            new = make_row(rid)
            events.append({"before": None if key else live[rid], "after": new, "op": "u"})
            live[rid] = new
        else:
            old = live.pop(rid)
            before = {c: (old[c] if c == key else None) for c in old} if key else old
            events.append({"before": before, "after": None, "op": "d"})
    return events


def final_table(events: list[dict], key: str) -> dict[str, dict]:
    """The table a changelog leaves behind, by primary key."""
    table: dict[str, dict] = {}
    for event in events:
        if event["op"] == "d":
            table.pop(event["before"][key])
        else:
            table[event["after"][key]] = event["after"]
    return table


def produce_events(bootstrap: str, topic: str, events: list[dict], key: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for event in events:
        row = event["after"] or event["before"]
        producer.produce(topic, json.dumps(event).encode(), row[key].encode())
        if event["op"] == "d":
            producer.produce(topic, None, row[key].encode())  # Debezium's tombstone
    assert producer.flush(30) == 0


def expected_left_join(orders: dict[str, dict], products: dict[str, dict]) -> Counter:
    table: Counter = Counter()
    for order in orders.values():
        product = products.get(order["product_id"])
        left = [order[c] for c in ORDER_COLUMNS]
        right = [product[c] for c in PRODUCT_COLUMNS] if product else [None] * 3
        table[json.dumps(left + right)] += 1
    return table


def joined_row(value: dict) -> str:
    """An output row as `expected_left_join` spells it."""
    price = value["R_price"]  # a JSON number; the events carry it as "12.30"
    value = value | {"R_price": None if price is None else f"{Decimal(str(price)):.2f}"}
    row = [value[f"L_{c}"] for c in ORDER_COLUMNS] + [value[f"R_{c}"] for c in PRODUCT_COLUMNS]
    return json.dumps(row)


def materialized(records) -> Counter:
    table: Counter = Counter()
    for record in records:
        value = json.loads(record.value, parse_float=Decimal)
        op = value.pop("op")
        assert record.header("op") == op.encode()
        table[joined_row(value)] += 1 if op in ("+I", "+U") else -1
    return +table


@pytest.fixture
def changelogs() -> tuple[list[dict], list[dict]]:
    rng = random.Random(7)
    products = debezium_changelog(
        rng,
        "p",
        12,
        lambda pid: {
            "product_id": pid,
            "name": f"n{rng.randrange(9)}",
            "price": f"{rng.randrange(100, 999) / 10:.2f}",
        },
        key="product_id",
    )
    orders = debezium_changelog(
        rng,
        "o",
        40,
        lambda oid: {
            "order_id": oid,
            "product_id": f"p{rng.randrange(14)}",
            "qty": rng.randrange(1, 5),
        },
    )
    return orders, products


def join_env(kafka: str, orders: str, products: str, out: str, checkpoint: Path) -> dict:
    return service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=orders,
        RIGHT_TOPIC=products,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(checkpoint),
        TRIGGER_INTERVAL="200ms",
        LEFT_FORMAT="debezium-json",
        LEFT_SCHEMA="order_id STRING, product_id STRING, qty INT",
        LEFT_PRIMARY_KEY="order_id",
        RIGHT_FORMAT="debezium-json",
        RIGHT_SCHEMA="product_id STRING, name STRING, price DECIMAL(10,2)",
        RIGHT_PRIMARY_KEY="product_id",
        JOIN_KIND="left",
        JOIN_ON="L.product_id = R.product_id",
        OUTPUT_ENCODING="retract",
    )


BAD_RECORDS = {
    "bad-json": b'{"op": "c", "after": {',
    "unknown-op": b'{"op": "x", "after": {"order_id": "z1", "product_id": "p1", "qty": 1}}',
    "missing-field": b'{"op": "c", "after": {"product_id": "p1", "qty": 1}}',
    "wrong-type": b'{"op": "c", "after": {"order_id": "z2", "product_id": "p1", "qty": "many"}}',
}


def test_left_join_of_two_changelogs_materializes_to_the_join_of_the_final_tables(
    kafka: str, tmp_path: Path, changelogs
) -> None:
    orders_events, products_events = changelogs
    orders, products, out = join_topics(kafka, partitions=3)
    produce_events(kafka, products, products_events, "product_id")
    half = len(orders_events) // 2
    produce_events(kafka, orders, orders_events[:half], "order_id")
    bad = produce(kafka, orders, list(BAD_RECORDS.values()))  # among the good ones
    produce_events(kafka, orders, orders_events[half:], "order_id")
    final_orders = final_table(orders_events, "order_id")
    final_products = final_table(products_events, "product_id")
    expected = expected_left_join(final_orders, final_products)
    # the products with the most orders in the end held more than one fewer at some batch
    ordered = Counter(order["product_id"] for order in final_orders.values())
    most = max(ordered.values())
    hottest = {product for product, n in ordered.items() if n == most}
    env = join_env(kafka, orders, products, out, tmp_path / "ck")
    service = Service(env | {"HOT_KEY_ROWS": str(most - 1)}, tmp_path / "log")
    try:
        wait_for(
            lambda: materialized(read_topic(kafka, out)) == expected,
            300,
            "the output never materialized to the expected join",
            service,
        )
        dead = read_topic(kafka, f"{out}.dlq", at_least=len(bad))
        counted = [
            f'streamjoin_dead_letters_total{{input="left",reason="{r}"}} 1.0' for r in BAD_RECORDS
        ]
        # the rows the join holds are the final tables' rows; each normalizer holds their keys
        counted += [
            f'streamjoin_state_rows{{operator="{operator}",side="{side}"}} {len(rows)}.0'
            for operator in ("join", "normalizer")
            for side, rows in (("left", final_orders), ("right", final_products))
        ]
        wait_for(
            lambda: all(line in scrape(service) for line in counted),
            60,
            "the dead letters or the state's rows were not counted",
            service,
        )
        page = scrape(service)
        # every order and product change the join took emitted some changes, or none
        assert (metric(page, "streamjoin_join_fanout_count") or 0) >= len(final_orders)
        assert (metric(page, 'streamjoin_hot_key_reports_total{input="left"}') or 0) >= 1
        named = re.findall(r"hot key: \('(\w+)',\) holds (\d+) rows of input left", service.log())
        assert all(int(rows) > most - 1 for _, rows in named), named
        assert hottest & {product for product, _ in named}, named
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    # restarted with nothing new to read, it reports what its state holds all the same
    held = counted[len(BAD_RECORDS) :]
    restarted = Service(
        join_env(kafka, orders, products, out, tmp_path / "ck"), tmp_path / "restarted.log"
    )
    try:
        wait_for(
            lambda: all(line in scrape(restarted) for line in held),
            60,
            "the state's rows were not reported after a restart",
            restarted,
        )
        # its JVM's classes mapped from the class archive its folder holds
        archive = recorded()
        assert archive is not None and restarted.mapping(archive), restarted.log()[-3000:]
    finally:
        assert restarted.terminate() == 0, restarted.log()[-3000:]
    assert sorted(r.value for r in dead) == sorted(BAD_RECORDS.values())
    for letter in dead:
        reason = letter.header("streamjoin.error.reason").decode()
        assert BAD_RECORDS[reason] == letter.value
        source = next(r for r in bad if r.value == letter.value)
        assert letter.header("streamjoin.source.topic") == orders.encode()
        assert letter.header("streamjoin.source.partition") == str(source.partition).encode()
        assert letter.header("streamjoin.source.offset") == str(source.offset).encode()
        assert letter.header("streamjoin.error")


# `streamjoin run` as the versions before the spread bucket ids ran it: every key bucket
# grouped by its index (`app.run.key_buckets`), and a checkpoint record that does not say so
BEFORE_SPREAD_IDS = [
    sys.executable,
    "-c",
    "import sys; import app.run.checkpoint as c; from app.cli import main; "
    "c.spreads_buckets = lambda spark, location: False; sys.exit(main(['run']))",
]


def test_a_checkpoint_made_before_the_spread_bucket_ids_resumes_with_its_state_in_place(
    kafka: str, tmp_path: Path, changelogs
) -> None:
    """Stopped mid-stream and restarted by this version, a checkpoint whose buckets an earlier
    one grouped by their index keeps them so, and the output ends in the same final table: grouped
    by the spread ids, a bucket's keys would be looked for in another state partition, and the
    orders after the restart would miss their products. (A restart by the same version, killed
    anywhere, is `test_faults`'.)"""
    checkpoint = restart_mid_stream(kafka, tmp_path, changelogs, BEFORE_SPREAD_IDS)
    record = json.loads((checkpoint / STATE_RECORD).read_text())
    assert not set(SPREAD_BUCKETS) & set(record)


def restart_mid_stream(
    kafka: str, tmp_path: Path, changelogs, first_run: list[str] | None = None
) -> Path:
    """The service (the first time by `first_run`, if given) joins half the orders, is stopped,
    and restarted on its checkpoint joins the rest: each time its output must materialize to
    the join of the final tables so far. Returns the checkpoint."""
    orders_events, products_events = changelogs
    orders, products, out = join_topics(kafka, partitions=3)
    half = len(orders_events) // 2
    produce_events(kafka, products, products_events, "product_id")
    produce_events(kafka, orders, orders_events[:half], "order_id")
    checkpoint = tmp_path / "ck"
    env = join_env(kafka, orders, products, out, checkpoint)
    products_table = final_table(products_events, "product_id")
    first_half = expected_left_join(final_table(orders_events[:half], "order_id"), products_table)
    run_until_materialized(kafka, out, env, tmp_path / "first.log", first_half, first_run)
    produce_events(kafka, orders, orders_events[half:], "order_id")
    expected = expected_left_join(final_table(orders_events, "order_id"), products_table)
    run_until_materialized(kafka, out, env, tmp_path / "second.log", expected)
    return checkpoint


def run_until_materialized(
    kafka: str, out: str, env: dict, log: Path, expected: Counter, command: list[str] | None = None
) -> None:
    """Run the service (by `command`, if given) until its output materializes to `expected`,
    then stop it (SIGTERM)."""
    service = Service(env, log, command)
    try:
        wait_for(
            lambda: materialized(read_topic(kafka, out)) == expected,
            300,
            "the output never materialized to the expected join",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]


def scrape(service: Service) -> str:
    """The service's /metrics page (its port is in its log: METRICS_PORT=0 picks a free one)."""
    served = service.endpoint()
    if not served:
        return ""
    with urllib.request.urlopen(f"{served}/metrics", timeout=5) as page:
        return page.read().decode()


def metric(page: str, name: str) -> float | None:
    """One series' value on a /metrics page (`name` with its labels, as exposed)."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", page, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_idle_join_state_expires_after_the_ttl_and_is_counted(kafka: str, tmp_path: Path) -> None:
    """The order's row goes from the join and from the normalizer in front of it (the same
    TTL), and `streamjoin_state_rows` stops counting it although no batch touches its key.
    (The TTL runs from the micro-batch's start: a cold first batch takes up to 30 s here.)"""
    orders, products, out = join_topics(kafka)
    order = {"order_id": "o1", "product_id": "p1", "qty": 1}
    produce_events(kafka, orders, [{"before": None, "after": order, "op": "c"}], "order_id")
    env = join_env(kafka, orders, products, out, tmp_path / "ck") | {"STATE_TTL": "40s"}
    service = Service(env, tmp_path / "log")
    held = (
        'streamjoin_state_rows{operator="join",side="left"}',
        'streamjoin_state_rows{operator="normalizer",side="left"}',
    )
    try:
        wait_for(
            lambda: all(metric(scrape(service), name) == 1 for name in held),
            120,
            "the order was never held",
            service,
        )
        wait_for(
            lambda: (
                (page := scrape(service))
                and metric(page, "streamjoin_state_expired_keys_total") == 2
                and all(metric(page, name) == 0 for name in held)
            ),
            240,
            "the idle order was never expired from both stages",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    [padded] = read_topic(kafka, out)
    assert json.loads(padded.value)["op"] == "+I"


def test_a_graceful_stop_of_a_job_on_the_wall_clock_is_quiet(kafka: str, tmp_path: Path) -> None:
    """Under a state TTL and the default back-to-back trigger, Spark plans a batch at every
    trigger once the sources are drained, with no gap between two of them. The stop still
    comes between two: it leaves no batch planned to run again (which a rescale would have to
    run first), and the log shows nothing but the service's own lines."""
    orders, products, out = join_topics(kafka)
    order = {"order_id": "o1", "product_id": "p1", "qty": 1}
    produce_events(kafka, orders, [{"before": None, "after": order, "op": "c"}], "order_id")
    env = join_env(kafka, orders, products, out, tmp_path / "ck")
    env |= {"STATE_TTL": "1h", "TRIGGER_INTERVAL": "0", "LOG_FORMAT": "json"}
    service = Service(env, tmp_path / "log")
    try:
        wait_for(lambda: read_topic(kafka, out), 240, "the order never joined", service)
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    lines = [json.loads(line) for line in service.log().splitlines()]
    assert [line for line in lines if line["level"] != "INFO"] == []
    logs = {name: tmp_path / "ck" / name for name in ("offsets", "commits")}
    last = {name: max(int(p.name) for p in log.glob("[0-9]*")) for name, log in logs.items()}
    assert last["offsets"] == last["commits"]


def test_each_input_keeps_its_rows_for_its_own_ttl(kafka: str, tmp_path: Path) -> None:
    """`LEFT_STATE_TTL=5s`, `RIGHT_STATE_TTL=0` (Flink's `STATE_TTL('o' = '5s', 'p' = '0')`):
    once the order has been kept 5 s, its product's change updates nothing; a new order still
    finds the changed product, which under one TTL of 5 s would have gone (a padded row)."""
    orders, products, out = join_topics(kafka)
    product = {"product_id": "p1", "name": "kite", "price": "5.00"}
    produce_events(kafka, products, [{"before": None, "after": product, "op": "c"}], "product_id")
    order = {"order_id": "o1", "product_id": "p1", "qty": 1}
    produce_events(kafka, orders, [{"before": None, "after": order, "op": "c"}], "order_id")
    env = join_env(kafka, orders, products, out, tmp_path / "ck")
    service = Service(env | {"LEFT_STATE_TTL": "5s", "RIGHT_STATE_TTL": "0"}, tmp_path / "log")
    dearer = product | {"price": "7.00"}
    later = {"order_id": "o2", "product_id": "p1", "qty": 2}
    try:
        first = Counter({json.dumps(["o1", "p1", 1, "p1", "kite", "5.00"]): 1})
        wait_for(
            lambda: materialized(read_topic(kafka, out)) == first, 240, "o1 never joined", service
        )
        time.sleep(6)  # the TTL is wall-clock time: what its passing does is under test
        change = {"before": product, "after": dearer, "op": "u"}
        produce_events(kafka, products, [change], "product_id")
        produce_events(kafka, orders, [{"before": None, "after": later, "op": "c"}], "order_id")
        expected = first + Counter({json.dumps(["o2", "p1", 2, "p1", "kite", "7.00"]): 1})
        wait_for(
            lambda: materialized(read_topic(kafka, out)) == expected,
            120,
            "o2 never joined the changed product",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    # o1 kept its joined row: the product's change, after o1 expired, updated nothing
    assert materialized(read_topic(kafka, out)) == expected


def state_report(
    env: dict[str, str], capsys: pytest.CaptureFixture, spark: SparkSession, *args: str
) -> dict:
    """`streamjoin state --json` of a stopped job, in this test session's Spark."""
    capsys.readouterr()
    settings = spark.conf.getAll
    with patch.dict(os.environ, env, clear=True):
        assert main(["state", "--json", *args]) == 0
    # a session the command did not start goes on as it was
    assert spark.conf.getAll == settings and spark.range(3).count() == 3
    return json.loads(capsys.readouterr().out)


def test_an_upsert_topic_keyed_by_order_ends_on_each_orders_row_when_orders_move_products(
    kafka: str, tmp_path: Path, spark: SparkSession, capsys: pytest.CaptureFixture
) -> None:
    """Orders created, each moved to another product, some deleted, all in one micro-batch:
    a move's retraction and its new row come from the tasks of two products, in any order. The
    topic keyed by order alone must still end, per order, on its joined row, or on a tombstone
    for a deleted order (Flink's sink upsert materializer)."""
    orders, products, out = join_topics(kafka, partitions=3)
    produce_events(
        kafka,
        products,
        [
            {
                "before": None,
                "after": {"product_id": f"p{i}", "name": f"n{i}", "price": "1.50"},
                "op": "c",
            }
            for i in range(16)
        ],
        "product_id",
    )
    live = {
        f"o{i}": {"order_id": f"o{i}", "product_id": f"p{i % 16}", "qty": 1} for i in range(300)
    }
    events = [{"before": None, "after": row, "op": "c"} for row in live.values()]
    for i, row in enumerate(list(live.values())):
        live[row["order_id"]] = moved = row | {"product_id": f"p{(i + 5) % 16}", "qty": 2}
        events.append({"before": row, "after": moved, "op": "u"})
    deleted = [f"o{i}" for i in range(0, 300, 10)]
    events += [{"before": live.pop(oid), "after": None, "op": "d"} for oid in deleted]
    produce_events(kafka, orders, events, "order_id")
    env = join_env(kafka, orders, products, out, tmp_path / "ck") | {
        "TRIGGER_INTERVAL": "available-now",
        "OUTPUT_ENCODING": "upsert",
        "OUTPUT_KEY": "id",
        "JOIN_SELECT": "L.order_id AS id, L.qty AS qty, R.name AS name",
    }
    done = run_to_exit(env, timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    compacted = {}
    for record in read_topic(kafka, out):  # each key's records in order: one partition each
        compacted[json.loads(record.key)["id"]] = record.value and json.loads(record.value)
    expected = {
        oid: {"id": oid, "qty": 2, "name": f"n{row['product_id'][1:]}"} for oid, row in live.items()
    }
    assert compacted == expected | dict.fromkeys(deleted)
    # what the stopped job holds: each stateful operator's state read back by `streamjoin state`
    held = state_report(env, capsys, spark)
    by_operator = {(o["operator"], o["side"]): (o["rows"], o["keys"]) for o in held["operators"]}
    assert by_operator == {
        ("upsert", "output"): (270, 270),
        ("join", "left"): (270, 16),
        ("join", "right"): (16, 16),
        ("normalizer", "left"): (270, 270),
        ("normalizer", "right"): (16, 16),
    }
    assert held["left"]["rows"] == 270 and held["right"]["rows"] == 16
    per_product = Counter(row["product_id"] for row in live.values())
    assert held["left"]["largest_keys"][0]["rows"] == max(per_product.values())
    # one key: why an order of product p3 joined what it did, and that p99 holds nothing
    p3 = state_report(env, capsys, spark, "--key", "p3")
    assert sorted(row["order_id"] for row in p3["left"]["held"]) == sorted(
        oid for oid, row in live.items() if row["product_id"] == "p3"
    )
    assert p3["right"]["held"] == [{"product_id": "p3", "name": "n3", "price": "1.50"}]
    none = state_report(env, capsys, spark, "--key", "p99")
    assert (none["left"]["held"], none["right"]["held"]) == ([], [])


def test_available_now_under_a_state_ttl_ends_once_what_was_there_is_joined(
    kafka: str, tmp_path: Path
) -> None:
    """Under a STATE_TTL an operator runs on the wall clock, and Spark's available-now then
    plans a batch at every trigger for ever: the service never ended. It reads what the topics
    held at its start, joins it, and ends."""
    orders, products, out = join_topics(kafka)
    product = {"product_id": "p1", "name": "n1", "price": "1.50"}
    rows = {f"o{i}": {"order_id": f"o{i}", "product_id": "p1", "qty": i} for i in range(5)}
    produce_events(kafka, products, [{"before": None, "after": product, "op": "c"}], "product_id")
    produce_events(
        kafka,
        orders,
        [{"before": None, "after": row, "op": "c"} for row in rows.values()],
        "order_id",
    )
    env = join_env(kafka, orders, products, out, tmp_path / "ck") | {
        "TRIGGER_INTERVAL": "available-now",
        "STATE_TTL": "1h",
    }
    done = run_to_exit(env, timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "query stopped" in done.stderr
    assert materialized(read_topic(kafka, out)) == expected_left_join(rows, {"p1": product})


def test_a_row_a_select_cast_fails_on_is_a_dead_letter_and_the_job_goes_on(
    kafka: str, tmp_path: Path
) -> None:
    """Flink fails the job on a CAST it cannot do, and the service then crashed on the same
    row at every restart: the joined row goes to the dead-letter topic, with the reason, and
    the other rows are joined."""
    orders, products, out = join_topics(kafka)
    product = {"product_id": "p1", "name": "n1", "price": "1.50"}
    quantities = {"o1": "3", "o2": "lots", "o3": "7"}
    produce_events(kafka, products, [{"before": None, "after": product, "op": "c"}], "product_id")
    produce_events(
        kafka,
        orders,
        [
            {"before": None, "after": {"order_id": o, "product_id": "p1", "qty": q}, "op": "c"}
            for o, q in quantities.items()
        ],
        "order_id",
    )
    env = join_env(kafka, orders, products, out, tmp_path / "ck") | {
        "TRIGGER_INTERVAL": "available-now",
        "JOIN_KIND": "inner",
        "LEFT_SCHEMA": "order_id STRING, product_id STRING, qty STRING",
        "JOIN_SELECT": "L.order_id, CAST(L.qty AS INT) AS qty, R.name",
    }
    done = run_to_exit(env, timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]
    joined = [json.loads(r.value) for r in read_topic(kafka, out)]
    assert sorted(joined, key=str) == [
        {"op": "+I", "order_id": "o1", "qty": 3, "name": "n1"},
        {"op": "+I", "order_id": "o3", "qty": 7, "name": "n1"},
    ]
    [letter] = read_topic(kafka, f"{out}.dlq")
    assert json.loads(letter.value) == {
        "op": "+I",
        "L": {"order_id": "o2", "product_id": "p1", "qty": "lots"},
        "R": {"product_id": "p1", "name": "n1", "price": 1.5},
    }
    assert letter.header("streamjoin.error") == b"CAST(L.qty AS INT) failed on the value lots"
    assert letter.header("streamjoin.error.reason") == b"cast"


@pytest.mark.parametrize(
    ("changed", "refusal"),
    [
        (
            {"JOIN_ON": "L.order_id = R.product_id"},
            "JOIN_ON's keys: L.order_id = R.product_id, but the checkpoint at CHECKPOINT_LOCATION "
            "holds state made with JOIN_ON's keys=L.product_id = R.product_id",
        ),
        (
            {"JOIN_KIND": "inner"},
            "JOIN_KIND: inner, but the checkpoint at CHECKPOINT_LOCATION holds state made with "
            "JOIN_KIND=left",
        ),
        (
            {"JOIN_ON": "L.product_id = R.product_id AND L.qty > 1"},
            "JOIN_ON's residual: L.qty > 1, but the checkpoint at CHECKPOINT_LOCATION holds state "
            "made with JOIN_ON's residual=none",
        ),
        (
            {"RIGHT_PRIMARY_KEY": "name"},
            "RIGHT_PRIMARY_KEY: name, but the checkpoint at CHECKPOINT_LOCATION holds state made "
            "with RIGHT_PRIMARY_KEY=product_id",
        ),
        (
            {"LEFT_SCHEMA": "order_id STRING, product_id STRING, qty BIGINT"},
            "LEFT_SCHEMA: order_id string, product_id string, qty bigint, but the checkpoint at "
            "CHECKPOINT_LOCATION holds state made with LEFT_SCHEMA=order_id string, product_id "
            "string, qty int",
        ),
        (
            {"STATE_TTL": "1h"},
            "STATE_TTL's expiring state: join left, join right, normalizer left, normalizer "
            "right, but the checkpoint at CHECKPOINT_LOCATION holds state made with STATE_TTL's "
            "expiring state=none",
        ),
    ],
    ids=["join-keys", "join-kind", "outer-residual", "input-key", "column-type", "ttl-set"],
)
def test_a_restart_that_changes_what_the_state_means_is_refused_naming_the_change(
    kafka: str, tmp_path_factory: pytest.TempPathFactory, changed: dict, refusal: str
) -> None:
    """State laid out by one join key read as another's (or as another kind of join, another
    condition of an outer join, whose rows keep how many rows matched them, other keys of an
    input, other column types) would join the wrong rows without a word, and entries Spark
    keeps without a TTL fail a job that reads them with one: the
    restart is refused before anything is read, exit 2, one line naming the change; the same
    configuration resumes."""
    checkpoint = _checkpoint_of_a_finished_join(kafka, tmp_path_factory)
    env = json.loads((checkpoint.parent / "env.json").read_text())
    before = (checkpoint / STATE_RECORD).read_text()
    result = run_to_exit(env | changed, timeout_s=300)
    assert result.returncode == 2, result.stderr[-3000:]
    # the log's lines before it are the metrics endpoint's, served as Spark started
    assert [line for line in result.stderr.splitlines() if " INFO " not in line] == [
        f"streamjoin: {refusal}: set it back, or give a new CHECKPOINT_LOCATION"
    ]
    assert (checkpoint / STATE_RECORD).read_text() == before


def test_check_says_whether_a_changed_configuration_resumes_on_a_stopped_jobs_checkpoint(
    kafka: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`streamjoin check --checkpoint`: another select list reads the state as it is, so the
    job resumes; another join kind does not, and the check says why in the line the restart
    would print, exit 2; neither touches the checkpoint."""
    checkpoint = _checkpoint_of_a_finished_join(kafka, tmp_path_factory)
    env = json.loads((checkpoint.parent / "env.json").read_text())
    env.pop("CHECKPOINT_LOCATION")
    before = (checkpoint / STATE_RECORD).read_text()

    def check(changed: dict[str, str]) -> subprocess.CompletedProcess[str]:
        command = [*streamjoin_command(), "check", "--checkpoint", str(checkpoint)]
        return subprocess.run(
            command, env=env | changed, capture_output=True, text=True, timeout=300
        )

    resumes = check({"JOIN_SELECT": "L.order_id, R.name"})
    assert resumes.returncode == 0, resumes.stderr[-3000:]
    assert resumes.stdout.splitlines()[-1] == (
        "streamjoin check: resumes on the checkpoint: its state means what this configuration says"
    )
    refused = check({"JOIN_KIND": "inner"})
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.splitlines()[-1] == (
        "streamjoin: JOIN_KIND: inner, but the checkpoint at CHECKPOINT_LOCATION holds state made "
        "with JOIN_KIND=left: set it back, or give a new CHECKPOINT_LOCATION"
    )
    assert (checkpoint / STATE_RECORD).read_text() == before


def test_a_restart_with_a_column_added_that_the_query_reads_and_one_dropped_resumes(
    kafka: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The products' schema gains `category`, which the output now writes, and loses `price`:
    the product joined before the restart is read with a NULL category, as the new job would
    have read its record, which lacked it; so a product update after the restart retracts
    the row the new job would have written, NULL and all, and writes the new one, once."""
    finished = _checkpoint_of_a_finished_join(kafka, tmp_path_factory)
    checkpoint = tmp_path / "ck"  # a copy: the shared one stays as the other cases expect it
    shutil.copytree(finished, checkpoint)
    env = json.loads((finished.parent / "env.json").read_text()) | {
        "CHECKPOINT_LOCATION": str(checkpoint),
        "RIGHT_SCHEMA": "product_id STRING, category STRING, name STRING",
        "JOIN_SELECT": "L.order_id, R.name, R.category",
    }
    command = [*streamjoin_command(), "check", "--checkpoint", str(checkpoint)]
    checked = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert checked.stdout.splitlines()[-3:] == [
        "streamjoin check: RIGHT_SCHEMA: column category added: NULL in the rows held from before",
        "streamjoin check: RIGHT_SCHEMA: column price dropped: kept in the state's rows, NULL "
        "from now on",
        "streamjoin check: resumes on the checkpoint: its state means what this configuration says",
    ]
    written = len(read_topic(kafka, env["OUTPUT_TOPIC"]))
    update = {"product_id": "p1", "category": "c1", "name": "n2"}
    produce_events(
        kafka,
        env["RIGHT_TOPIC"],
        [{"before": None, "op": "u", "after": update}],
        "product_id",
    )
    done = run_to_exit(env, timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    after = read_topic(kafka, env["OUTPUT_TOPIC"])[written:]
    changes: Counter = Counter()
    for record in after:
        value = json.loads(record.value)
        row = (value["order_id"], value["name"], value["category"])
        changes[row] += 1 if value["op"] in ("+I", "+U") else -1
    assert +changes == Counter({("o1", "n2", "c1"): 1})
    assert -changes == Counter({("o1", "n1", None): 1})
    # the record names the grown layout: a later start reads every row where it is
    record = json.loads((checkpoint / STATE_RECORD).read_text())
    assert record["RIGHT_SCHEMA"] == (
        "product_id string, name string, price decimal(10,2), category string"
    )
    assert record["RIGHT_SCHEMA's oldest rows"] == "3"


def test_a_restart_with_another_select_list_and_ttl_writes_from_there_what_the_new_job_writes(
    kafka: str, tmp_path: Path
) -> None:
    """A job's select list changes (a CAST, a function, a column dropped from the output), its
    STATE_TTL grows and its output becomes Debezium's, on the same checkpoint: what it writes
    from the restart on is, change for change, what the changed job started from the topics
    writes for the same records."""
    orders, products, out = join_topics(kafka)

    def produced(topic: str, key: str, *changes: tuple[dict | None, dict | None, str]) -> None:
        events = [{"before": b, "after": a, "op": op} for b, a, op in changes]
        produce_events(kafka, topic, events, key)

    p1 = {"product_id": "p1", "name": "lamp", "price": "1.50"}
    o1 = {"order_id": "o1", "product_id": "p1", "qty": 1}
    o2 = {"order_id": "o2", "product_id": "p2", "qty": 5}
    produced(products, "product_id", (None, p1, "c"))
    produced(orders, "order_id", (None, o1, "c"), (None, o2, "c"))
    old = join_env(kafka, orders, products, out, tmp_path / "ck") | {
        "TRIGGER_INTERVAL": "available-now",
        "STATE_TTL": "1h",
    }
    done = run_to_exit(old, timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    changed = {
        "JOIN_SELECT": "L.order_id, CAST(L.qty AS STRING) AS qty, UPPER(R.name) AS name",
        "STATE_TTL": "2h",
        "OUTPUT_ENCODING": "debezium-json",
    }
    fresh_out = join_topics(kafka)[2]
    fresh = old | changed | {"OUTPUT_TOPIC": fresh_out}
    fresh["CHECKPOINT_LOCATION"] = str(tmp_path / "new")
    done = run_to_exit(fresh, timeout_s=300)  # the changed job, from the topics' start
    assert done.returncode == 0, done.stderr[-3000:]
    before = (len(read_topic(kafka, out)), len(read_topic(kafka, fresh_out)))
    p2 = {"product_id": "p2", "name": "desk", "price": "9.00"}
    produced(products, "product_id", (None, p2, "c"), (p1, p1 | {"name": "lamp 2"}, "u"))
    produced(orders, "order_id", (o1, o1 | {"qty": 3}, "u"), (o2, None, "d"))
    for env in (old | changed, fresh):
        done = run_to_exit(env, timeout_s=300)
        assert done.returncode == 0, done.stderr[-3000:]
    resumed, new = (
        Counter(record.value for record in read_topic(kafka, topic)[written:])
        for topic, written in zip((out, fresh_out), before, strict=True)
    )
    assert resumed == new
    rows = [row for value in resumed for row in json.loads(value).values() if row]
    names = {row["name"] for row in rows if isinstance(row, dict)}
    assert names == {"LAMP", "LAMP 2", "DESK", None}


_finished: dict[str, Path] = {}


def _checkpoint_of_a_finished_join(kafka: str, factory: pytest.TempPathFactory) -> Path:
    """The checkpoint of a LEFT join of orders and products run to its end once (shared by
    the cases of a test), its configuration beside it (`env.json`); the first call also checks
    that the same configuration restarts on it."""
    if kafka in _finished:
        return _finished[kafka]
    work = factory.mktemp("finished")
    orders, products, out = join_topics(kafka)
    produce_events(
        kafka,
        products,
        [{"before": None, "op": "c", "after": {"product_id": "p1", "name": "n1", "price": "1.50"}}],
        "product_id",
    )
    produce_events(
        kafka,
        orders,
        [{"before": None, "op": "c", "after": {"order_id": "o1", "product_id": "p1", "qty": 1}}],
        "order_id",
    )
    env = join_env(kafka, orders, products, out, work / "ck") | {
        "TRIGGER_INTERVAL": "available-now"
    }
    for _ in range(2):  # the first run makes the checkpoint; the second restarts on it
        done = run_to_exit(env, timeout_s=300)
        assert done.returncode == 0, done.stderr[-3000:]
    (work / "env.json").write_text(json.dumps(env))
    _finished[kafka] = work / "ck"
    return work / "ck"
