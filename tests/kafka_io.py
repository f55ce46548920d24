"""Test-side Kafka helpers: make topics, produce known records, read a topic to its end."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from functools import cache

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from serdes.kafka.produce import DeliveryFailures, producer_config
from serdes.kafka.transactions import BATCH_HEADER, ExactlyOnce


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def create_topics(
    bootstrap: str, names: list[str], partitions: int = 1, compact: bool = False
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Tansu answers only configs a topic was created with: give the ones clients ask for.
    config = {"cleanup.policy": "compact"} if compact else {"retention.ms": "-1"}
    topics = [NewTopic(n, partitions, 1, config=config) for n in names]
    for future in admin.create_topics(topics).values():
        future.result()


def output_topics(bootstrap: str, out: str, partitions: int = 1) -> None:
    """The output topic, its dead-letter topic and its (compacted) batch-marker topic."""
    create_topics(bootstrap, [out, f"{out}.dlq"], partitions)
    create_topics(bootstrap, [f"{out}.markers"], compact=True)


def join_topics(bootstrap: str, partitions: int = 1) -> tuple[str, str, str]:
    """Fresh left and right topics, and the output's topics (see `output_topics`)."""
    left, right, out = unique("left"), unique("right"), unique("out")
    create_topics(bootstrap, [left, right], partitions)
    output_topics(bootstrap, out, partitions)
    return left, right, out


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes], ...] = ()

    def header(self, name: str) -> bytes | None:
        return dict(self.headers).get(name)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> list[Record]:
    """Produce `values` round-robin over partitions; return them with their assigned offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    delivered: list[Record] = []

    def on_delivery(error, message) -> None:
        assert error is None, error
        delivered.append(
            Record(message.key(), message.value(), message.partition(), message.offset())
        )

    for i, value in enumerate(values):
        producer.produce(topic, value, value, partition=i % partitions, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return delivered


def read_topic(
    bootstrap: str, topic: str, at_least: int = 0, timeout_s: float = 120
) -> list[Record]:
    """Every committed record of `topic`, waiting until there are `at_least` of them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("test-reader"),
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 1,
            # a fetch at a partition's end waits this long for records before the broker
            # answers: its default (half a second) was most of a read of a topic
            "fetch.wait.max.ms": 10,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    records: list[Record] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < len(partitions) or len(records) < at_least:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(records)} records, expected {at_least}")
            for m in consumer.consume(10_000, 0.05):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                records.append(
                    Record(m.key(), m.value(), m.partition(), m.offset(), tuple(m.headers() or ()))
                )
    finally:
        consumer.close()
    return records


@cache
def broker_hides_aborted_records(bootstrap: str) -> bool:
    """Whether `read_committed` consumers of this broker skip aborted transactions (Kafka does,
    Tansu does not)."""
    topic = unique("abort-probe")
    create_topics(bootstrap, [topic])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    return not read_topic(bootstrap, topic)


def committed_output(bootstrap: str, topic: str, markers: str, at_least: int = 0) -> list[Record]:
    """`topic` as a `read_committed` consumer of Kafka sees what streamjoin wrote to it.

    On a broker that shows aborted transactions to such consumers, a record counts only if its
    `streamjoin.batch` header names the attempt that the last marker of its (partition, batch)
    committed.
    """
    records = read_topic(bootstrap, topic, at_least)
    if broker_hides_aborted_records(bootstrap):
        return records
    last: dict[tuple[int, int], bytes] = {}  # a later attempt's marker is the one that counts
    for marker in read_topic(bootstrap, markers):
        written = json.loads(marker.value)
        last[written["partition"], written["batch"]] = written["attempt"].encode()
    committed = set(last.values())
    return [record for record in records if record.header(BATCH_HEADER) in committed]


def died_mid_transaction(kafka: str, sink: ExactlyOnce, partition: int, out: str) -> Producer:
    """The producer of a task that wrote part of batch 5 and died: no commit, no abort."""
    dead = Producer(
        {
            **producer_config({"bootstrap.servers": kafka}, DeliveryFailures()),
            "transactional.id": f"{sink.transactional_id}-{partition}",
        }
    )
    dead.init_transactions(30)
    dead.begin_transaction()
    attempt = f"{partition}:5:dead".encode()
    dead.produce(out, b"half-written", b"k", headers=[(BATCH_HEADER, attempt)])
    assert dead.flush(30) == 0
    return dead
