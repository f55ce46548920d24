"""`streamjoin demo`: Flink's documentation example of the event-time temporal join, orders
enriched with their product's price as of the order, end to end through Kafka.

It starts a broker of its own (Apache Kafka, `app.broker`) unless KAFKA_BOOTSTRAP_SERVERS names
one, writes exactly the example's rows (orders as JSON, the products table's changes as Debezium
JSON, whose `source.ts_ms` is when each change happened), runs the service's own pipeline with
the example's temporal LEFT JOIN (`FOR SYSTEM_TIME AS OF order_time`) until the input is
processed, and prints the result table read back from the output topic, as the documentation
shows it. The job is given as Flink SQL (`SCRIPT`: the example's DDL with its connector options,
through `STREAMJOIN_SQL`), and printed first.
"""

from __future__ import annotations

import json
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Mapping
from contextlib import ExitStack
from datetime import UTC, datetime
from decimal import Decimal

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from app.broker import BrokerNotInstalled, embedded_broker
from app.config.env import load_config
from ops.metrics import ServiceMetrics

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS

# (order_id, product_id, order_time in ms since midnight 1970-01-01 UTC)
ORDERS = [
    ("o_001", "p_001", 1 * MINUTE_MS),
    ("o_002", "p_002", 3 * MINUTE_MS),
    ("o_003", "p_001", 12 * HOUR_MS),
    ("o_004", "p_002", 12 * HOUR_MS),
    ("o_005", "p_001", 18 * HOUR_MS),
]
# (Debezium op, before, after, source.ts_ms) for the products table, whose rows keep the time
# of their last update (the example's update_time)
_SCOOTER, _BASKETBALL = ("p_001", "scooter"), ("p_002", "basketball")
_OLD_SCOOTER = (*_SCOOTER, "11.11", 1 * MINUTE_MS)
_NEW_SCOOTER = (*_SCOOTER, "12.99", 12 * HOUR_MS)
_OLD_BASKETBALL = (*_BASKETBALL, "23.11", 2 * MINUTE_MS)
PRODUCT_CHANGES = [
    ("c", None, _OLD_SCOOTER, 1 * MINUTE_MS),
    ("c", None, _OLD_BASKETBALL, 2 * MINUTE_MS),
    ("u", _OLD_SCOOTER, _NEW_SCOOTER, 12 * HOUR_MS),
    ("u", _OLD_BASKETBALL, (*_BASKETBALL, "19.99", 12 * HOUR_MS), 12 * HOUR_MS),
    ("d", _NEW_SCOOTER, None, 18 * HOUR_MS),
]
# The example's DDL and query, with the connector options Flink needs (the broker is
# KAFKA_BOOTSTRAP_SERVERS'); `{suffix}` gives a run on an external broker topics of its own.
SCRIPT = """\
CREATE TABLE orders (
  order_id STRING,
  product_id STRING,
  order_time TIMESTAMP(3),
  WATERMARK FOR order_time AS order_time
) WITH ('connector' = 'kafka', 'topic' = 'orders{suffix}', 'format' = 'json');

CREATE TABLE product_changelog (
  product_id STRING,
  product_name STRING,
  price DECIMAL(10, 2),
  update_time TIMESTAMP(3) METADATA FROM 'value.source.timestamp' VIRTUAL,
  PRIMARY KEY (product_id) NOT ENFORCED,
  WATERMARK FOR update_time AS update_time
) WITH ('connector' = 'kafka', 'topic' = 'product_changelog{suffix}',
        'value.format' = 'debezium-json');

CREATE TABLE orders_enriched (
  order_id STRING, order_time TIMESTAMP(3), product_name STRING, update_time TIMESTAMP(3),
  price DECIMAL(10, 2)
) WITH ('connector' = 'kafka', 'topic' = 'orders_enriched{suffix}', 'format' = 'json');

INSERT INTO orders_enriched
SELECT order_id, order_time, product_name, update_time, price
FROM orders AS O
LEFT JOIN product_changelog FOR SYSTEM_TIME AS OF O.order_time AS P
ON O.product_id = P.product_id;
"""


def _sql_timestamp(ms: int) -> str:
    """Flink's JSON format writes TIMESTAMP(3) as `yyyy-MM-dd HH:mm:ss.SSS`."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _product(row: tuple[str, str, str, int] | None) -> dict[str, str] | None:
    if row is None:
        return None
    product_id, name, price, _updated = row  # update_time is the change's source.ts_ms
    return {"product_id": product_id, "product_name": name, "price": price}


def example_records() -> dict[str, list[tuple[bytes, bytes, int]]]:
    """Per input: (key, value, Kafka timestamp) of every row of the example, in its order."""
    orders = [
        (
            oid.encode(),
            json.dumps(
                {"order_id": oid, "product_id": pid, "order_time": _sql_timestamp(ts)}
            ).encode(),
            ts,
        )
        for oid, pid, ts in ORDERS
    ]
    changes = []
    for op, before, after, ts in PRODUCT_CHANGES:
        key = (after or before)[0]
        envelope = {
            "before": _product(before),
            "after": _product(after),
            "op": op,
            "source": {"connector": "postgresql", "table": "products", "ts_ms": ts},
            "ts_ms": ts,
        }
        changes.append((key.encode(), json.dumps(envelope).encode(), ts))
    return {"orders": orders, "product_changelog": changes}


def demo_env(bootstrap: str, suffix: str, checkpoint: str) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "STREAMJOIN_SQL": SCRIPT.format(suffix=suffix),
        "METRICS_PORT": "0",
        "CHECKPOINT_LOCATION": checkpoint,
        "TRIGGER_INTERVAL": "available-now",
        "SPARK_MASTER": "local[2]",
    }


def _create_topics(bootstrap: str, names: list[str], compacted: list[str]) -> None:
    """One partition each, so that the printed output keeps the order it was written in."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [NewTopic(t, 1, 1, config={"retention.ms": "-1"}) for t in names]
        + [NewTopic(t, 1, 1, config={"cleanup.policy": "compact"}) for t in compacted]
    )
    for future in created.values():
        future.result()


def _write_inputs(bootstrap: str, topics: dict[str, str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for name, records in example_records().items():
        for key, value, ts in records:
            producer.produce(topics[name], value, key, timestamp=ts)
    if producer.flush(30):
        raise RuntimeError("the demo's input records were not all delivered")


def _read_output(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "streamjoin-demo",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    while True:
        message = consumer.poll(10)
        if message is None or (
            message.error() and message.error().code() == KafkaError._PARTITION_EOF
        ):
            break
        values.append(message.value())
    consumer.close()
    return values


def table_lines(values: list[bytes]) -> list[str]:
    """The joined rows as the example prints them: times of day, NULL for what is missing."""

    def cell(value: object, time: bool = False) -> str:
        if value is None:
            return "NULL"
        return str(value)[11:19] if time else str(value)

    lines = []
    for value in values:
        row = json.loads(value, parse_float=Decimal)
        product, updated = cell(row["product_name"]), cell(row["update_time"], time=True)
        lines.append(
            f"{row['order_id']} {cell(row['order_time'], time=True)} {product:<10} "
            f"{updated:<8} {cell(row['price'])}"
        )
    return sorted(lines)


def _say(line: str) -> None:
    print(f"streamjoin demo: {line}")


def demo(env: Mapping[str, str]) -> int:
    from app.run import pipeline
    from app.run.session import build_session, fork_workers_early

    with ExitStack() as stack:
        bootstrap = env.get("KAFKA_BOOTSTRAP_SERVERS")
        # An external broker keeps topics between runs: give this run its own.
        suffix = f"-{uuid.uuid4().hex[:8]}" if bootstrap else ""
        if not bootstrap:
            try:
                broker = stack.enter_context(embedded_broker(announce=_say))
            except BrokerNotInstalled as missing:
                print(f"streamjoin demo: {missing}", file=sys.stderr)
                return 2
            bootstrap = broker.bootstrap
            _say(f"{broker.name}, a local process, at {bootstrap}")
        checkpoint = stack.enter_context(tempfile.TemporaryDirectory(prefix="streamjoin-demo-"))
        env = demo_env(bootstrap, suffix, checkpoint)
        config = load_config(env)
        print("streamjoin demo: the job, as Flink SQL (STREAMJOIN_SQL):\n")
        print(textwrap.indent(env["STREAMJOIN_SQL"], "  "))
        _create_topics(
            bootstrap,
            [config.left.topic, config.right.topic, config.output.topic, config.output.dlq_topic],
            [config.output.marker_topic],
        )
        _write_inputs(
            bootstrap, {"orders": config.left.topic, "product_changelog": config.right.topic}
        )
        spark = build_session(
            config.spark_master, config.spark_conf, checkpoint=config.checkpoint_location
        )
        stack.callback(spark.stop)
        fork_workers_early(spark)
        metrics = ServiceMetrics(spark.sparkContext)
        port = metrics.serve(config.metrics_port)
        query = pipeline.start(spark, config, metrics)
        query.awaitTermination()
        if query.exception() is not None:
            print(f"streamjoin demo: the query failed: {query.exception()}", file=sys.stderr)
            return 1
        metrics.update()
        metrics.observe_progress(query)
        output = _read_output(bootstrap, config.output.topic)
        print(f"streamjoin demo: {len(output)} rows reached {config.output.topic}:")
        for line in table_lines(output):
            print("  " + line)
        print(f"streamjoin demo: metrics were served at http://127.0.0.1:{port}/metrics")
    return 0
