"""streamjoin on Nexmark's join queries, as written (`bench/nexmark/`), through `streamjoin
run` from a Kafka topic of `bench/nexmark_generator.py`'s events: the speed beside Flink's
(`bench/nexmark_flink.py`, the same events from a file) and the results against Flink's.

    python bench/nexmark_service.py --bootstrap HOST:PORT --events 1000000 q3 q20 q23
    python bench/nexmark_service.py --bootstrap HOST:PORT --events 80000 --check q3 q20 q23
    python bench/nexmark_service.py --bootstrap HOST:PORT --events 1000000 \
        --set table.optimizer.multi-join.enabled=true q23

Each query runs as a job of its own over a topic filled first (available-now, exactly-once
defaults, a fresh checkpoint). Its cost is the CPU the service's processes used (the driver's
Python, Spark's JVM and its Python workers, sampled from /proc as it runs), less that of the
same query over the first 10,000 events, so that what the JVM's start and Spark's planning cost
is not counted: the events per CPU-second of the rest, as Flink's JVM is measured warm. With
`--check`, the query's blackhole sink is a Kafka topic instead, and its rows' count and checksum
(`bench/nexmark_check.py`) are printed, to compare with `nexmark_flink.py --check`. `--set
KEY=VALUE` (repeatable) puts a `SET` statement before each query, as `nexmark_flink.py --set`
sets that option for Flink's jobs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from nexmark_check import checksum  # noqa: E402
from nexmark_generator import NexmarkConfig, NexmarkGenerator  # noqa: E402

QUERIES = BENCH / "nexmark"
WARM_EVENTS = 10_000
_BLACKHOLE = "'connector' = 'blackhole'"


Option = tuple[str, str]  # a table option's key and value, from `--set KEY=VALUE`


def script(
    query: str,
    bootstrap: str,
    topic: str,
    output: str | None = None,
    options: Sequence[Option] = (),
) -> str:
    """Nexmark's table over `topic`, its views and the query, after a `SET` of each of
    `options`; its sink the topic `output` (JSON) instead of the blackhole, if given."""
    table = (QUERIES / "ddl_kafka.sql").read_text()
    table = table.replace("${BOOTSTRAP_SERVERS}", bootstrap)
    table = table.replace("'topic' = 'nexmark'", f"'topic' = '{topic}'")
    views = (QUERIES / "ddl_views.sql").read_text().replace("${NEXMARK_TABLE}", "kafka")
    text = (QUERIES / f"{query}.sql").read_text()
    if output is not None:
        kafka = f"'connector' = 'kafka', 'topic' = '{output}', 'format' = 'json'"
        text = text.replace(_BLACKHOLE, kafka)
    sets = "".join(f"SET '{key}' = '{value}';\n" for key, value in options)
    return f"{sets}{table};\n{views};\n{text}"


def option(text: str) -> Option:
    """`KEY=VALUE` as a table option; anything else refused."""
    key, equals, value = text.partition("=")
    if not key or not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def sink_columns(query: str) -> list[str]:
    """The query's sink table's columns, in order: the rows' values as Flink collects them."""
    text = (QUERIES / f"{query}.sql").read_text()
    text = text[text.index("CREATE TABLE") :]
    body = text[text.index("(") + 1 : text.index(") WITH")]
    return [line.split()[0].strip("`") for line in body.splitlines() if line.strip()]


def fill(bootstrap: str, topic: str, events: int, base_ms: int = 0, seed: int = 1) -> None:
    """The topic (made here, one partition) with the generator's first `events` events and its
    closing ones (q8's windows fire on them)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    generator = NexmarkGenerator(NexmarkConfig(), base_ms, seed)
    for row in itertools.chain(generator.events(events), generator.closing(events)):
        line = json.dumps(row, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(topic, line)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()


def make_topics(bootstrap: str, *topics: str, compact: bool = False) -> None:
    config = {"cleanup.policy": "compact"} if compact else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1, config=config) for t in topics]).values():
        try:
            future.result()
        except KafkaException as err:  # made by an earlier run on this broker
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def _own_cpu() -> dict[tuple[int, int], tuple[int, float]]:
    """Every process's own CPU seconds, by (pid, start time), with its parent."""
    ticks, found = os.sysconf("SC_CLK_TCK"), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent, cpu = int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks
        found[(int(entry.name), int(fields[19]))] = (parent, cpu)
    return found


def run(command: list[str], env: dict[str, str]) -> float:
    """Run the service to its end; the CPU seconds its processes used (the driver's Python,
    Spark's JVM, its Python workers: the tree under it, sampled from /proc, as a JVM the
    driver does not wait for is in no `getrusage`)."""
    used: dict[tuple[int, int], float] = {}
    with tempfile.TemporaryFile("w+") as log:  # a pipe nobody reads would stop it once full
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
        while process.poll() is None:
            table = _own_cpu()
            tree = {process.pid}
            for _ in range(8):  # a few levels: sh, python, java, the workers' daemon, workers
                tree |= {pid for (pid, _start), (parent, _cpu) in table.items() if parent in tree}
            for key, (_parent, cpu) in table.items():
                if key[0] in tree:
                    used[key] = max(used.get(key, 0.0), cpu)
            time.sleep(0.25)
        if process.returncode != 0:
            log.seek(0)
            raise RuntimeError(log.read()[-3000:])
    return sum(used.values())


def service_env(sql: str, checkpoint: str) -> dict[str, str]:
    return {
        **os.environ,
        "STREAMJOIN_SQL": sql,
        "CHECKPOINT_LOCATION": checkpoint,
        "TRIGGER_INTERVAL": "available-now",
        "LOG_LEVEL": "WARNING",
    }


def rows_of(bootstrap: str, topic: str, columns: list[str]) -> list[list]:
    """Every committed row of the output topic, its values in the sink's column order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[list] = []
    while True:
        message = consumer.poll(5)
        if message is None:
            break
        if message.error() is None:
            row = json.loads(message.value())
            found.append([row[c] for c in columns])
        if message.offset() >= high - 1:
            break
    consumer.close()
    return found


def cpu_of(
    system: str,
    command: str,
    query: str,
    bootstrap: str,
    topic: str,
    work: str,
    options: Sequence[Option] = (),
) -> float:
    """The CPU seconds of one run of `query` by `system` over `topic`, to its end."""
    if system == "spark":
        spark = f"{sys.executable} {BENCH / 'nexmark_spark.py'} --bootstrap {bootstrap} "
        return run(["/bin/sh", "-c", f"exec {spark} --topic {topic} {query}"], dict(os.environ))
    checkpoint = f"{work}/{system}-{query}-{topic}"
    env = service_env(script(query, bootstrap, topic, options=options), checkpoint)
    return run(["/bin/sh", "-c", f"exec {command}"], env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("queries", nargs="+")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--systems", default="streamjoin", help="streamjoin,spark (q3, q20)")
    parser.add_argument("--command", default=f"{sys.executable} -m app.cli run")
    parser.add_argument("--set", action="append", default=[], type=option, metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    run_id = uuid.uuid4().hex[:6]
    topic, warm = f"nexmark-{run_id}", f"nexmark-warm-{run_id}"
    fill(args.bootstrap, topic, args.events)
    if not args.check:
        fill(args.bootstrap, warm, WARM_EVENTS)
    with tempfile.TemporaryDirectory() as work:
        for query in args.queries:
            if args.check:
                out = f"{query}-{run_id}"
                make_topics(args.bootstrap, out, f"{out}.dlq")
                make_topics(args.bootstrap, f"{out}.markers", compact=True)
                sql = script(query, args.bootstrap, topic, out, args.set)
                run(["/bin/sh", "-c", f"exec {args.command}"], service_env(sql, f"{work}/{query}"))
                found = rows_of(args.bootstrap, out, sink_columns(query))
                print(json.dumps({"query": query, **checksum(found)}), flush=True)
                continue
            make_topics(args.bootstrap, f"nexmark_{query}.dlq")  # the blackhole sink's
            for system in args.systems.split(","):
                if system == "spark" and query not in ("q3", "q20"):
                    continue
                warm_cpu = cpu_of(system, args.command, query, args.bootstrap, warm, work, args.set)
                started = time.monotonic()
                cpu = cpu_of(system, args.command, query, args.bootstrap, topic, work, args.set)
                wall = time.monotonic() - started
                events = args.events - WARM_EVENTS
                print(
                    f"{query} {system}: {args.events} events in {wall:.1f} s ({cpu:.1f} s of "
                    f"CPU; {warm_cpu:.1f} s over {WARM_EVENTS}): "
                    f"{events / (cpu - warm_cpu):,.0f} events per CPU-second",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
