"""A consumer group's committed offsets, read through a coordinator that may be moving.

librdkafka hands a group coordinator's "not coordinator" or "load in progress" answer to
`Consumer.committed` as an error instead of finding the coordinator again and retrying. Apache
Kafka gives those answers while it loads the partition of `__consumer_offsets` that holds the
group: on a new cluster's first groups (the topic is created then), after a broker restart and
when the partition moves to another broker. Seen on Apache Kafka 4.1: a read of an
exactly-once marker failed with "Not coordinator". Such an answer is retried here until the
caller's time is up (`serdes.kafka.retries`).

A partition's own error is raised too: an offset that could not be read must not pass for a
partition the group never committed (a batch already written would be written again).
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from serdes.kafka.retries import retried

# The coordinator is being found, loaded or moved: the same read succeeds a little later.
COORDINATOR_NOT_READY = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError._WAIT_COORD,
    }
)
SHORTEST_WAIT_S = 1.0  # each try gets at least this long, even when the time is nearly up


def committed_offsets(
    consumer: Consumer, partitions: list[TopicPartition], timeout_s: float
) -> list[TopicPartition]:
    """`consumer.committed(partitions)`, retried while the group's coordinator is not ready,
    for up to `timeout_s` in all; any other error, or one that outlasts it, is raised."""

    def read(left_s: float) -> list[TopicPartition]:
        found = consumer.committed(partitions, timeout=max(left_s, SHORTEST_WAIT_S))
        failed = next((tp.error for tp in found if tp.error is not None), None)
        if failed is not None:
            raise KafkaException(failed)
        return found

    return retried(read, COORDINATOR_NOT_READY, timeout_s)
