"""The service under faults and bad input: SIGKILLs at random points and a broker that crashes
under the running query (both exactly-once), and a poison stream."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ops.metrics import TaskFailures
from tests.kafka_broker import crashable_broker
from tests.kafka_io import committed_output, join_topics, produce, read_topic
from tests.service import Service, run_to_exit
from tests.test_join_service import (
    debezium_changelog,
    expected_left_join,
    final_table,
    join_env,
    joined_row,
    materialized,
    metric,
    produce_events,
    scrape,
)
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

# Two state partitions instead of the service's eight: a micro-batch's cost here is mostly a
# fixed cost per state partition and operator, and these tests run many small batches.
FEW_PARTITIONS = {"SPARK_CONF_spark.sql.shuffle.partitions": "2"}


def product_row(rng: random.Random):
    return lambda pid: {
        "product_id": pid,
        "name": f"n{rng.randrange(9)}",
        "price": f"{rng.randrange(100, 999) / 10:.2f}",
    }


def order_row(rng: random.Random, products: int):
    return lambda oid: {
        "order_id": oid,
        "product_id": f"p{rng.randrange(products)}",
        "qty": rng.randrange(1, 5),
    }


def produced_inputs(
    kafka: str, rng: random.Random, orders: int, products: int, partitions: int
) -> tuple[str, str, str]:
    """`orders` orders of `products` products and the products, as Debezium changes on new
    topics of `partitions` (products first); the orders', products' and output topics."""
    orders_events = debezium_changelog(rng, "o", orders, order_row(rng, products))
    products_events = debezium_changelog(rng, "p", products, product_row(rng), key="product_id")
    topics = join_topics(kafka, partitions=partitions)
    produce_events(kafka, topics[1], products_events, "product_id")
    produce_events(kafka, topics[0], orders_events, "order_id")
    return topics


def table(kafka: str, out: str) -> Counter:
    """The output so far, read committed and materialized."""
    return materialized(committed_output(kafka, out, f"{out}.markers"))


def changelog(kafka: str, out: str) -> Counter:
    """The committed change records themselves, (kind, row) each: a duplicated +I/-D pair,
    which cancels out in the table, shows here."""
    records = committed_output(kafka, out, f"{out}.markers")
    return Counter((json.loads(r.value)["op"], joined_row(json.loads(r.value))) for r in records)


def outputs(kafka: str, out: str) -> tuple[Counter, Counter]:
    """The committed output, materialized, and the dead letters by source coordinates."""
    dead = Counter(
        (
            r.header("streamjoin.source.topic"),
            r.header("streamjoin.source.offset"),
            r.header("streamjoin.source.partition"),
        )
        for r in committed_output(kafka, f"{out}.dlq", f"{out}.markers")
    )
    return table(kafka, out), dead


def commits(checkpoint: Path) -> int:
    return len(list((checkpoint / "commits").glob("[0-9]*")))


def killed_runs(
    env: dict[str, str],
    committed: Callable[[], int],
    kill_after: list[int],
    rng: random.Random,
    logs: Path,
) -> int:
    """One run per point of `kill_after`, on `env`'s checkpoint: SIGKILLed once it committed
    that many batches (`committed` counts them) and a random moment more. How many kills came
    before a run ended."""
    killed = 0
    for run, after in enumerate(kill_after):
        service = Service(env, logs / f"run{run}.log")
        wait_for(lambda: committed() >= after, 300, "too few batches", service)  # noqa: B023
        time.sleep(rng.uniform(0, 1.5))
        if service.process.poll() is None:
            service.kill()
            killed += 1
    return killed


def test_sigkills_at_random_points_lose_nothing_and_duplicate_nothing(
    kafka: str, tmp_path: Path
) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"kill points drawn with seed {seed}")
    rng = random.Random(seed)
    orders_events = debezium_changelog(rng, "o", 250, order_row(rng, 60))
    products_events = debezium_changelog(rng, "p", 50, product_row(rng), key="product_id")
    orders, products, out = join_topics(kafka, partitions=3)
    produce_events(kafka, products, products_events, "product_id")
    produce_events(kafka, orders, orders_events[:500], "order_id")
    bad = produce(kafka, orders, [b"{not json", b"[1, 2]", b'{"op": "x"}'])
    produce_events(kafka, orders, orders_events[500:], "order_id")

    def env(topic: str, checkpoint: Path) -> dict[str, str]:
        return (
            join_env(kafka, orders, products, topic, checkpoint)
            | FEW_PARTITIONS
            | {"TRIGGER_INTERVAL": "available-now", "MAX_RECORDS_PER_TRIGGER": "150"}
        )

    _, _, reference = join_topics(kafka)
    done = run_to_exit(env(reference, tmp_path / "reference"), timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]
    batches = commits(tmp_path / "reference")

    checkpoint = tmp_path / "killed"
    kill_after = sorted(rng.sample(range(1, batches - 2), 3))
    killed_mid_run = killed_runs(
        env(out, checkpoint), lambda: commits(checkpoint), kill_after, rng, tmp_path
    )
    last = run_to_exit(env(out, checkpoint), timeout_s=600)
    assert last.returncode == 0, last.stderr[-3000:]
    assert killed_mid_run >= 2, f"only {killed_mid_run} kills came before the run ended"

    expected_table, expected_dead = outputs(kafka, reference)
    assert expected_table == expected_left_join(
        final_table(orders_events, "order_id"), final_table(products_events, "product_id")
    )
    assert sum(expected_dead.values()) == len(bad)
    assert outputs(kafka, out) == (expected_table, expected_dead)
    # the same batches (their offsets are in the checkpoint) write the same changes, once each
    assert changelog(kafka, out) == changelog(kafka, reference)
    aborted = len(read_topic(kafka, out)) - len(committed_output(kafka, out, f"{out}.markers"))
    print(f"{killed_mid_run} kills mid-run; {aborted} records of aborted transactions skipped")


def _parent(pid: int) -> int | None:
    try:
        return int((Path(f"/proc/{pid}/stat").read_text()).rsplit(")", 1)[1].split()[1])
    except OSError:  # gone
        return None


def python_workers(service: int) -> list[int]:
    """The Python workers under the service's process: those its worker daemon forked (they
    run the daemon's module too), not the daemon, not the keeper it started."""
    processes = {
        int(p.name): _parent(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()
    }
    tree, frontier = set(), [service]
    while frontier:
        pid = frontier.pop()
        tree.add(pid)
        frontier += [child for child, parent in processes.items() if parent == pid]

    def runs_the_daemon(pid: int) -> bool:
        """Started as `python -m app.run.worker_daemon`, or forked from it (not the JVM, whose
        arguments name the module in Spark's setting)."""
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            return b"app.run.worker_daemon" in arguments
        except OSError:
            return False

    daemons = {pid for pid in tree if runs_the_daemon(pid)}
    return [pid for pid in daemons if processes[pid] in daemons]


def test_python_workers_killed_mid_batch_write_the_changes_a_run_without_warm_state_writes(
    kafka: str, tmp_path: Path
) -> None:
    """Each killed worker's task runs again in another worker, after the dead one may have
    handed its visits to the keeper (`state.store.warm`): the run writes, change for change,
    what a run that keeps no state between micro-batches writes, and its visits did find warm
    state."""
    rng = random.Random(5)
    orders, products, out = produced_inputs(kafka, rng, 250, 60, 3)

    def env(topic: str, checkpoint: Path, warm_mb: str) -> dict[str, str]:
        return (
            join_env(kafka, orders, products, topic, checkpoint)
            | FEW_PARTITIONS
            | {
                "TRIGGER_INTERVAL": "available-now",
                "MAX_RECORDS_PER_TRIGGER": "100",
                "WARM_STATE_MB": warm_mb,
                "METRICS_PORT": "0",
            }
        )

    _, _, reference = join_topics(kafka)
    done = run_to_exit(env(reference, tmp_path / "cold", "0"), timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]

    checkpoint = tmp_path / "warm"
    service = Service(env(out, checkpoint, "64"), tmp_path / "warm.log")
    kills, hits = 0, 0.0
    while service.process.poll() is None:
        try:
            page = scrape(service)
        except OSError:  # not served yet, or no longer
            page = ""
        hits = max(hits, metric(page, 'streamjoin_state_reads_total{result="hit"}') or 0)
        if kills < 3 and commits(checkpoint) >= 2 * (kills + 1):
            workers = python_workers(service.process.pid)
            if workers:
                os.kill(rng.choice(workers), signal.SIGKILL)
                kills += 1
        time.sleep(0.1)  # the pace of the polls above
    assert service.process.returncode == 0, service.log()[-3000:]
    assert kills == 3
    assert hits > 0
    assert changelog(kafka, out) == changelog(kafka, reference)


def test_a_broker_crash_under_the_running_service_loses_nothing(tmp_path: Path) -> None:
    """Tansu keeps its data in an object store here, so that it outlives the broker process;
    the test plays the supervisor (Kubernetes) and restarts the service if it exits. The
    output, read committed and materialized, is the expected table: nothing lost, nothing
    twice."""
    rng = random.Random(11)
    orders_events = debezium_changelog(rng, "o", 200, order_row(rng, 30))
    products_events = debezium_changelog(rng, "p", 25, product_row(rng), key="product_id")
    half = len(orders_events) // 2
    with crashable_broker() as broker:
        kafka = broker.bootstrap
        orders, products, out = join_topics(kafka, partitions=2)
        produce_events(kafka, products, products_events, "product_id")
        produce_events(kafka, orders, orders_events[:half], "order_id")
        env = join_env(kafka, orders, products, out, tmp_path / "ck") | FEW_PARTITIONS
        first_half = expected_left_join(
            final_table(orders_events[:half], "order_id"),
            final_table(products_events, "product_id"),
        )
        expected = expected_left_join(
            final_table(orders_events, "order_id"), final_table(products_events, "product_id")
        )
        services = [Service(env, tmp_path / "service0.log")]
        try:
            wait_for(
                lambda: table(kafka, out) == first_half,
                300,
                "the first half never materialized",
                services[0],
            )
            broker.crash_and_restart()
            produce_events(kafka, orders, orders_events[half:], "order_id")
            deadline = time.monotonic() + 400
            while table(kafka, out) != expected:
                assert time.monotonic() < deadline, services[-1].log()[-4000:]
                if services[-1].process.poll() is not None:  # failed fast: restart it
                    services.append(Service(env, tmp_path / f"service{len(services)}.log"))
                time.sleep(1)
        finally:
            assert services[-1].terminate() == 0, services[-1].log()[-3000:]
        print(f"service processes needed across the broker crash: {len(services)}")


def _fails_its_first_attempt(value: int) -> int:
    from pyspark import TaskContext

    if TaskContext.get().attemptNumber() == 0:
        raise RuntimeError("a task attempt that fails (a broker in trouble, a worker lost)")
    return value


def test_task_attempts_that_failed_and_ran_again_are_counted(spark) -> None:
    """A failed task is run again (the service's local master retries as a cluster does): the
    job's result is whole, and each failed attempt is counted on `/metrics`."""
    registry = CollectorRegistry()
    failures = TaskFailures(registry, spark.sparkContext)
    values = spark.sparkContext.parallelize(range(6), 3).map(_fails_its_first_attempt)
    assert sorted(values.collect()) == list(range(6))
    failures.update()
    assert registry.get_sample_value("streamjoin_spark_task_failures_total") == 3


POISON = {
    "bad-json": [b'{"order_id": "x', b"\xff\xfe not utf-8", b"", b"[1, 2, 3]", b'"a string"'],
    "missing-field": [b'{"product_id": "p1", "qty": 1}'],
    "wrong-type": [
        b'{"order_id": "x1", "product_id": "p1", "qty": "many"}',
        b'{"order_id": "x2", "product_id": "p1", "qty": true}',
        b'{"order_id": "x3", "product_id": "p1", "qty": 99999999999}',
    ],
    "null-value": [None],
}
POISON_CHANGELOG = {
    "bad-json": [b"{", b"null"],
    "unknown-op": [b'{"op": "z", "after": {"product_id": "p1", "name": "n", "price": "1.00"}}'],
    "missing-field": [b'{"op": "c", "after": null}', b'{"op": "u", "before": null}'],
    "bad-envelope": [b'{"payload": 5}'],
    "wrong-type": [b'{"op": "c", "after": {"product_id": "p9", "name": "n", "price": "cheap"}}'],
}


def poisoned(rng: random.Random, good: list[bytes | None], kinds: dict[str, list], share: float):
    """`good`, in its order, with bad records of every kind in `kinds` mixed in at random places,
    `share` of the total."""
    mixed = [(v, False) for v in good]
    for i in range(round(len(good) * share / (1 - share))):
        bad = rng.choice(kinds[list(kinds)[i % len(kinds)]])
        mixed.insert(rng.randrange(len(mixed) + 1), (bad, True))
    return mixed


def test_a_poison_stream_leaves_every_good_record_joined_and_every_bad_one_dead_lettered(
    kafka: str, tmp_path: Path
) -> None:
    rng = random.Random(5)
    orders_rows = [order_row(rng, 20)(f"o{i}") for i in range(1900)]
    products_events = debezium_changelog(rng, "p", 100, product_row(rng), key="product_id")
    orders, products, out = join_topics(kafka, partitions=2)
    left = poisoned(rng, [json.dumps(r).encode() for r in orders_rows], POISON, 0.05)
    right = poisoned(rng, [json.dumps(e).encode() for e in products_events], POISON_CHANGELOG, 0.05)
    produce(kafka, orders, [v for v, _ in left], partitions=2)
    produce(kafka, products, [v for v, _ in right])  # one partition: a changelog keeps its order
    bad = sum(is_bad for _, is_bad in left + right)
    expected = expected_left_join(
        {r["order_id"]: r for r in orders_rows}, final_table(products_events, "product_id")
    )
    env = join_env(kafka, orders, products, out, tmp_path / "ck") | FEW_PARTITIONS
    env["LEFT_FORMAT"] = "json"
    service = Service(env, tmp_path / "service.log")

    def dead_lettered() -> float:
        return sum(
            float(line.split()[-1])
            for line in scrape(service).splitlines()
            if line.startswith("streamjoin_dead_letters_total{")
        )

    try:
        wait_for(
            lambda: outputs(kafka, out)[0] == expected and dead_lettered() >= bad,
            300,
            "the good records were not all joined or counted",
            service,
        )
        table, dead = outputs(kafka, out)
        page = scrape(service)
        counted = dead_lettered()
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert table == expected
    assert sum(dead.values()) == len(dead) == bad  # each bad record once, by its coordinates
    assert counted == bad
    for reason in {*POISON, *POISON_CHANGELOG}:
        assert f'reason="{reason}"' in page
