"""An input's watermark as Flink's Kafka source makes it: each partition's own, the least of them.

Flink keeps a watermark per Kafka partition (its largest event time so far, less the delay) and
an input's is their least, so a partition behind the others in event time (a backlog read a
micro-batch at a time, a producer that lags) holds the input back and none of its rows is late.
Spark keeps one watermark per `withWatermark`, from the largest value its column takes in a
micro-batch, and forbids a second one on the same rows. So the reading tasks of an input with
several partitions fill that column (`WATERMARK_COLUMN`, of the decoded rows) themselves: with
the least, over all the topic's partitions, of each one's largest event time so far, counting
what the micro-batch read and, for a partition with nothing new, what earlier micro-batches
left. One task reads all the input's partitions of a micro-batch (`KafkaStreamReader`): split
among tasks, each would know the others' partitions only as of the micro-batch before, and a
watermark a micro-batch behind stays there while no new record comes. A micro-batch whose plan
leaves records for the next (a backlog read under a read limit) is split all the same, a task
per slot: its watermark is lower than one task's would be, which passes no row it should not,
and the backlog's last micro-batch, which one task reads, catches it up.
Until every partition has shown a row the column is null (Spark counts it as 0): the input's
watermark waits, as Flink's does.

What earlier micro-batches left travels through Kafka: each task commits, for each partition it
read, that partition's largest event time (epoch ms) as the offset of a consumer group of the
job's own (`marks_group`; the offset, not its metadata, which not every broker keeps). The
driver's reader fetches them when it plans a micro-batch with records and writes them into that
micro-batch's offsets (`EVENT_TIMES`), which Spark checkpoints: a micro-batch run again after a
restart sees what it saw the first time. A commit that failed leaves an older, smaller mark:
the watermark waits longer, it never passes a row it should not.

A whole input idle (`table.exec.source.idle-timeout`, every partition quiet that long) must
stop holding the query's watermark back, the least of its inputs'. Spark moves an input's
watermark only with rows that pass its `withWatermark`, so the idle input's reader plans a
heartbeat: one row with no change, its watermark column at the least watermark of the inputs
that are not idle, which the query drops right after its `withWatermark`. The inputs learn one
another's watermarks as they learn their partitions' marks, through Kafka: each reading task
publishes its input's (`published_group`), with whether it is a heartbeat's. An idle input
left behind a heartbeat takes part again with its next row: its watermark never goes back, so
a row behind it is late, as in Flink.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaException, TopicPartition

from serdes.kafka.client_log import logged
from serdes.kafka.committed_offsets import committed_offsets

# The decoded rows' column an input with several partitions takes its watermark from
WATERMARK_COLUMN = "watermark_time"
# In a micro-batch's offsets beside the topic's: each partition's largest event time before it
# (no topic has this name: it holds a space)
EVENT_TIMES = "event times"
# ... and the partitions idle at its plan (`table.exec.source.idle-timeout`): no new record for
# that long, so left out of the input's watermark until they write again
IDLE_PARTITIONS = "idle partitions"
TIMEOUT_S = 10.0  # to fetch the marks a micro-batch starts from

log = logging.getLogger(__name__)

Marks = dict[int, int | None]  # partition -> largest event time so far, epoch ms (None: none)


def marks_group(job: str, side: str) -> str:
    """The consumer group an input's partition marks are committed to: the job's own (`job`
    is made with its checkpoint), so that a new checkpoint never starts from an old job's."""
    return f"streamjoin-event-times-{job}-{side}"


def published_group(group: str) -> str:
    """The consumer group where an input's reading tasks publish its own watermark (before its
    delay) for the other inputs' heartbeats, as the offset of its topic's partition 0: the
    mark times 2, plus 1 for a heartbeat's (the input is idle)."""
    return f"{group}-input"


@dataclass(frozen=True)
class Peer:
    """Another event-time input of the query, for a heartbeat: its marks' group, its topic and
    its watermark delay."""

    group: str
    topic: str
    delay_ms: int


def peers_watermark(client_config: dict[str, str], peers: Iterable[Peer]) -> int | None:
    """The least watermark (epoch ms) of the `peers` that are not idle, as they last published
    it; None while one of them has published none, or when every one is idle (nothing moves
    the watermark then, as in Flink)."""
    watermarks = []
    for peer in peers:
        group = published_group(peer.group)
        try:
            [found] = committed_offsets(
                _client(group, client_config), [TopicPartition(peer.topic, 0)], TIMEOUT_S
            )
        except KafkaException as err:
            _forget(group, client_config)
            log.warning("could not read the watermark of %s: %s", peer.topic, err)
            return None
        if found.offset < 0:
            return None
        mark, idle = divmod(found.offset, 2)
        if not idle:
            watermarks.append(mark - peer.delay_ms)
    return min(watermarks, default=None)


def _highest(*marks: int | None) -> int | None:
    known = [m for m in marks if m is not None]
    return max(known) if known else None


# A client of the marks' group for each (group, client settings), kept by a worker process for
# the tasks it runs and by the driver's reader for its plans: a new client each time cost more
# than the call (its connection and the group's coordinator found again)
_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Consumer] = {}


def _client(group: str, client_config: dict[str, str]) -> Consumer:
    key = (group, tuple(sorted(client_config.items())))
    if key not in _clients:
        _clients[key] = Consumer(
            logged({**client_config, "group.id": group, "enable.auto.commit": False})
        )
    return _clients[key]


def _forget(group: str, client_config: dict[str, str]) -> None:
    """Drop a client a call failed with: the next call makes a new one."""
    client = _clients.pop((group, tuple(sorted(client_config.items()))), None)
    if client is not None:
        client.close()


def planned_marks(
    client_config: dict[str, str], group: str, topic: str, partitions: Iterable[int], before: Marks
) -> Marks:
    """The marks a micro-batch starts from: those of the micro-batch before (`before`) raised
    to what its tasks committed to `group` (a broker that does not answer leaves them)."""
    partitions = list(partitions)
    try:
        found = committed_offsets(
            _client(group, client_config), [TopicPartition(topic, p) for p in partitions], TIMEOUT_S
        )
    except KafkaException as err:
        _forget(group, client_config)
        log.warning(
            "could not read the event times of %s (group %s): %s; the watermark "
            "waits for the next micro-batch's",
            topic,
            group,
            err.args[0].str() if err.args else err,
        )
        return {p: before.get(p) for p in partitions}
    fetched = {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    return {p: _highest(before.get(p), fetched.get(p)) for p in partitions}


@dataclass(frozen=True)
class PartitionMarks:
    """What a reading task needs to fill the watermark column: every partition of the topic
    with its mark before this micro-batch (`known`), and where to commit its own."""

    group: str
    known: Marks
    idle: frozenset[int] = frozenset()  # partitions that hold the watermark back no more
    publish: bool = False  # the input's watermark published for the others' heartbeats
    heartbeat: int | None = None  # the watermark column of a heartbeat row (epoch ms), if due

    def stamped(
        self,
        batches: Iterator[pa.RecordBatch],
        own: Iterable[int],
        topic: str,
        client_config: dict[str, str],
        schema: pa.Schema,
    ) -> Iterator[pa.RecordBatch]:
        """The decoded `batches` of partitions `own`, each with the watermark column set to the
        least mark so far over all partitions but the idle ones (as Flink's source leaves an
        idle split out of its watermark), then the heartbeat row if one is due (`schema`: the
        decoded rows'); the own partitions' marks committed at the end, and the input's
        published."""
        highest = {p: self.known.get(p) for p in own}
        least = None
        for batch in batches:
            times = pc.cast(batch.column("event_time"), pa.int64())
            partition = batch.column("partition")
            for p in highest:
                latest = pc.max(pc.filter(times, pc.equal(partition, p))).as_py()
                highest[p] = _highest(highest[p], None if latest is None else latest // 1000)
            marks = [highest.get(p, m) for p, m in self.known.items() if p not in self.idle]
            least = None if None in marks else min(marks, default=None)
            yield _with_watermark(batch, least)
        if self.heartbeat is not None:
            yield _with_watermark(pa.RecordBatch.from_pylist([{}], schema=schema), self.heartbeat)
        self._commit(self.group, topic, highest, client_config)
        published = least if self.heartbeat is None else self.heartbeat
        if self.publish and published is not None:
            mark = {0: 2 * published + (self.heartbeat is not None)}
            self._commit(published_group(self.group), topic, mark, client_config)

    @staticmethod
    def _commit(group: str, topic: str, offsets: Marks, client_config: dict[str, str]) -> None:
        committed = [
            TopicPartition(topic, p, max(m, 0)) for p, m in offsets.items() if m is not None
        ]
        if not committed:
            return
        try:
            _client(group, client_config).commit(offsets=committed, asynchronous=False)
        except KafkaException as err:
            _forget(group, client_config)
            log.warning(
                "could not record the event times read from %s (group %s): %s; the "
                "watermark waits for the next micro-batch's",
                topic,
                group,
                err.args[0].str() if err.args else err,
            )


def _with_watermark(batch: pa.RecordBatch, ms: int | None) -> pa.RecordBatch:
    column = batch.schema.get_field_index(WATERMARK_COLUMN)
    field = batch.schema.field(column)
    value = (
        pa.nulls(batch.num_rows, field.type)
        if ms is None
        else pa.array([ms * 1000] * batch.num_rows, pa.int64()).cast(field.type)
    )
    columns = list(batch.columns)
    columns[column] = value
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
