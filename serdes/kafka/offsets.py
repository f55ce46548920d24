"""Where each Kafka partition begins and ends, measured on the driver for micro-batch planning.

A micro-batch is an offset range per partition fixed before any task reads, so that a replay
after a crash reads exactly the same records. The end of a partition therefore has to be exact.
`ListOffsets(LATEST)` is exact on Apache Kafka (for a `read_committed` reader: the last stable
offset), and the end is taken from it. Some Kafka-protocol brokers answer it wrongly (Tansu
answers the base offset of the last record batch + 1); on those, known by their not describing
their configuration, the end is confirmed by reading from there to the partition-EOF event,
whose offset is the high watermark of a real Fetch response.

Finding an end can never end the query. A partition written faster than the probe reads, or
holding an open transaction a `read_committed` reader cannot pass, may show no EOF for a long
time: once every partition has an EOF or a record read (whose offset + 1 is an end the next
micro-batch can read to: a `read_committed` reader is given only committed records), or once
the probe's time is up, what was found is the end, and the next trigger reads the rest. When
the broker does not answer at all (a timeout, a broker down), the last ends found stand: the
trigger reads nothing new, and the next one asks again. Both are counted (`fallbacks`).
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from serdes.kafka.broker_code import METADATA_TIMEOUT_S, runs_kafka_code
from serdes.kafka.client_log import logged
from serdes.kafka.retries import retried

PROBE_TIMEOUT_S = 5.0  # at most, for a partition that shows neither an EOF nor a record
PROBE_SETTLE_S = 0.5  # a busy partition's last record read stands for its end after this

log = logging.getLogger(__name__)


# What the fallbacks are counted by: an end taken without the broker's end marker (a record
# read, or the probe's time up), and ends kept because the broker did not answer.
UNCONFIRMED, UNANSWERED = "unconfirmed", "unanswered"

# A partition without a leader for a moment (a topic just created, a leader moving to another
# broker) answers these; its leader is elected within the metadata timeout, or the broker is down.
_LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})


class TopicMissingError(RuntimeError):
    """The configured topic does not exist on the cluster."""


def committed_reader(client_config: dict[str, str], group: str) -> Consumer:
    """A client that reads assigned ranges of committed records, and commits nothing."""
    return Consumer(
        logged(
            {
                **client_config,
                "group.id": group,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                # A client reading a range to a partition's end leaves a fetch at the broker,
                # which holds it up to this long when nothing more is there; the next
                # assignment's first fetch waits for it on the same connection: 500 ms by
                # default, against a few ms for a range
                "fetch.wait.max.ms": 10,
                "fetch.queue.backoff.ms": 1,
                "auto.offset.reset": "earliest",
            }
        )
    )


class PartitionBounds:
    """Tracks one topic's partitions and their first and end offsets, re-probing only what moved.

    Where ends are probed, record batches are immutable, so while `ListOffsets` answers the
    same number for a partition, the previously confirmed end still holds and no read is needed.
    """

    def __init__(
        self, topic: str, client_config: dict[str, str], probe: bool | None = None
    ) -> None:
        """`probe`: whether ends are confirmed by a read; None: where the broker is known to
        answer `ListOffsets` wrongly (not `runs_kafka_code`)."""
        self.topic = topic
        self.client_config = client_config
        self.probe = probe
        self._consumer = committed_reader(client_config, "streamjoin-offset-probe")
        self._listed: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        # ends found without the broker's word, by reason (UNCONFIRMED, UNANSWERED), for metrics
        self.fallbacks = {UNCONFIRMED: 0, UNANSWERED: 0}

    def partitions(self) -> list[int]:
        metadata = self._consumer.list_topics(self.topic, timeout=METADATA_TIMEOUT_S)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise TopicMissingError(f"Kafka topic {self.topic!r} does not exist")
        return sorted(topic.partitions)

    def starts(self) -> dict[int, int]:
        """The earliest offset still stored in each partition."""
        return {p: self._listed_bounds(p)[0] for p in self.partitions()}

    def at_time(self, epoch_ms: int) -> dict[int, int]:
        """Each partition's first offset whose record's timestamp is at or after `epoch_ms`;
        a partition with none such, its end (Kafka's `ListOffsets` by time, as Flink's
        `timestamp` startup mode asks it)."""
        asked = [TopicPartition(self.topic, p, epoch_ms) for p in self.partitions()]
        found = self._consumer.offsets_for_times(asked, timeout=METADATA_TIMEOUT_S)
        ends = self.ends()
        return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in found}

    def ends(self) -> dict[int, int]:
        """The end offset (next offset to be written, or last stable) of each partition: exact,
        or short of it while a partition is busier than the probe can follow (module doc)."""
        try:
            if self._probes():
                self._probe_ends()
            else:
                self._ends = {p: self._listed_bounds(p)[1] for p in self.partitions()}
        except KafkaException as err:
            if not self._ends or err.args[0].fatal():
                raise
            self.fallbacks[UNANSWERED] += 1
            log.warning(
                "Kafka: the ends of %r could not be read (%s); trying again next trigger",
                self.topic,
                err.args[0].str(),
            )
        return {p: self._ends[p] for p in sorted(self._ends)}

    def _probes(self) -> bool:
        if self.probe is None:
            return not runs_kafka_code(self.client_config)
        return self.probe

    def _probe_ends(self) -> None:
        moved: dict[int, int] = {}
        for p in self.partitions():
            low, listed = self._listed_bounds(p)
            if listed <= low:
                self._ends[p] = listed
            elif self._listed.get(p) != listed:
                moved[p] = listed
                self._ends.setdefault(p, low)  # until something is found
            self._listed[p] = listed
        if moved:
            confirmed, read_to = self._read_to_eof(moved)
            for p in moved:
                end = confirmed.get(p, read_to.get(p, 0))
                self._ends[p] = max(end, self._ends[p])
                if p not in confirmed:
                    del self._listed[p]  # not confirmed: probed again next trigger
                    self.fallbacks[UNCONFIRMED] += 1

    def close(self) -> None:
        self._consumer.close()

    def _listed_bounds(self, partition: int) -> tuple[int, int]:
        tp = TopicPartition(self.topic, partition)
        return retried(
            lambda _left_s: self._consumer.get_watermark_offsets(
                tp, timeout=METADATA_TIMEOUT_S, cached=False
            ),
            _LEADER_MOVING,
            METADATA_TIMEOUT_S,
        )

    def _read_to_eof(self, listed: dict[int, int]) -> tuple[dict[int, int], dict[int, int]]:
        """Each partition's EOF offset, where one came before the probe settled (or timed
        out); and the offset after the last record read of each partition."""
        self._consumer.assign([TopicPartition(self.topic, p, hi - 1) for p, hi in listed.items()])
        found: dict[int, int] = {}
        after_read: dict[int, int] = {}
        began = time.monotonic()
        try:
            while len(found) < len(listed):
                waited = time.monotonic() - began
                if waited > PROBE_TIMEOUT_S or (
                    waited > PROBE_SETTLE_S and set(found) | set(after_read) >= set(listed)
                ):
                    break
                # returns once as many events as ends still missing are there (consume waits
                # out its timeout for fewer, a trigger and source while data arrived)
                events = self._consumer.consume(num_messages=len(listed) - len(found), timeout=0.2)
                for message in events:
                    error = message.error()
                    if error is None:
                        after_read[message.partition()] = message.offset() + 1
                    elif error.code() == KafkaError._PARTITION_EOF:
                        found[message.partition()] = message.offset()
                    else:
                        raise KafkaException(error)
        finally:
            self._consumer.unassign()
        return found, after_read
