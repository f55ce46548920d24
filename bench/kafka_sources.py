"""Spark's own Kafka connector beside the service's Python data source, on the same broker and
records, each feeding the same query: the records decoded by the service's decoder (JSON rows
with an event time) and written back by its exactly-once sink. Only the reading differs.

Usage: python bench/kafka_sources.py [--records N] [--rate R] [--seconds S] [--trigger MS]
(KAFKA_BOOTSTRAP_SERVERS, or an embedded Apache Kafka)

For each source, in a process of its own (its JVM and Python workers counted alone):
- catch-up: N records preloaded in 4 partitions, read with the available-now trigger:
  records/s and CPU seconds of the process tree while the query ran;
- live: R records/s for S seconds under a processing-time trigger of MS (the service's default
  1 s): each record's latency (handed to the producer -> its output row readable by a
  `read_committed` consumer), p50/p99, the median micro-batch (`triggerExecution`) and its
  stages, CPU seconds.

Spark's connector is 4.2.0 (Maven Central has none for pyspark 4.3 yet), fetched once
(`bench/spark_kafka_jars.txt`). Both read `read_committed`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.broker import embedded_broker
from app.jars import fetched
from tests.kafka_io import create_topics, output_topics, unique

PARTITIONS = 4
SOURCES = ("python-data-source", "spark-connector")
SCHEMA = "order_id STRING, sent_ms BIGINT, order_time TIMESTAMP(3)"
CONNECTOR_JARS = Path(__file__).with_name("spark_kafka_jars.txt")


def tree_cpu_s(root: int) -> float:
    """User and system CPU seconds of `root` and every live process below it."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
            times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack += [child for child, parent in parents.items() if parent == pid]
    return total


def record(order_id: int) -> bytes:
    now = time.time()
    order_time = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now))
    return json.dumps(
        {"order_id": f"o{order_id}", "sent_ms": int(now * 1000), "order_time": order_time}
    ).encode()


def preload(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, record(i), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def steady(bootstrap: str, topic: str, rate: int, seconds: float) -> None:
    """`rate` records a second for `seconds`, in 10 ms slices."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    start, sent, total = time.monotonic(), 0, int(rate * seconds)
    while sent < total:
        due = min(int((time.monotonic() - start) * rate), total)
        for i in range(sent, due):
            producer.produce(topic, record(i), partition=i % PARTITIONS)
        sent = max(sent, due)
        producer.poll(0)
        time.sleep(0.01)
    assert producer.flush(30) == 0


def latencies(bootstrap: str, topic: str, expected: int, timeout_s: float) -> list[float]:
    """Seconds from each output row's `sent_ms` to its being read, committed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("bench-reader"),
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: list[float] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.05):
                if not message.error():
                    seen.append(time.time() - json.loads(message.value())["sent_ms"] / 1000)
    finally:
        consumer.close()
    return seen


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# ---- one source's query, in its own process -------------------------------------------------


def query_output(spark, source: str, bootstrap: str, topic: str):
    """The decoded records as the sink takes them, read through `source`."""
    from pyspark.sql import functions as F

    from app.config.env import load_config
    from app.run.inputs import decode_input, input_decoder, read_input, row_type
    from serdes.kafka.datasource import decoding_source
    from serdes.kafka.decode import decoded_schema

    config = load_config(
        {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "LEFT_TOPIC": topic,
            "RIGHT_TOPIC": topic,
            "OUTPUT_TOPIC": "unused",
            "CHECKPOINT_LOCATION": "unused",
            "LEFT_SCHEMA": SCHEMA,
            "RIGHT_SCHEMA": SCHEMA,
            "JOIN_ON": "L.order_id = R.order_id",
            "STARTING_OFFSETS": "earliest",
        }
    )
    left = config.left
    if source == "python-data-source":
        name = "bench-decoding"
        decode = input_decoder(config, left, None, None, False)
        spark.dataSource.register(decoding_source(name, decode, decoded_schema(row_type(left))))
        decoded = read_input(spark, config, left, None, None, False, name)
    else:
        raw = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.isolation.level", "read_committed")
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .load()
            .select("key", "value", "topic", "partition", "offset", "timestamp", "headers")
        )
        decoded = decode_input(raw, config, left)
    good = decoded.where(F.col("error").isNull())
    return good.select(F.col("key"), F.to_json(F.col("row")).cast("binary").alias("value"))


def run_one(args: argparse.Namespace) -> None:
    from app.run.session import build_session
    from serdes.kafka.datasource import NAME
    from serdes.kafka.transactions import ExactlyOnce

    conf = {"spark.sql.shuffle.partitions": "2"}
    if args.child == "spark-connector":
        listed = fetched("spark_kafka", "Spark's Kafka connector", listing=CONNECTOR_JARS)
        conf["spark.jars"] = ",".join(map(str, listed))
    with tempfile.TemporaryDirectory() as work:
        spark = build_session("local[2]", conf, checkpoint=work)
        output = query_output(spark, args.child, args.bootstrap, args.input)
        exactly_once = ExactlyOnce(unique("bench"), f"{args.output}.markers")
        exactly_once.fence({"bootstrap.servers": args.bootstrap}, 2)
        writer = (
            output.writeStream.format(NAME)
            .option("topic", args.output)
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("transactionalId", exactly_once.transactional_id)
            .option("markerTopic", exactly_once.marker_topic)
            .option("checkpointLocation", f"{work}/checkpoint")
        )
        if args.phase == "catch-up":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{args.trigger} milliseconds")
        cpu, start = tree_cpu_s(os.getpid()), time.monotonic()
        query = writer.start()
        print("STARTED", flush=True)
        if args.phase == "catch-up":
            query.awaitTermination()
        else:
            sys.stdin.readline()  # the parent says when the load has been read
        seconds, cpu = time.monotonic() - start, tree_cpu_s(os.getpid()) - cpu
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        query.stop()
        result = {
            "seconds": seconds,
            "cpu_s": cpu,
            "rows": sum(p["numInputRows"] for p in query.recentProgress),
            "batch_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in progress),
            "stages_ms": {
                stage: statistics.median(p["durationMs"].get(stage, 0) for p in progress)
                for stage in ("latestOffset", "queryPlanning", "addBatch", "walCommit")
            },
        }
        print("RESULT " + json.dumps(result), flush=True)


def child(args: argparse.Namespace, source: str, phase: str, topic: str, out: str):
    command = [
        sys.executable,
        __file__,
        "--child",
        source,
        "--phase",
        phase,
        "--bootstrap",
        args.bootstrap,
        "--input",
        topic,
        "--output",
        out,
        "--trigger",
        str(args.trigger),
    ]
    # its log in --logs (the system's temporary directory by default)
    log = args.logs / f"{source}-{phase}.log"
    with log.open("w") as stderr:
        return subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True
        )


def next_line(process: subprocess.Popen, prefix: str) -> str:
    """The rest of the child's next line that starts with `prefix` (its log kept if none)."""
    for line in process.stdout:  # type: ignore[union-attr]
        if line.startswith(prefix):
            return line[len(prefix) :]
    raise RuntimeError(f"no {prefix.strip()} from {process.args[3]} (exit {process.wait()})")


def result_of(process: subprocess.Popen) -> dict:
    result = json.loads(next_line(process, "RESULT "))
    process.wait(60)
    return result


def topics(bootstrap: str) -> tuple[str, str]:
    topic, out = unique("in"), unique("out")
    create_topics(bootstrap, [topic], PARTITIONS)
    output_topics(bootstrap, out, PARTITIONS)
    return topic, out


def compare(args: argparse.Namespace) -> dict:
    results: dict = {}
    for source in SOURCES:
        topic, out = topics(args.bootstrap)
        preload(args.bootstrap, topic, args.records)
        catch_up = result_of(child(args, source, "catch-up", topic, out))
        catch_up["records_per_s"] = args.records / catch_up["seconds"]

        topic, out = topics(args.bootstrap)
        preload(args.bootstrap, topic, 100)  # warms the query: its first batch is not timed
        process = child(args, source, "live", topic, out)
        next_line(process, "STARTED")
        assert len(latencies(args.bootstrap, out, 100, 120)) == 100, "no warm-up output"
        expected = int(args.rate * args.seconds)
        load = threading.Thread(
            target=steady, args=(args.bootstrap, topic, args.rate, args.seconds)
        )
        load.start()
        seen = latencies(args.bootstrap, out, 100 + expected, args.seconds + 120)[100:]
        load.join()
        process.stdin.write("done\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        live = result_of(process)
        live.update(p50_s=percentile(seen, 0.5), p99_s=percentile(seen, 0.99), read=len(seen))
        results[source] = {"catch-up": catch_up, "live": live}
        print(source, json.dumps(results[source]), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--trigger", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--bootstrap")
    parser.add_argument("--child", choices=SOURCES)
    parser.add_argument("--phase", choices=("catch-up", "live"))
    parser.add_argument("--input")
    parser.add_argument("--output")
    args = parser.parse_args()
    if args.child:
        run_one(args)
        return
    with ExitStack() as stack:
        args.bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not args.bootstrap:
            args.bootstrap = stack.enter_context(embedded_broker()).bootstrap
        results = compare(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
