"""A skewed load through `streamjoin run`: memory stays bounded, peak RSS is reported.

Usage: python bench/load.py [ROWS_PER_SIDE] [RECORDS_PER_TRIGGER]   (KAFKA_BOOTSTRAP_SERVERS or
embedded Tansu)

Orders and shipments (JSON) joined by an event-time interval join, shipments within 2 s of
their order. One key carries 10% of each side's rows (one every second of event time), the
rest are spread over 100,000 keys; a row every 100 ms of event time. The service reads the
topics in micro-batches of RECORDS_PER_TRIGGER records per input, exactly-once, and stops when
everything available was processed. Every half second the resident memory of its processes is
summed by kind: the driver's Python, Spark's JVM, Spark's Python workers.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer

from bench.harness import numbers, service_topics
from tests.kafka_io import read_topic
from tests.service import Service, service_env

HOT_SHARE = 0.10
KEYS = 100_000
STEP_MS = 100
PAGE = os.sysconf("SC_PAGE_SIZE")


def produce_side(bootstrap: str, topic: str, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    for i in range(rows):
        key = "hot" if rng.random() < HOT_SHARE else f"k{rng.randrange(KEYS)}"
        value = json.dumps({"id": f"{seed}-{i}", "k": key, "ts": i * STEP_MS + rng.randrange(50)})
        while True:
            try:
                producer.produce(topic, value.encode(), key.encode())
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def kind_of(pid: int) -> str | None:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    if "java" in command.split(" ")[0]:
        return "jvm"
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return "python workers"
    if "app.cli" in command:
        return "driver (python)"
    return None


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children[int(fields[1])].append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except OSError:
        return 0


def watch_memory(root: int, peaks: dict[str, int], done: threading.Event) -> None:
    while not done.is_set():
        now: dict[str, int] = defaultdict(int)
        for pid in descendants(root):
            kind = kind_of(pid)
            if kind:
                now[kind] += rss_bytes(pid)
        for kind, size in now.items():
            peaks[kind] = max(peaks.get(kind, 0), size)
        peaks["all"] = max(peaks.get("all", 0), sum(now.values()))
        done.wait(0.5)


def main() -> None:
    per_side, per_trigger = numbers(1_000_000, 100_000)
    with ExitStack() as stack:
        bootstrap, work, orders, shipments, out = service_topics(stack)
        start = time.monotonic()
        for topic, seed in ((orders, 1), (shipments, 2)):
            produce_side(bootstrap, topic, per_side, seed)
        print(f"produced {per_side:,} rows per side in {time.monotonic() - start:.0f}s")
        schema = "id STRING, k STRING, ts TIMESTAMP(3)"
        env = service_env(
            KAFKA_BOOTSTRAP_SERVERS=bootstrap, LEFT_TOPIC=orders, RIGHT_TOPIC=shipments,
            OUTPUT_TOPIC=out, CHECKPOINT_LOCATION=str(work / "ck"),
            TRIGGER_INTERVAL="available-now", MAX_RECORDS_PER_TRIGGER=str(per_trigger),
            LEFT_SCHEMA=schema, RIGHT_SCHEMA=schema, LEFT_TIME="ts", RIGHT_TIME="ts",
            LEFT_WATERMARK_DELAY="1s", RIGHT_WATERMARK_DELAY="1s",
            JOIN_TYPE="interval", JOIN_KIND="left", OUTPUT_ENCODING="append",
            JOIN_ON="L.k = R.k AND R.ts BETWEEN L.ts - INTERVAL '2' SECOND "
                    "AND L.ts + INTERVAL '2' SECOND",
        )  # fmt: skip
        peaks: dict[str, int] = {}
        done = threading.Event()
        start = time.monotonic()
        service = Service(env, work / "service.log")
        watcher = threading.Thread(
            target=watch_memory, args=(service.process.pid, peaks, done), daemon=True
        )
        watcher.start()
        code = service.process.wait()
        elapsed = time.monotonic() - start
        done.set()
        watcher.join()
        assert code == 0, service.log()[-3000:]
        print(f"joined {2 * per_side:,} rows in {elapsed:.0f}s (start-up included): "
              f"{2 * per_side / elapsed:,.0f} rows/s")  # fmt: skip
        joined = len(read_topic(bootstrap, out, timeout_s=600))
        print(f"  {joined:,} output rows; {per_side * HOT_SHARE:,.0f} rows per side on the hot key")
        for kind in ("driver (python)", "jvm", "python workers", "all"):
            print(f"  peak RSS {kind:16s} {peaks.get(kind, 0) / 2**20:8,.0f} MiB")


if __name__ == "__main__":
    main()
