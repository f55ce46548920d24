"""Producing output records: the producer settings every delivery mode shares, and one send loop.

librdkafka reports only failed deliveries (`delivery.report.only.error`): a Python callback per
acknowledged record was a large share of what producing cost (`docs/performance.md`). Whether
every record arrived is `flush()` returning 0 with no failure reported.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, Message, Producer

from serdes.kafka.client_log import logged

# librdkafka spaces a new client's connections to the cluster's brokers by half of this: with
# its default, a transactional producer's initialisation waited to connect to the broker its
# bootstrap named, in every task and micro-batch (`docs/performance.md`). It is the first wait
# after a failed connection too, doubling up to `reconnect.backoff.max.ms`.
RECONNECT_BACKOFF_MS = 10

# topic, key, value, headers
OutputRecord = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]] | None]


class DeliveryFailures(list[KafkaError]):
    """What the broker refused of one producer's records (its delivery callback)."""

    def __call__(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self.append(error)


def producer_config(client_config: dict[str, str], failures: DeliveryFailures) -> dict[str, object]:
    """Idempotent, acknowledged by all replicas, partitioned by murmur2 as Java clients do;
    failed deliveries are added to `failures`."""
    return logged(
        {
            "linger.ms": 5,
            "compression.type": "lz4",
            "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
            **client_config,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "delivery.report.only.error": True,
            "on_delivery": failures,
        }
    )


class DeliveryError(RuntimeError):
    """Kafka did not acknowledge every record sent."""


def produce_all(
    producer: Producer,
    records: Iterable[OutputRecord],
    failures: DeliveryFailures,
    timeout_s: float,
    where: str,
) -> None:
    """Produce `records` and wait until each is acknowledged, or raise `DeliveryError`
    (`failures` is the producer's callback; `where` names the destination in the error)."""
    send = producer.produce
    sent = 0
    for topic, key, value, headers in records:
        while True:
            try:
                send(topic, value, key, headers=headers)
                break
            except BufferError:  # the local queue is full: wait for acknowledgements
                producer.poll(0.05)
        sent += 1
    undelivered = producer.flush(timeout_s)
    if failures or undelivered:
        first = failures[0] if failures else "flush timed out"
        raise DeliveryError(
            f"{len(failures) + undelivered} of {sent} records to {where} were not delivered: "
            f"{first}"
        )
