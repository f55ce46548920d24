"""Source -> sink pass-through throughput of `streamjoin run` (records/s), on a real broker.

Usage: python bench/passthrough.py [RECORDS_PER_SIDE] [DELIVERY] [MODE]   (KAFKA_BOOTSTRAP_SERVERS
or embedded Tansu; DELIVERY is OUTPUT_DELIVERY's value, exactly-once by default)

MODE `live` (the default): the service is started, its first (cold) batch is waited out, then
the load is produced and the clock runs until the last record reaches the output topic. The
figure includes this script producing the load beside the service: on 2 cores its producer
takes a large share of the machine (see docs/design.md).

MODE `backlog`: the load is in the topics before the service starts, as in
`../shared/bench/side_by_side.py`; the output's arrivals are timed, and the rate is 90 % of the
records over the time between 5 % and 95 % of them (start-up excluded), in micro-batches of
25,000 records as side_by_side.py's candidate reads them. This is the service's
own rate, with only the output's reader beside it.
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import service_topics
from bench.plot import draw, followed, plot_path
from tests.kafka_io import produce, read_topic, unique
from tests.service import Service, service_env

PAYLOAD = b"x" * 100
FORWARDED = "streamjoin_input_rows_total"  # no join: what is read is what is written


def arrivals(bootstrap: str, topic: str, expected: int, timeout_s: float) -> list[float]:
    """The monotonic time at which each committed record of `topic` was read, until
    `expected` of them have been."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("bench-reader"),
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 1,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen: list[float] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(seen)} records, expected {expected}")
            batch = consumer.consume(10_000, 0.05)
            now = time.monotonic()
            seen += [now] * sum(1 for m in batch if not m.error())
    finally:
        consumer.close()
    return seen


def main() -> None:
    per_side = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    delivery = sys.argv[2] if len(sys.argv) > 2 else "exactly-once"
    mode = sys.argv[3] if len(sys.argv) > 3 else "live"
    total = 2 * per_side
    with ExitStack() as stack:
        bootstrap, work, left, right, out = service_topics(stack)
        env = service_env(
            KAFKA_BOOTSTRAP_SERVERS=bootstrap,
            LEFT_TOPIC=left,
            RIGHT_TOPIC=right,
            OUTPUT_TOPIC=out,
            CHECKPOINT_LOCATION=str(work / "ck"),
            TRIGGER_INTERVAL="0",
            OUTPUT_DELIVERY=delivery,
            JOIN_TYPE="forward",
        )
        if mode == "backlog":
            env["MAX_RECORDS_PER_TRIGGER"] = "25000"  # batches as side_by_side.py's candidate
            for topic in (left, right):
                produce(bootstrap, topic, [b"%09d" % i + PAYLOAD for i in range(per_side)], 4)
            service = Service(env, work / "service.log")
            stack.callback(service.terminate)
            with followed(service.endpoint, FORWARDED) as watched:
                times = arrivals(bootstrap, out, total, timeout_s=1800)
            t5, t95 = times[int(0.05 * total)], times[int(0.95 * total) - 1]
            print(
                f"pass-through ({delivery}, backlog): {total} records of ~110 B, "
                f"{0.9 * total / (t95 - t5):,.0f} records/s between 5 % and 95 % of the "
                f"output ({t95 - t5:.1f}s)"
            )
        else:
            service = Service(env, work / "service.log")
            stack.callback(service.terminate)
            with followed(service.endpoint, FORWARDED) as watched:
                produce(bootstrap, left, [b"warm"])
                read_topic(bootstrap, out, at_least=1, timeout_s=300)
                start = time.monotonic()
                for topic in (left, right):
                    produce(bootstrap, topic, [b"%09d" % i + PAYLOAD for i in range(per_side)], 4)
                produced_s = time.monotonic() - start
                read_topic(bootstrap, out, at_least=total + 1, timeout_s=1800)
                elapsed = time.monotonic() - start
            print(
                f"pass-through ({delivery}): {total} records of ~110 B in {elapsed:.1f}s = "
                f"{total / elapsed:,.0f} records/s (producing alone took {produced_s:.1f}s)"
            )
        title = f"pass-through ({delivery}, {mode}), {total:,} records"
        print(
            f"plot: {draw(plot_path('passthrough'), title, {'streamjoin run': watched.timeline})}"
        )


if __name__ == "__main__":
    main()
