"""Source -> sink pass-through throughput of `streamjoin run` (records/s), on a real broker.

Usage: python bench/passthrough.py [RECORDS_PER_SIDE] [DELIVERY]   (KAFKA_BOOTSTRAP_SERVERS or
embedded Tansu; DELIVERY is OUTPUT_DELIVERY's value, exactly-once by default)

Measures the steady state: the service is started, its first (cold) batch is waited out, then
the timed load is produced and the clock runs until the last record reaches the output topic.
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import service_topics
from tests.kafka_io import produce, read_topic
from tests.service import Service, service_env


def main() -> None:
    per_side = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    delivery = sys.argv[2] if len(sys.argv) > 2 else "exactly-once"
    with ExitStack() as stack:
        bootstrap, work, left, right, out = service_topics(stack)
        env = service_env(
            KAFKA_BOOTSTRAP_SERVERS=bootstrap, LEFT_TOPIC=left, RIGHT_TOPIC=right,
            OUTPUT_TOPIC=out, CHECKPOINT_LOCATION=str(work / "ck"), TRIGGER_INTERVAL="0",
            OUTPUT_DELIVERY=delivery, JOIN_TYPE="forward",
        )  # fmt: skip
        service = Service(env, work / "service.log")
        stack.callback(service.terminate)
        produce(bootstrap, left, [b"warm"])
        read_topic(bootstrap, out, at_least=1, timeout_s=300)
        payload = b"x" * 100
        start = time.monotonic()
        for topic in (left, right):
            produce(bootstrap, topic, [b"%09d" % i + payload for i in range(per_side)], 4)
        produced_s = time.monotonic() - start
        read_topic(bootstrap, out, at_least=2 * per_side + 1, timeout_s=1800)
        elapsed = time.monotonic() - start
        total = 2 * per_side
        print(
            f"pass-through ({delivery}): {total} records of ~110 B in {elapsed:.1f}s = "
            f"{total / elapsed:,.0f} records/s (producing alone took {produced_s:.1f}s)"
        )


if __name__ == "__main__":
    main()
