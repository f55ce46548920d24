"""The seed's join live: orders at a steady rate, each joined with its product's price as of the
order's time, against a products table of 1,000,000 versions, through `streamjoin run`.

Usage: python bench/live_temporal.py [--products P] [--versions V] [--rate R] [--seconds S]
       [--ticks T]   (KAFKA_BOOTSTRAP_SERVERS, or an embedded Apache Kafka)

1. The products topic (an upsert topic keyed by product id) is filled with P products of V
   versions each, their update times in the two hours before now.
2. The service starts (an event-time LEFT temporal join, exactly-once retract output) and reads
   that table; warm-up orders come every half second, with T product updates a second (at the
   wall clock: the products' watermark moves only with them, as in Flink), until the first
   warm-up order comes out. The table's load time is reported.
3. R orders a second for S seconds, each for a random product and at the wall clock, and T
   product updates a second beside them. The latency of an order is the time from its hand-over
   to the producer to its joined row read by a `read_committed` consumer; reported over the
   window's last 80 %, with the service's CPU (its process tree) in the window.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import service_topics
from bench.kafka_sources import percentile, tree_cpu_s
from tests.kafka_io import unique
from tests.service import Service, service_env

WARM = 10_000_000  # warm-up orders are numbered from here


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def product(pid: int, at: float, rng: random.Random) -> tuple[bytes, bytes]:
    row = {"product_id": f"p{pid}", "price": f"{rng.randrange(100, 99999) / 100:.2f}"}
    row["update_time"] = iso(at)
    return f"p{pid}".encode(), json.dumps(row).encode()


def producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "queue.buffering.max.messages": 2_000_000,
        }
    )


def send(out: Producer, topic: str, key: bytes | None, value: bytes) -> None:
    while True:
        try:
            out.produce(topic, value, key)
            return
        except BufferError:
            out.poll(0.05)


def fill_table(bootstrap: str, topic: str, products: int, versions: int) -> None:
    rng, out = random.Random(1), producer(bootstrap)
    start = time.time() - 7200
    step = 7000 / versions
    for version in range(versions):
        for pid in range(products):
            send(out, topic, *product(pid, start + version * step + pid * step / products, rng))
        out.poll(0)
    assert out.flush(120) == 0


class Orders:
    """Orders (numbered, stamped with their hand-over time) and live product updates."""

    def __init__(self, bootstrap: str, orders: str, products: str, count: int) -> None:
        self.out, self.orders, self.products, self.count = (
            producer(bootstrap),
            orders,
            products,
            count,
        )
        self.rng = random.Random(2)
        self.sent: dict[int, float] = {}

    def order(self, number: int) -> None:
        now = time.time()
        row = {
            "order_id": f"o{number}",
            "product_id": f"p{self.rng.randrange(self.count)}",
            "order_time": iso(now),
        }
        send(self.out, self.orders, row["order_id"].encode(), json.dumps(row).encode())
        self.sent[number] = now
        self.out.poll(0)

    def tick(self) -> None:
        send(
            self.out, self.products, *product(self.rng.randrange(self.count), time.time(), self.rng)
        )


class Arrivals(threading.Thread):
    """The first arrival time of each order's joined row on the output topic."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("bench-arrivals"),
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 20,
            }
        )
        partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self.arrived: dict[int, float] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for message in self.consumer.consume(10_000, 0.05):
                if message.error() or message.value() is None:
                    continue
                number = int(json.loads(message.value())["L_order_id"][1:])
                self.arrived.setdefault(number, time.time())
        self.consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--products", type=int, default=200_000)
    parser.add_argument("--versions", type=int, default=5)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--ticks", type=int, default=100)
    args = parser.parse_args()
    with ExitStack() as stack:
        bootstrap, work, orders, products, out = service_topics(stack)
        began = time.monotonic()
        fill_table(bootstrap, products, args.products, args.versions)
        print(
            f"table: {args.products * args.versions:,} versions in {time.monotonic() - began:.0f} s"
        )
        env = service_env(
            KAFKA_BOOTSTRAP_SERVERS=bootstrap,
            LEFT_TOPIC=orders,
            LEFT_FORMAT="json",
            LEFT_SCHEMA="order_id STRING, product_id STRING, order_time TIMESTAMP(3)",
            LEFT_TIME="order_time",
            RIGHT_TOPIC=products,
            RIGHT_FORMAT="upsert",
            RIGHT_SCHEMA="product_id STRING, price DECIMAL(10, 2), update_time TIMESTAMP(3)",
            RIGHT_PRIMARY_KEY="product_id",
            RIGHT_TIME="update_time",
            JOIN_TYPE="temporal",
            JOIN_KIND="left",
            JOIN_ON="L.product_id = R.product_id",
            OUTPUT_TOPIC=out,
            OUTPUT_ENCODING="retract",
            CHECKPOINT_LOCATION=str(work / "checkpoint"),
            STARTING_OFFSETS="earliest",
        )
        arrivals = Arrivals(bootstrap, out)
        arrivals.start()
        load = Orders(bootstrap, orders, products, args.products)
        service = Service(env, work / "service.log")
        started, warm = time.monotonic(), WARM
        while WARM not in arrivals.arrived:
            if service.process.poll() is not None or time.monotonic() - started > 900:
                raise SystemExit(f"no warm-up output; the service's log: {service.log()[-3000:]}")
            load.order(warm)
            warm += 1
            for _ in range(args.ticks // 2):
                load.tick()
            time.sleep(0.5)
        print(f"first output {time.monotonic() - started:.1f} s after the start (the table read)")
        time.sleep(5)
        total = int(args.rate * args.seconds)
        cpu, window, sent, ticks = tree_cpu_s(service.process.pid), time.monotonic(), 0, 0
        while sent < total:
            elapsed = time.monotonic() - window
            for number in range(sent, min(int(elapsed * args.rate), total)):
                load.order(number)
            sent = max(sent, min(int(elapsed * args.rate), total))
            for _ in range(ticks, int(elapsed * args.ticks)):
                load.tick()
            ticks = max(ticks, int(elapsed * args.ticks))
            time.sleep(0.005)
        load.out.flush(30)
        seconds = time.monotonic() - window
        cores = (tree_cpu_s(service.process.pid) - cpu) / seconds
        deadline = time.monotonic() + 120
        while len([n for n in range(total) if n in arrivals.arrived]) < total:
            if time.monotonic() > deadline:
                break
            # both inputs' watermarks move on (each the least of its partitions'), so that
            # the last orders come out
            load.tick()
            load.order(warm)
            warm += 1
            time.sleep(0.05)
        load.out.flush(30)  # the drain's last records
        sent_at = load.sent
        del load  # its producer closed before the broker stops, which it would log
        service.terminate()
        arrivals.halt.set()
        skip = total // 5
        late = [
            arrivals.arrived[n] - sent_at[n] for n in range(skip, total) if n in arrivals.arrived
        ]
        joined = sum(n in arrivals.arrived for n in range(total))
        print(
            f"{args.rate} orders/s for {args.seconds:.0f} s against "
            f"{args.products * args.versions:,} versions: {joined}/{total} joined, "
            f"p50 {percentile(late, 0.5):.3f} s, p99 {percentile(late, 0.99):.3f} s, "
            f"max {max(late):.3f} s, {cores:.2f} cores"
        )


if __name__ == "__main__":
    main()
