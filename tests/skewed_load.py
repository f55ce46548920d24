"""A skewed load through `streamjoin run`, with the peak memory of its processes.

Orders and shipments (JSON) joined by an event-time LEFT interval join, shipments within 2 s of
their order. One key carries 10% of each side's rows (one every second of event time), the rest
are spread over 100,000 keys; a row every 100 ms of event time. Each side ends with a closing
row in each partition 10 s of event time after the rest, on a key of its own: the last orders
wait, as in Flink, for a watermark past their interval before they come out padded, and the
closing rows bring it. The service reads the topics in
micro-batches of `per_trigger` records per input, exactly-once, and stops when everything
available was processed. Every half second the resident memory of its processes is summed by
kind: the driver's Python, Spark's JVM, Spark's Python workers.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from tests.kafka_io import read_topic
from tests.service import Service, service_env

HOT_SHARE = 0.10
KEYS = 100_000
STEP_MS = 100
PAGE = os.sysconf("SC_PAGE_SIZE")
KINDS = ("driver (python)", "jvm", "python workers", "all")


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
    # a closing row in every partition: an input's watermark is its partitions' least, as in
    # Flink, so each must move past the last orders
    for partition in producer.list_topics(topic, timeout=30).topics[topic].partitions:
        closing = {
            "id": f"{seed}-closing-{partition}",
            "k": f"closing-{seed}",
            "ts": (rows + 100) * STEP_MS,
        }
        producer.produce(topic, json.dumps(closing).encode(), closing["k"].encode(), partition)
    assert producer.flush(120) == 0


def _kind_of(pid: int) -> str | None:
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


def _descendants(root: int) -> list[int]:
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


def _rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except OSError:
        return 0


def _watch_memory(root: int, peaks: dict[str, int], done: threading.Event) -> None:
    while not done.is_set():
        now: dict[str, int] = defaultdict(int)
        for pid in _descendants(root):
            kind = _kind_of(pid)
            if kind:
                now[kind] += _rss_bytes(pid)
        for kind, size in now.items():
            peaks[kind] = max(peaks.get(kind, 0), size)
        peaks["all"] = max(peaks.get("all", 0), sum(now.values()))
        done.wait(0.5)


@dataclass
class LoadResult:
    seconds: float  # the service's whole run, start-up included
    orders_out: int  # distinct orders in the output (each must come out, joined or padded;
    # the closing orders stay in state, waiting for a watermark past their interval)
    rows_out: int
    peak_rss: dict[str, int]  # bytes, by kind of process
    exit_code: int
    log: str


def run_load(
    bootstrap: str,
    work: Path,
    orders: str,
    shipments: str,
    out: str,
    per_side: int,
    per_trigger: int,
    follow: Callable[[Service, threading.Event], None] | None = None,
) -> LoadResult:
    """Fill both topics, run the join over them to the end, and measure; `follow` watches the
    running service (in a thread of its own) until it is done."""
    for topic, seed in ((orders, 1), (shipments, 2)):
        produce_side(bootstrap, topic, per_side, seed)
    schema = "id STRING, k STRING, ts TIMESTAMP(3)"
    env = service_env(
        short_lived=False,
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        LEFT_TOPIC=orders,
        RIGHT_TOPIC=shipments,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(work / "ck"),
        TRIGGER_INTERVAL="available-now",
        MAX_RECORDS_PER_TRIGGER=str(per_trigger),
        LEFT_SCHEMA=schema,
        RIGHT_SCHEMA=schema,
        LEFT_TIME="ts",
        RIGHT_TIME="ts",
        LEFT_WATERMARK_DELAY="1s",
        RIGHT_WATERMARK_DELAY="1s",
        JOIN_TYPE="interval",
        JOIN_KIND="left",
        OUTPUT_ENCODING="append",
        JOIN_ON="L.k = R.k AND R.ts BETWEEN L.ts - INTERVAL '2' SECOND "
        "AND L.ts + INTERVAL '2' SECOND",
        JOIN_SELECT="L.id",
    )
    peaks: dict[str, int] = {}
    done = threading.Event()
    start = time.monotonic()
    service = Service(env, work / "service.log")
    watcher = threading.Thread(
        target=_watch_memory, args=(service.process.pid, peaks, done), daemon=True
    )
    watchers = [watcher]
    if follow is not None:
        watchers.append(threading.Thread(target=follow, args=(service, done), daemon=True))
    for thread in watchers:
        thread.start()
    code = service.process.wait()
    seconds = time.monotonic() - start
    done.set()
    for thread in watchers:
        thread.join()
    output = read_topic(bootstrap, out, timeout_s=600) if code == 0 else []
    orders_out = {json.loads(r.value)["id"] for r in output}
    return LoadResult(seconds, len(orders_out), len(output), peaks, code, service.log())
