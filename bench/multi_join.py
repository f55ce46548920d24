"""A three-way star join over CDC tables through `streamjoin run`: the chain of joins (Flink's
default plan) against the multi-way join (`SET 'table.optimizer.multi-join.enabled'`).

Usage: python bench/multi_join.py [USERS] [ORDERS] [RUNS]   (KAFKA_BOOTSTRAP_SERVERS or embedded
Tansu)

Orders (a Debezium topic: created, some updated, some deleted), users (an upsert topic) and
their accounts (an append-only topic), all keyed by the user, joined in one query (the query of
`tests/test_multi_join_service.py`):

    SELECT … FROM orders o JOIN users u ON o.user_id = u.user_id
    LEFT JOIN accounts a ON o.user_id = a.user_id

Each run is one `streamjoin run` to the end of the topics (available-now) on a new checkpoint;
the plans alternate, RUNS each. Reported per run: the seconds from launch to exit (start-up
included), the input records per second, and the rows the state holds at the end per operator
and side (the checkpoint's record of `streamjoin_state_rows`). The output of the two plans is
the same table (checked).
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.broker import embedded_broker
from bench.harness import numbers
from tests.kafka_io import committed_output, create_topics, output_topics, unique
from tests.service import run_to_exit, service_env
from tests.test_multi_join_service import MULTI_WAY, STAR


def produce_inputs(bootstrap: str, topics: dict[str, str], users: int, orders: int) -> int:
    """The three topics' records; how many."""
    rng = random.Random(5)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    count = 0

    def send(topic: str, key: dict, value: dict | None) -> None:
        nonlocal count
        producer.produce(
            topics[topic],
            None if value is None else json.dumps(value).encode(),
            json.dumps(key).encode(),
        )
        count += 1
        if count % 50_000 == 0:
            producer.flush()

    for i in range(users):
        uid = f"u{i}"
        send("users", {"user_id": uid}, {"user_id": uid, "name": f"name{i}"})
        send(
            "accounts",
            {"user_id": uid},
            {"user_id": uid, "tier": rng.choice(["gold", "silver", "bronze"])},
        )
    live: dict[str, dict] = {}
    for i in range(orders):
        order = {
            "order_id": f"o{i}",
            "user_id": f"u{rng.randrange(users)}",
            "amount": rng.randrange(1, 500),
        }
        live[order["order_id"]] = order
        send("orders", {"order_id": order["order_id"]}, {"before": None, "after": order, "op": "c"})
        old = live.get(f"o{rng.randrange(i + 1)}") if i % 10 == 9 else None
        if old is not None and rng.random() < 0.7:  # an earlier order updated, or deleted
            new = live[old["order_id"]] = old | {"amount": old["amount"] + 1}
            send("orders", {"order_id": old["order_id"]}, {"before": old, "after": new, "op": "u"})
        elif old is not None:
            del live[old["order_id"]]
            send("orders", {"order_id": old["order_id"]}, {"before": old, "after": None, "op": "d"})
    for i in range(0, users, 10):  # a tenth of the users renamed
        uid = f"u{i}"
        send("users", {"user_id": uid}, {"user_id": uid, "name": f"renamed{i}"})
    producer.flush()
    return count


def held_rows(checkpoint: Path) -> Counter:
    """The rows the state held at the end, per operator and side."""
    held: Counter = Counter()
    saved = checkpoint / "streamjoin-held-rows.json"
    for operator, side, _bucket, _when, counts in json.loads(saved.read_text()):
        held[f"{operator} {side}"] += sum(n for _expires, n in counts)
    return held


def final_table(bootstrap: str, out: str) -> Counter:
    table: Counter = Counter()
    for record in committed_output(bootstrap, out, f"{out}.markers"):
        value = json.loads(record.value)
        row, sign = (value["after"], 1) if value["after"] is not None else (value["before"], -1)
        table[json.dumps(row, sort_keys=True)] += sign
    return +table


def main() -> None:
    users, orders, runs = numbers(20_000, 200_000, 2)
    with ExitStack() as stack:
        bootstrap = (
            os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
            or stack.enter_context(embedded_broker()).bootstrap
        )
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        topics = {name: unique(name) for name in ("orders", "users", "accounts")}
        create_topics(bootstrap, list(topics.values()), 4)
        records = produce_inputs(bootstrap, topics, users, orders)
        print(f"{records:,} input records: {users:,} users and accounts, {orders:,} orders")
        tables = {}
        for run in range(runs):
            for plan, multi in (("chain", ""), ("multi-way", MULTI_WAY)):
                out = unique("out")
                output_topics(bootstrap, out, 4)
                checkpoint = work / out
                env = service_env(
                    KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                    CHECKPOINT_LOCATION=str(checkpoint),
                    STREAMJOIN_SQL=STAR.format(multi=multi, out=out, **topics),
                    TRIGGER_INTERVAL="available-now",
                    MAX_RECORDS_PER_TRIGGER="100000",
                )
                start = time.monotonic()
                done = run_to_exit(env, timeout_s=3600)
                seconds = time.monotonic() - start
                assert done.returncode == 0, done.stderr[-3000:]
                held = held_rows(checkpoint)
                tables[plan] = final_table(bootstrap, out)
                print(
                    f"run {run + 1} {plan:9s} {seconds:7.1f}s {records / seconds:9,.0f} "
                    f"records/s  state rows {sum(held.values()):,}: "
                    + ", ".join(f"{k} {n:,}" for k, n in sorted(held.items()))
                )
        assert tables["chain"] == tables["multi-way"], "the plans' outputs differ"
        print(f"both plans: the same {sum(tables['chain'].values()):,} output rows")


if __name__ == "__main__":
    main()
