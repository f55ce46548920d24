"""Apache Flink 2.3 as a candidate of `../shared/bench/` (`live_latency.py`, `side_by_side.py`):
the join the service's variables describe, run by Flink SQL on the same Kafka topics, so that
Flink is measured on the same broker and data as the service, Spark's native join and Quix.

    python3 -m venv .venv-flink && .venv-flink/bin/pip install apache-flink==2.3.0
    python ../shared/bench/live_latency.py ... \\
        --candidate "exec .venv-flink/bin/python bench/flink_join.py"

It reads the variables a bench gives `streamjoin run` (KAFKA_BOOTSTRAP_SERVERS, LEFT_/RIGHT_TOPIC,
_SCHEMA, _TIME, _WATERMARK_DELAY, JOIN_KIND, JOIN_ON, OUTPUT_TOPIC; JSON in, JSON rows out as
`L_<column>`, `R_<column>`), and `FLINK_CONF_<key>` for Flink's own configuration, such as
`FLINK_CONF_state.backend.type=rocksdb`. Flink's Kafka sink writes exactly once, as the
service does by default: in transactions committed at each checkpoint (`FLINK_CHECKPOINT_INTERVAL`,
1 s unless given; the interval bounds its latency); `FLINK_DELIVERY=at-least-once` writes at
once. Flink's Kafka SQL connector (5.0.0-2.2, the newest Maven Central serves) is fetched
once (`bench/flink_kafka_jars.txt`). Python 3.11 with only PyFlink: nothing of the project's
is imported but the jar fetcher, which needs the standard library alone.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.jars import fetched

JARS = Path(__file__).with_name("flink_kafka_jars.txt")
UNITS = {
    "ms": "MILLISECOND",
    "millisecond": "MILLISECOND",
    "s": "SECOND",
    "second": "SECOND",
    "m": "MINUTE",
    "minute": "MINUTE",
    "h": "HOUR",
    "hour": "HOUR",
}


def interval(text: str) -> str:
    """'5 seconds', '5s', '500ms' -> Flink's INTERVAL literal."""
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]+?)s?\s*", text.lower())
    if not found or found.group(2) not in UNITS:
        raise SystemExit(f"flink_join: cannot read the duration {text!r}")
    return f"INTERVAL '{found.group(1)}' {UNITS[found.group(2)]}"


def columns(schema: str) -> list[tuple[str, str]]:
    """'id STRING, k STRING, t TIMESTAMP(3)' -> [(name, type), …] (no nested types)."""
    return [tuple(part.strip().split(None, 1)) for part in schema.split(",")]  # type: ignore[misc]


def kafka(env: dict[str, str], topic: str) -> str:
    return (
        f"'connector' = 'kafka', 'topic' = '{topic}', "
        f"'properties.bootstrap.servers' = '{env['KAFKA_BOOTSTRAP_SERVERS']}', "
        "'format' = 'json', 'json.timestamp-format.standard' = 'ISO-8601'"
    )


def source_table(env: dict[str, str], side: str) -> str:
    cols = [f"`{n}` {t}" for n, t in columns(env[f"{side}_SCHEMA"])]
    if time := env.get(f"{side}_TIME"):
        delay = interval(env.get(f"{side}_WATERMARK_DELAY", "0 seconds"))
        cols.append(f"WATERMARK FOR `{time}` AS `{time}` - {delay}")
    topic = env[f"{side}_TOPIC"]
    return (
        f"CREATE TABLE {side.lower()}_input ({', '.join(cols)}) WITH ({kafka(env, topic)}, "
        f"'properties.group.id' = 'flink-{topic}', 'scan.startup.mode' = 'earliest-offset')"
    )


def sink_table(env: dict[str, str]) -> tuple[str, list[str]]:
    """The output table and the select list that fills it."""
    out, select = [], []
    for side in ("L", "R"):
        for name, kind in columns(env[f"{'LEFT' if side == 'L' else 'RIGHT'}_SCHEMA"]):
            out.append(f"`{side}_{name}` {kind}")
            # a time attribute written as a plain TIMESTAMP: a sink takes one at most
            timed = name == env.get(f"{'LEFT' if side == 'L' else 'RIGHT'}_TIME")
            select.append(f"CAST({side}.`{name}` AS {kind})" if timed else f"{side}.`{name}`")
    delivery = env.get("FLINK_DELIVERY", "exactly-once")
    guarantee = f"'sink.delivery-guarantee' = '{delivery}'"
    if delivery == "exactly-once":
        topic = env["OUTPUT_TOPIC"]
        # within the broker's transaction.max.timeout.ms (15 min by default)
        guarantee += (
            f", 'sink.transactional-id-prefix' = 'flink-{topic}', "
            "'properties.transaction.timeout.ms' = '600000'"
        )
    create = (
        f"CREATE TABLE joined ({', '.join(out)}) WITH ({kafka(env, env['OUTPUT_TOPIC'])}, "
        f"{guarantee})"
    )
    return create, select


def main() -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = dict(os.environ)
    jars = fetched("flink_kafka", "Flink's Kafka SQL connector", listing=JARS)
    tables = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = tables.get_config()
    config.set("pipeline.jars", ";".join(f"file://{jar}" for jar in jars))
    config.set("parallelism.default", "2")
    config.set("execution.checkpointing.interval", env.get("FLINK_CHECKPOINT_INTERVAL", "1s"))
    for name, value in env.items():
        if name.startswith("FLINK_CONF_"):
            config.set(name[len("FLINK_CONF_") :], value)
    tables.execute_sql(source_table(env, "LEFT"))
    tables.execute_sql(source_table(env, "RIGHT"))
    create, select = sink_table(env)
    tables.execute_sql(create)
    kind = env.get("JOIN_KIND", "inner").upper()
    statement = (
        f"INSERT INTO joined SELECT {', '.join(select)} FROM left_input AS L "
        f"{kind} JOIN right_input AS R ON {env['JOIN_ON']}"
    )
    print(statement, flush=True)
    tables.execute_sql(statement).wait()


if __name__ == "__main__":
    main()
