"""A Kafka consumer group's offsets, as Flink's Kafka connector uses them.

`scan.startup.mode` = `group-offsets` (`STARTING_OFFSETS=group-offsets`) starts a new job where
its group (`properties.group.id`, `KAFKA_GROUP_ID`) last committed, a partition the group never
committed to where `properties.auto.offset.reset` says; and the offsets a job has read are
committed back to the group as it goes (Flink commits them on each checkpoint), so the group's
lag shows in the usual Kafka tools and a new job of the group starts where the last one was.
The checkpoint, not the group, is where a restarted job resumes: a commit is only a report.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from serdes.kafka.client_log import logged
from serdes.kafka.committed_offsets import committed_offsets

TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


def _consumer(client_config: dict[str, str], group: str) -> Consumer:
    return Consumer(logged({**client_config, "group.id": group, "enable.auto.commit": False}))


def committed(
    client_config: dict[str, str], group: str, topic: str, partitions: list[int]
) -> dict[int, int | None]:
    """The group's committed offset of each partition of `topic` (None where it has none)."""
    consumer = _consumer(client_config, group)
    try:
        found = committed_offsets(
            consumer, [TopicPartition(topic, p) for p in partitions], TIMEOUT_S
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in found}


class GroupCommitter:
    """Commits the offsets each finished micro-batch read to `group`, from the driver."""

    def __init__(self, client_config: dict[str, str], group: str, topics: set[str]) -> None:
        self.client_config, self.group, self.topics = client_config, group, topics
        self._consumer: Consumer | None = None
        self._last: dict[tuple[str, int], int] = {}
        self._failing = False  # a failure is logged once until a commit succeeds again

    def commit_progress(self, progress: dict[str, Any] | None) -> None:
        """Commit what the batch of `progress` (a query's last progress report) read to, where
        it moved; a failure is logged and the next batch's commit tries again."""
        ends: dict[tuple[str, int], int] = {}
        for source in (progress or {}).get("sources") or ():
            offsets = source.get("endOffset")
            offsets = json.loads(offsets) if isinstance(offsets, str) else offsets or {}
            ends |= {
                (topic, int(p)): int(o)
                for topic, parts in offsets.items()
                if topic in self.topics
                for p, o in parts.items()
            }
        moved = {tp: o for tp, o in ends.items() if self._last.get(tp) != o}
        if not moved:
            return
        if self._consumer is None:
            self._consumer = _consumer(self.client_config, self.group)
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(moved.items())],
                asynchronous=False,
            )
        except KafkaException as err:
            if not self._failing:
                log.warning(
                    "could not commit the offsets read to consumer group %r "
                    "(KAFKA_GROUP_ID): %s; the next batches try again",
                    self.group,
                    err.args[0].str() if err.args else err,
                )
            self._failing = True
            return
        self._failing = False
        self._last |= moved

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
