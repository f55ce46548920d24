"""Apache Flink 2.3 on Nexmark's join queries, as written, over the events of
`bench/nexmark_generator.py` in a JSON-lines file: the baseline the service's runs of the same
queries are measured against (events per core-second).

    python3 -m venv .venv-flink && .venv-flink/bin/pip install apache-flink==2.3.0
    python bench/nexmark_generator.py --events 2000000 --base-ms 0 --out /tmp/nexmark.jsonl
    .venv-flink/bin/python bench/nexmark_flink.py /tmp/nexmark.jsonl q3 q20 q23 q8
    .venv-flink/bin/python bench/nexmark_flink.py --check /tmp/nexmark.jsonl q3 q20 q23 q8
    .venv-flink/bin/python bench/nexmark_flink.py --set table.optimizer.multi-join.enabled=true \
        /tmp/nexmark.jsonl q23

Each query runs its own job (streaming mode, parallelism 1, the default heap state backend, a
local mini-cluster) with Nexmark's own SQL (`bench/nexmark/`): the Kafka table's
columns read by the filesystem connector instead, its views and the query's blackhole sink as
written (but q23's `A.dateTime`, quoted: Flink 2.3 refuses it bare). Printed per query: the
events, the job's wall time from submission to its end (the JVM and the planner already warm
from a first run of the same query over the first 10,000 events), and the events per second
of it and per second of CPU the JVM used meanwhile.
`--set KEY=VALUE` (before the rest, repeatable) sets a table option for every job, as a `SET`
statement before the query would (the service's runs take the same, `nexmark_service.py --set`).
Python 3.11 with only PyFlink: nothing of the project's is imported.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
QUERIES = BENCH / "nexmark"  # Nexmark's own SQL, from its repository (its LICENSE beside)
WARM_EVENTS = 10_000


def kafka_table_as_file(path: str) -> str:
    """Nexmark's Kafka table, its columns and watermark as written, read from `path`."""
    ddl = (QUERIES / "ddl_kafka.sql").read_text()
    columns = ddl[: ddl.index(") WITH (")]
    return f"{columns}) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')"


def statements(path: str, query: str) -> list[str]:
    """The table, the views and the query's own statements (its sink and its INSERT)."""
    views = (QUERIES / "ddl_views.sql").read_text().replace("${NEXMARK_TABLE}", "kafka")
    text = (QUERIES / f"{query}.sql").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    # q23 writes `A.dateTime` unquoted, which Flink 2.3's parser refuses (DATETIME is a keyword)
    text = re.sub(r"(?<=\.)dateTime\b", "`dateTime`", text)
    parts = [kafka_table_as_file(path), *views.split(";"), *text.split(";")]
    return [p.strip() for p in parts if p.strip()]


def jvm_cpu_seconds() -> float:
    """CPU time the mini-cluster's JVM (this process's child) has used, from /proc."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():  # its parent is this process
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def table_env(options: dict[str, str]) -> Any:
    """A streaming table environment of one task, in UTC, with `options` set."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    settings = {"parallelism.default": "1", "table.local-time-zone": "UTC", **options}
    for key, value in settings.items():
        env.get_config().set(key, value)
    return env


def run(path: str, query: str, options: dict[str, str]) -> tuple[float, float]:
    """One job of `query` over the events at `path`: its wall time and the JVM's CPU time."""
    env = table_env(options)
    *ddl, insert = statements(path, query)
    for statement in ddl:
        env.execute_sql(statement)
    cpu, start = jvm_cpu_seconds(), time.monotonic()
    env.execute_sql(insert).wait()
    return time.monotonic() - start, jvm_cpu_seconds() - cpu


def check(path: str, query: str, options: dict[str, str]) -> dict:
    """The query's rows over the events at `path`, collected (its INSERT's SELECT): their
    count and checksum (`bench/nexmark_check.py`)."""
    sys.path.insert(0, str(BENCH))
    from nexmark_check import checksum

    env = table_env(options)
    *ddl, insert = statements(path, query)
    for statement in ddl:
        env.execute_sql(statement)
    select = re.sub(r"^INSERT\s+INTO\s+\S+\s+", "", insert, flags=re.I)
    with env.sql_query(select).execute().collect() as rows:
        return {"query": query, **checksum(tuple(row) for row in rows)}


def main(argv: list[str]) -> int:
    options = {}
    while argv[:1] == ["--set"]:
        key, equals, value = argv[1].partition("=") if len(argv) > 1 else ("", "", "")
        if not key or not equals:
            print("--set takes KEY=VALUE", file=sys.stderr)
            return 2
        options[key] = value
        argv = argv[2:]
    if argv[:1] == ["--check"]:  # the results, not the speed
        for query in argv[2:]:
            print(json.dumps(check(argv[1], query, options)))
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, queries = argv[0], argv[1:]
    warm = f"{path}.warm"
    with open(path) as source, open(warm, "w") as first:
        events = 0
        for line in source:
            if events < WARM_EVENTS:
                first.write(line)
            events += 1
    for query in queries:
        run(warm, query, options)
        wall, cpu = run(path, query, options)
        print(
            f"{query}: {events} events in {wall:.1f} s: {events / wall:,.0f} events/s, "
            f"{events / cpu:,.0f} events per CPU-second ({cpu:.1f} s of CPU)"
        )
    os.unlink(warm)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
