"""The lookup join end to end: `streamjoin run` enriching orders from a PostgreSQL table.

Usage: python bench/lookup_join.py [ORDERS] [PRODUCTS]   (KAFKA_BOOTSTRAP_SERVERS or embedded
Tansu; a private PostgreSQL 15 cluster is started)

Each scenario is one service run on the same table: the service is started, its first (cold)
batch waited out, then ORDERS orders are produced and the clock runs until the last enriched
order is committed to the output topic ("first": what a service just started does, its JVM
still compiling Spark's planning and task code); then ORDERS more, asking for products no order
asked for before, timed the same way ("then": the service as it runs for days). The hit ratio
is the data's: the share of orders whose product an earlier order of its round already asked
for (0 %: every order a new product).

- async, partial cache, at 0 %, 90 % and 99 % hits (LOOKUP_ASYNC=true, the default);
- sync, no cache, at 0 % hits: one query per key, one at a time (Flink's JDBC lookup).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import numbers, service_topics
from bench.plot import Timeline, draw, followed, plot_path
from tests.kafka_io import create_topics, output_topics, produce, unique
from tests.postgres import PostgresCluster
from tests.service import Service, service_env

SCENARIOS = [  # name, hit ratio, variables
    ("async, partial cache", 0.0, {"LOOKUP_CACHE": "partial"}),
    ("async, partial cache", 0.9, {"LOOKUP_CACHE": "partial"}),
    ("async, partial cache", 0.99, {"LOOKUP_CACHE": "partial"}),
    ("sync, no cache", 0.0, {"LOOKUP_ASYNC": "false"}),
]


def orders(count: int, hits: float, first_product: int) -> list[bytes]:
    """`count` orders whose products repeat so that a share `hits` were asked for before."""
    distinct = max(1, round(count * (1 - hits)))
    return [
        json.dumps({"order_id": f"o{i}", "product_id": f"p{first_product + i % distinct}"}).encode()
        for i in range(count)
    ]


def run(
    bootstrap: str,
    work: Path,
    postgres: PostgresCluster,
    topics: tuple[str, str],
    count: int,
    hits: float,
    first_products: tuple[int, int],
    variables: dict[str, str],
) -> tuple[float, float, Timeline]:
    """Orders/s of the first `count` orders after start-up, then of the next `count`, each
    round asking for its own products (from `first_products[round]` on); the run's timeline."""
    left, out = topics
    env = service_env(
        **{
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "LEFT_TOPIC": left,
            "OUTPUT_TOPIC": out,
            "CHECKPOINT_LOCATION": str(work / f"ck-{time.monotonic_ns()}"),
            "TRIGGER_INTERVAL": "0",
            "MAX_RECORDS_PER_TRIGGER": "25000",
            "LEFT_SCHEMA": "order_id STRING, product_id STRING",
            "JOIN_TYPE": "lookup",
            "JOIN_KIND": "left",
            "JOIN_ON": "L.product_id = R.product_id",
            "OUTPUT_ENCODING": "append",
            "LOOKUP_URL": f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres",
            "LOOKUP_TABLE": "products",
            **variables,
        }
    )
    service = Service(env, work / "service.log")
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("bench-reader"),
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 1,
        }
    )
    try:
        with followed(service.endpoint) as watched:
            partitions = reader.list_topics(out, timeout=10).topics[out].partitions
            reader.assign([TopicPartition(out, p, 0) for p in partitions])
            warm = json.dumps({"order_id": "warm", "product_id": "p0"}).encode()
            produce(bootstrap, left, [warm])
            committed = committed_until(reader, 1, time.monotonic() + 300)
            rates = []
            for first_product in first_products:
                start = time.monotonic()
                produce(bootstrap, left, orders(count, hits, first_product), 4)
                committed = committed_until(reader, committed + count, start + 1800, committed)
                rates.append(count / (time.monotonic() - start))
        return rates[0], rates[1], watched.timeline
    finally:
        reader.close()
        service.terminate()


def committed_until(reader: Consumer, total: int, deadline: float, seen: int = 0) -> int:
    """Records read by `reader` (`seen` of them before), once there are `total`."""
    while seen < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{seen} enriched orders, expected {total}")
        seen += sum(1 for m in reader.consume(10_000, 0.05) if not m.error())
    return seen


def main() -> None:
    count, products = numbers(100_000, 1_000_000)
    with ExitStack() as stack:
        bootstrap, work, _left, _right, _out = service_topics(stack)
        postgres = stack.enter_context(PostgresCluster())
        postgres.sql(
            "CREATE TABLE products (product_id text PRIMARY KEY, name text, price numeric(10,2))"
        )
        postgres.sql(
            f"INSERT INTO products SELECT 'p' || i, 'product ' || i, i % 1000 "
            f"FROM generate_series(0, {products - 1}) AS i"
        )
        results = []
        timelines: dict[str, Timeline] = {}
        for n, (name, hits, variables) in enumerate(SCENARIOS):
            # each round asks for products no earlier round asked for: its caches start cold
            firsts = (1 + 2 * n * count, 1 + (2 * n + 1) * count)
            left, out = unique("orders"), unique("out")  # each run reads only its own orders
            create_topics(bootstrap, [left], 4)
            output_topics(bootstrap, out, 4)
            *rates, timelines[f"{name}, {hits:.0%} hits"] = run(
                bootstrap, work, postgres, (left, out), count, hits, firsts, variables
            )
            results.append((name, hits, rates))
            print(
                f"{name:22} {hits:>4.0%} hits: {rates[0]:>9,.0f} orders/s first, "
                f"{rates[1]:>9,.0f} then",
                flush=True,
            )
        sync = next(rates for name, _, rates in results if name.startswith("sync"))
        cold = next(r for name, hits, r in results if hits == 0 and name.startswith("async"))
        print(
            f"async / sync at 0 % hits: {cold[0] / sync[0]:.1f}x first, "
            f"{cold[1] / sync[1]:.1f}x then"
        )
        title = f"lookup join, {count:,} orders a round, {products:,} products"
        print(f"plot: {draw(plot_path('lookup_join'), title, timelines)}")


if __name__ == "__main__":
    main()
