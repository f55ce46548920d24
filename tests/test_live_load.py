"""The service as it runs in production: producers writing while it joins, a broker that stops
answering, a supervisor that restarts it at once after a crash."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from app.broker import free_port
from serdes.kafka.offsets import UNANSWERED, PartitionBounds
from tests.kafka_broker import crashable_broker
from tests.kafka_io import create_topics, join_topics, produce, unique
from tests.service import Service
from tests.test_faults import FEW_PARTITIONS, product_row, table
from tests.test_join_service import expected_left_join, join_env, scrape
from tests.test_service import wait_for

pytestmark = pytest.mark.spark


class LiveProducer(threading.Thread):
    """Debezium changes of orders (and now and then of a product) at a steady wall-clock rate,
    each record sent on its own (`linger.ms` 0: the many small batches that slow a broker)."""

    def __init__(self, kafka: str, orders: str, products: str, rate: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.kafka, self.orders, self.products = kafka, orders, products
        self.rate, self.seconds = rate, seconds
        self.rng = random.Random(7)
        self.order_table: dict[str, dict] = {}
        self.product_table: dict[str, dict] = {}
        self.errors: list[str] = []

    def _send(self, producer: Producer, topic: str, key: str, row: dict) -> None:
        event = json.dumps({"before": None, "after": row, "op": "c"}).encode()
        producer.produce(topic, event, row[key].encode(), on_delivery=self._delivered)
        producer.poll(0)

    def _delivered(self, error, _message) -> None:
        if error is not None:
            self.errors.append(str(error))

    def load_products(self, count: int) -> None:
        producer = Producer({"bootstrap.servers": self.kafka})
        make = product_row(self.rng)
        for i in range(count):
            self.product_table[f"p{i}"] = row = make(f"p{i}")
            self._send(producer, self.products, "product_id", row)
        assert producer.flush(30) == 0

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.kafka, "linger.ms": 0})
        make_product = product_row(self.rng)
        began, sent = time.monotonic(), 0
        while (elapsed := time.monotonic() - began) < self.seconds:
            for _ in range(int(self.rate * elapsed) - sent):
                sent += 1
                if sent % 20 == 0:  # a price change
                    pid = f"p{self.rng.randrange(len(self.product_table))}"
                    self.product_table[pid] = row = make_product(pid)
                    self._send(producer, self.products, "product_id", row)
                    continue
                oid = f"o{sent}"
                pid = f"p{self.rng.randrange(len(self.product_table) + 5)}"  # some never exist
                self.order_table[oid] = row = {"order_id": oid, "product_id": pid, "qty": 1}
                self._send(producer, self.orders, "order_id", row)
            time.sleep(0.005)
        if producer.flush(30):
            self.errors.append("records left undelivered")


def test_a_live_producer_is_joined_exactly_once_and_the_query_lives_on(
    kafka: str, tmp_path: Path
) -> None:
    """Half a minute of orders and price changes produced while the service joins them (a regular
    LEFT join under a state TTL longer than the run): the query is alive at the end, its log
    held no error while it ran, and the committed output is the join of the final tables, once
    each."""
    orders, products, out = join_topics(kafka, partitions=4)
    live = LiveProducer(kafka, orders, products, rate=150, seconds=30)
    live.load_products(200)
    env = (
        join_env(kafka, orders, products, out, tmp_path / "ck")
        | FEW_PARTITIONS
        | {
            "STATE_TTL": "1h",
            "TRIGGER_INTERVAL": "1s",
        }
    )
    service = Service(env, tmp_path / "log")
    try:
        wait_for(
            lambda: "streamjoin_last_batch_id" in scrape(service),
            180,
            "the service never ran a batch",
            service,
        )
        live.start()
        live.join(120)
        assert not live.errors, live.errors[:3]
        expected = expected_left_join(live.order_table, live.product_table)
        wait_for(
            lambda: table(kafka, out) == expected,
            300,
            "the live orders never materialized to the expected join",
            service,
        )
        assert service.process.poll() is None, "the query ended"
        running = service.log()
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert "Traceback" not in running and " ERROR " not in running, running[-3000:]


def test_a_broker_that_stops_answering_leaves_the_last_ends_found(tmp_path: Path) -> None:
    """Finding where partitions end never fails the query: with the broker gone, a trigger
    plans on the ends found before (it reads nothing new) and the next one asks again."""
    with crashable_broker() as broker:
        topic = unique("ends")
        create_topics(broker.bootstrap, [topic], partitions=2)
        produce(broker.bootstrap, topic, [b"%d" % i for i in range(10)], partitions=2)
        bounds = PartitionBounds(topic, {"bootstrap.servers": broker.bootstrap})
        assert bounds.ends() == {0: 5, 1: 5}
        broker.crash()
        assert bounds.ends() == {0: 5, 1: 5}
        assert bounds.fallbacks[UNANSWERED] == 1  # counted on /metrics
        bounds.close()


def test_a_service_restarted_right_after_a_crash_starts_on_its_port(
    kafka: str, tmp_path: Path
) -> None:
    """A supervisor restarts a crashed service at once, on the same metrics port, while the
    connections a scraper had open linger (TIME_WAIT): the new one must start, not exit 2, and
    the crashed driver's JVM and Python workers must have gone with it."""
    orders, products, out = join_topics(kafka)
    port = free_port()
    env = (
        join_env(kafka, orders, products, out, tmp_path / "ck")
        | FEW_PARTITIONS
        | {
            "METRICS_PORT": str(port),
        }
    )
    first = Service(env, tmp_path / "first.log")
    page = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for(
            lambda: "streamjoin_last_batch_id" in scrape(first),
            180,
            "the first service never ran a batch",
            first,
        )
        for _ in range(5):  # scrapes whose connections the server closes first: TIME_WAIT
            urllib.request.urlopen(page, timeout=5).read()
        children = descendants(first.process.pid)
        first.process.send_signal(signal.SIGKILL)  # the driver alone, as a crash leaves it
        first.process.wait(30)
    finally:
        if first.process.poll() is None:
            first.kill()
    deadline = time.monotonic() + 60
    while living := [p for p in children if alive(p)]:
        assert time.monotonic() < deadline, f"processes of the crashed service live on: {living}"
        time.sleep(0.5)
    second = Service(env, tmp_path / "second.log")
    try:
        wait_for(
            lambda: "streamjoin_last_batch_id" in scrape(second),
            180,
            "the restarted service never ran a batch",
            second,
        )
    finally:
        assert second.terminate() == 0, second.log()[-3000:]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (its JVM, the JVM's Python workers, ...)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie's work is done: only its exit status is left)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
