"""Producing output records: the producer settings every delivery mode shares, and one send."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, Message, Producer

# topic, key, value, headers
OutputRecord = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]] | None]
OnDelivery = Callable[[KafkaError | None, Message], None]


def producer_config(client_config: dict[str, str]) -> dict[str, object]:
    """Idempotent, acknowledged by all replicas, partitioned by murmur2 as Java clients do."""
    return {
        "linger.ms": 5,
        "compression.type": "lz4",
        **client_config,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
    }


def produce(producer: Producer, record: OutputRecord, on_delivery: OnDelivery) -> None:
    """Send one record, waiting for room when the producer's local queue is full."""
    topic, key, value, headers = record
    while True:
        try:
            producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)
