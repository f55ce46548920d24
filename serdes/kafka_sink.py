"""Kafka as a PySpark streaming sink: an idempotent producer per task, failing loudly.

Records are keyed and partitioned with the Java client's murmur2 hash, so every change of one
key lands on one partition, in order, and Java consumers agree on where a key lives. A record
that cannot be delivered fails the task and with it the micro-batch; Spark then re-runs the
batch from its checkpointed offsets, so nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

FLUSH_TIMEOUT_S = 120.0


class DeliveryError(RuntimeError):
    """Kafka did not acknowledge every record of a task."""


@dataclass
class SinkCommit(WriterCommitMessage):
    records: int


def producer_config(client_config: dict[str, str]) -> dict[str, object]:
    return {
        "linger.ms": 5,
        "compression.type": "lz4",
        **client_config,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
    }


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes rows of `key binary, value binary[, headers][, topic]`: to the row's topic, if
    the row names one, else to the sink's topic (the dead letters travel beside the output)."""

    def __init__(self, topic: str, client_config: dict[str, str]) -> None:
        self.topic = topic
        self.client_config = client_config

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        producer = Producer(producer_config(self.client_config))
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                failures.append(error)

        records = 0
        for batch in iterator:
            columns = batch.to_pydict()
            absent = [None] * batch.num_rows
            for key, value, headers, topic in zip(
                columns["key"],
                columns["value"],
                columns.get("headers", absent),
                columns.get("topic", absent),
                strict=True,
            ):
                pairs = [(h["key"], h["value"]) for h in headers] if headers else None
                self._produce(producer, topic or self.topic, key, value, pairs, delivered)
            records += batch.num_rows
            producer.poll(0)
        undelivered = producer.flush(FLUSH_TIMEOUT_S)
        if failures or undelivered:
            first = failures[0] if failures else "flush timed out"
            raise DeliveryError(
                f"{len(failures) + undelivered} of {records} records to {self.topic!r} "
                f"were not delivered: {first}"
            )
        return SinkCommit(records)

    @staticmethod
    def _produce(producer: Producer, topic: str, key, value, headers, on_delivery) -> None:
        while True:
            try:
                producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records were acknowledged in `write`; nothing is left to do per batch."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A failed batch is re-run from its checkpointed offsets; its partial output stays."""
