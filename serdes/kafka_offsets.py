"""Where each Kafka partition begins and ends, measured on the driver for micro-batch planning.

A micro-batch is an offset range per partition fixed before any task reads, so that a replay
after a crash reads exactly the same records. The end of a partition therefore has to be exact.
`ListOffsets(LATEST)` is exact on Apache Kafka but not on every Kafka-protocol broker (Tansu
answers the base offset of the last record batch + 1), so the end is confirmed by reading from
there to the partition-EOF event, whose offset is the high watermark of a real Fetch response.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

METADATA_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 30.0


class TopicMissingError(RuntimeError):
    """The configured topic does not exist on the cluster."""


def _probe_consumer(client_config: dict[str, str]) -> Consumer:
    return Consumer(
        {
            **client_config,
            "group.id": "streamjoin-offset-probe",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
            "fetch.queue.backoff.ms": 1,
            "auto.offset.reset": "earliest",
        }
    )


class PartitionBounds:
    """Tracks one topic's partitions and their first and end offsets, re-probing only what moved.

    Record batches are immutable, so while `ListOffsets` answers the same number for a partition,
    the previously confirmed end still holds and no read is needed.
    """

    def __init__(self, topic: str, client_config: dict[str, str]) -> None:
        self.topic = topic
        self._consumer = _probe_consumer(client_config)
        self._listed: dict[int, int] = {}
        self._ends: dict[int, int] = {}

    def partitions(self) -> list[int]:
        metadata = self._consumer.list_topics(self.topic, timeout=METADATA_TIMEOUT_S)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise TopicMissingError(f"Kafka topic {self.topic!r} does not exist")
        return sorted(topic.partitions)

    def starts(self) -> dict[int, int]:
        """The earliest offset still stored in each partition."""
        return {p: self._listed_bounds(p)[0] for p in self.partitions()}

    def ends(self) -> dict[int, int]:
        """The exact end offset (next offset to be written, or last stable) of each partition."""
        moved: dict[int, int] = {}
        for p in self.partitions():
            low, listed = self._listed_bounds(p)
            if listed <= low:
                self._ends[p] = listed
            elif self._listed.get(p) != listed:
                moved[p] = listed
            self._listed[p] = listed
        if moved:
            self._ends.update(self._read_to_eof(moved))
        return {p: self._ends[p] for p in sorted(self._listed)}

    def close(self) -> None:
        self._consumer.close()

    def _listed_bounds(self, partition: int) -> tuple[int, int]:
        tp = TopicPartition(self.topic, partition)
        return self._consumer.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S, cached=False)

    def _read_to_eof(self, listed: dict[int, int]) -> dict[int, int]:
        self._consumer.assign([TopicPartition(self.topic, p, hi - 1) for p, hi in listed.items()])
        found: dict[int, int] = {}
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        try:
            while len(found) < len(listed):
                if time.monotonic() > deadline:
                    missing = sorted(set(listed) - set(found))
                    raise TimeoutError(f"no end of partitions {missing} of {self.topic!r}")
                # returns once as many events as ends still missing are there (consume waits
                # out its timeout for fewer: 0.2 s a trigger and source while data arrived)
                events = self._consumer.consume(num_messages=len(listed) - len(found), timeout=0.2)
                for message in events:
                    error = message.error()
                    if error is None:
                        continue
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                    found[message.partition()] = message.offset()
        finally:
            self._consumer.unassign()
        return found
