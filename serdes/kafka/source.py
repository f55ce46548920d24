"""Kafka as a PySpark streaming source: offsets planned on the driver, ranges read on executors.

Spark checkpoints the offsets this reader returns (one `{topic: {partition: offset}}` dict per
micro-batch), so a restarted query re-reads exactly the ranges of the batch that had not been
committed and nothing before it. Records come out as Arrow batches, which Spark converts much
faster than Python tuples.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from ops.progress import END_FALLBACKS
from ops.worker.collector import settle_worker
from serdes.kafka.arrivals import IDLE_WAIT_MS, Arrivals, Backlogs
from serdes.kafka.drain import draining, hold
from serdes.kafka.event_times import (
    EVENT_TIMES,
    IDLE_PARTITIONS,
    Marks,
    PartitionMarks,
    Peer,
    peers_watermark,
    planned_marks,
)
from serdes.kafka.offsets import PartitionBounds, committed_reader

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", HEADER_TYPE),
    ]
)
HEADERS_SPARK_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, headers array<struct<key: string, value: binary>>"
)
ARROW_BATCH_ROWS = 20_000
STALL_TIMEOUT_S = 120.0

Offsets = dict[str, dict[str, int]]


@dataclass
class OffsetRanges(InputPartition):
    """Records `[start, end)` of some of a topic's partitions for one micro-batch: one Spark
    task. `ranges` maps each partition to its `(start, end)`."""

    topic: str
    ranges: dict[int, tuple[int, int]]
    client_config: dict[str, str]
    marks: PartitionMarks | None = None  # to fill the watermark column (`event_times`)


def task_ranges(
    topic: str,
    start: dict[str, int],
    end: dict[str, int],
    tasks: int | None,
    client_config: dict[str, str],
    marks: PartitionMarks | None = None,
) -> list[OffsetRanges]:
    """The micro-batch's reading tasks: partition `p` read by task `p % tasks`, or each
    partition by a task of its own when `tasks` is None; partitions with nothing new, and
    tasks left with no partition, are left out.

    A task has a fixed cost in each Python worker it passes through (set-up, a Kafka client,
    and for the pass-through a transaction), while the partitions of one task are fetched
    together by one consumer: fewer tasks read a backlog faster (`docs/performance.md`). The
    grouping must stay what it was for the life of a checkpoint: a re-run micro-batch writes
    exactly-once under its tasks' indices (see `app.run.checkpoint.read_tasks`)."""
    groups: dict[int, dict[int, tuple[int, int]]] = {}
    for name, stop in end.items():
        partition, first = int(name), start.get(name, 0)
        if stop > first:
            group = partition % tasks if tasks else partition
            groups.setdefault(group, {})[partition] = (first, stop)
    return [OffsetRanges(topic, groups[g], client_config, marks) for g in sorted(groups)]


def split_limit(available: dict[int, int], limit: int) -> dict[int, int]:
    """Share `limit` records among partitions in proportion to what each has waiting.

    Every partition with records gets at least one, so none starves behind a busy one.
    """
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    shares = {p: min(n, max(1, n * limit // total)) for p, n in available.items() if n > 0}
    spare = limit - sum(shares.values())
    for p in sorted(shares):
        extra = min(spare, available[p] - shares[p])
        shares[p] += extra
        spare -= extra
    return shares


STARTED = "started at"
# ... and the watermark column of the input's last heartbeat, epoch ms (`serdes.kafka.event_times`)
HEARTBEAT = "heartbeat at"
# ... and, for an event-time input's micro-batch that leaves records for the next one, how many
# tasks read it (`KafkaStreamReader.partitions`)
BACKLOG_TASKS = "backlog tasks"
# Records a micro-batch of an event-time input reads from which, with more left for the next
# one, it is split among `backlog_tasks`: below, a second task's fixed cost (its worker's turn,
# its Kafka client, its marks' commit) is much of what it would save.
SPLIT_FROM = 10_000


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over one topic; a long-lived object on the driver."""

    def __init__(
        self,
        topic: str,
        client_config: dict[str, str],
        starting: str,
        max_records: int | None,
        drain_marker: str | None = None,
        transform: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None,
        tasks: int | None = None,
        bounded: bool = False,
        wake: bool = False,
        marks_group: str | None = None,
        wait_for: list[str] | None = None,
        wait_ms: int = IDLE_WAIT_MS,
        idle_timeout_ms: int = 0,
        peers: list[Peer] | None = None,
        delay_ms: int = 0,
        schema: pa.Schema | None = None,
        backlog_dir: str | None = None,
        backlog_tasks: int = 1,
    ) -> None:
        self.topic = topic
        # a partition with no new record for this long leaves the input's watermark (Flink's
        # `table.exec.source.idle-timeout`; 0: never): when each partition's end last moved,
        # by this driver's clock (a restart starts the count again: a partition is idle later,
        # never sooner)
        self.idle_timeout_ms = idle_timeout_ms
        self._moved: dict[int, tuple[int, float]] = {}
        # the query's other event-time inputs, whose watermark a heartbeat of this one carries
        # once every partition of it is idle, plus its own delay (`serdes.kafka.event_times`);
        # `schema`: the rows it reads, a heartbeat's too
        self.peers = peers or []
        self.delay_ms = delay_ms
        self.schema = schema
        # back to back, one input's reader holds a trigger that found nothing new until a
        # record comes to any of `wait_for`, the query's topics, unless a reader marked in
        # `backlog_dir` that it left records unread (`serdes.kafka.arrivals`)
        self.backlogs = Backlogs(backlog_dir) if backlog_dir else None
        self.arrivals = (
            Arrivals(wait_for, client_config, drain_marker, wait_ms, self.backlogs)
            if wait_for
            else None
        )
        # where the reading tasks commit each partition's largest event time, for an input
        # whose watermark is its partitions' least (`serdes.kafka.event_times`); None: none
        self.marks_group = marks_group
        self.tasks = tasks  # reading tasks a micro-batch (see `task_ranges`)
        self.backlog_tasks = backlog_tasks  # ... of an event-time input's backlog (`partitions`)
        self.transform = transform  # what a task's batches go through (decoding), if anything
        self.drain_marker = drain_marker
        self.client_config = client_config
        self.starting = starting
        self.max_records = max_records
        self._bounds: PartitionBounds | None = None
        self._available_now: dict[int, int] | None = None
        self._latest_ends: dict[int, int] | None = None
        self.bounded = bounded  # only what the topic held at the first plan, under any trigger
        # `wake`: the offsets name this start, so that the first plan is a micro-batch even with
        # nothing new to read. Spark runs the batches that fire processing-time timers and
        # evict a state TTL only after a batch of the running query: restarted on a quiet topic,
        # a wall-clock job would otherwise wait for its next record to pad an order or evict.
        self.started = time.time_ns() if wake else None

    @property
    def bounds(self) -> PartitionBounds:
        # Made on first use: the reader is pickled to the driver-side Python worker first.
        if self._bounds is None:
            self._bounds = PartitionBounds(self.topic, self.client_config)
        return self._bounds

    def initialOffset(self) -> Offsets:
        if self.starting == "earliest":
            first = self.bounds.starts()
        elif self.starting == "latest":
            first = self.bounds.ends()
        else:
            first = self._explicit_start(json.loads(self.starting).get(self.topic, {}))
        return self._as_offsets(first)

    def _explicit_start(self, spec: dict[str, int]) -> dict[int, int]:
        """Explicit per-partition offsets; -2 means earliest, -1 latest, unnamed earliest."""
        starts, ends = self.bounds.starts(), self.bounds.ends()
        chosen = {p: int(spec.get(str(p), -2)) for p in starts}
        return {p: starts[p] if o == -2 else ends[p] if o == -1 else o for p, o in chosen.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self.bounds.ends()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        if not draining(self.drain_marker):
            planned = self._planned(start, limit)
            if (
                planned != start
                or self.arrivals is None
                or not self.arrivals.wait({self.topic: self._latest_ends or {}})
            ):
                return planned
            if not draining(self.drain_marker):  # the wait ends early when the service stops
                return self._planned(start, limit)  # what came while it waited, if here
        hold(self.drain_marker)  # the service is stopping: no more records (`serdes.kafka.drain`)
        return start

    def _planned(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """The offsets the next micro-batch reads to: `start` where nothing is new."""
        if self.bounded and self._available_now is None:
            self.prepareForTriggerAvailableNow()
        ends = self._latest_ends = self.bounds.ends()
        if self._available_now is not None:
            ends = {p: min(e, self._available_now.get(p, 0)) for p, e in ends.items()}
        begun = {int(p): o for p, o in start.get(self.topic, {}).items()}
        # A partition the topic gained since the last batch is read from its beginning.
        starts = {p: begun.get(p, 0) for p in ends}
        available = {p: max(0, ends[p] - starts[p]) for p in ends}
        if isinstance(limit, ReadMaxRows):
            available = split_limit(available, limit.max_rows)
        planned = {p: starts[p] + available.get(p, 0) for p in ends}
        if self.backlogs is not None:
            self.backlogs.mark(planned != ends)
        beat = start.get(HEARTBEAT, {}).get("ms")
        if self.marks_group is None:
            return self._as_offsets(planned)
        idle = self._idle(ends, planned)
        if planned == begun:  # nothing to read: start unchanged, unless a heartbeat is due
            if self.peers and ends and len(idle) == len(ends):
                beat = self._heartbeat(beat)
            return self._as_offsets(planned, _marks(start), heartbeat=beat)
        marks = planned_marks(self.client_config, self.marks_group, self.topic, ends, _marks(start))
        backlog = planned != ends and sum(available.values()) >= SPLIT_FROM
        split = self.backlog_tasks if backlog else None
        return self._as_offsets(planned, marks, idle, beat, split)

    def _heartbeat(self, last: int | None) -> int | None:
        """The watermark column of a heartbeat of this idle input: the least watermark of the
        others that are not, plus its own delay, if that moved past its last heartbeat's."""
        watermark = peers_watermark(self.client_config, self.peers)
        if watermark is None or (last is not None and watermark + self.delay_ms <= last):
            return last
        return watermark + self.delay_ms

    def _idle(self, ends: dict[int, int], planned: dict[int, int]) -> list[int]:
        """The partitions read to their end whose end has not moved for the idle timeout."""
        if self.idle_timeout_ms <= 0:
            return []
        now = time.monotonic()
        for p, end in ends.items():
            if self._moved.get(p, (None, 0.0))[0] != end:
                self._moved[p] = (end, now)
        quiet = now - self.idle_timeout_ms / 1000
        return [
            p
            for p, (end, moved) in sorted(self._moved.items())
            if moved <= quiet and planned.get(p) == end
        ]

    def reportLatestOffset(self) -> Offsets:
        """The progress report's latest offsets: the ends this trigger's plan found (asked
        again only before any plan), and the ends the broker did not confirm so far."""
        ends = self._latest_ends if self._latest_ends is not None else self.bounds.ends()
        return {**self._as_offsets(ends), END_FALLBACKS: dict(self.bounds.fallbacks)}

    def partitions(self, start: Offsets, end: Offsets) -> list[OffsetRanges]:
        marks, tasks = None, self.tasks
        if self.marks_group is not None:
            known = _marks(end)
            beat = end.get(HEARTBEAT, {}).get("ms")
            marks = PartitionMarks(
                self.marks_group,
                {int(p): known.get(int(p)) for p in end.get(self.topic, {})},
                frozenset(end.get(IDLE_PARTITIONS, [])),
                publish=bool(self.peers),
                heartbeat=beat if beat != start.get(HEARTBEAT, {}).get("ms") else None,
            )
            # one task reads every partition: it sees each one's records of the micro-batch,
            # so the watermark it gives is its partitions' least now, not a micro-batch behind
            # for those another task read (no later micro-batch may come to catch it up).
            # A micro-batch of a backlog, whose plan left records for the next, is split among
            # tasks: each stamps a watermark lower than one task would (the others' partitions
            # as of the micro-batch before), which passes no row it should not, and the
            # backlog's last micro-batch, read to the end by one task, catches up. Its plan
            # says so, so that a re-run reads it as the first run did. Dead letters are written
            # per input partition, whatever task reads it.
            tasks = end.get(BACKLOG_TASKS, {}).get("tasks", 1)
        ranges = task_ranges(
            self.topic,
            start.get(self.topic, {}),
            end.get(self.topic, {}),
            tasks,
            self.client_config,
            marks,
        )
        if not ranges and marks is not None and marks.heartbeat is not None:
            return [OffsetRanges(self.topic, {}, self.client_config, marks)]  # its one row
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRanges)
        settle_worker()
        batches = read_range(partition)
        if self.transform is None:
            return batches
        decoded = self.transform(batches)
        if partition.marks is None:
            return decoded
        return partition.marks.stamped(
            decoded, partition.ranges, partition.topic, partition.client_config, self.schema
        )

    def stop(self) -> None:
        if self._bounds is not None:
            self._bounds.close()
        if self.arrivals is not None:
            self.arrivals.close()
        if self.backlogs is not None:
            self.backlogs.mark(False)

    def _as_offsets(
        self,
        offsets: dict[int, int],
        marks: Marks | None = None,
        idle: list[int] | None = None,
        heartbeat: int | None = None,
        split: int | None = None,
    ) -> Offsets:
        planned: Offsets = {self.topic: {str(p): int(o) for p, o in sorted(offsets.items())}}
        if self.started is not None:
            planned[STARTED] = {"ns": self.started}  # no topic has this name: it holds a space
        if marks:
            planned[EVENT_TIMES] = {str(p): m for p, m in sorted(marks.items()) if m is not None}
        if idle:
            planned[IDLE_PARTITIONS] = idle
        if heartbeat is not None:
            planned[HEARTBEAT] = {"ms": heartbeat}
        if split is not None and split > 1:
            planned[BACKLOG_TASKS] = {"tasks": split}
        return planned


def _marks(offsets: Offsets) -> Marks:
    """The partition marks a micro-batch's offsets carry (`serdes.kafka.event_times`)."""
    return {int(p): m for p, m in offsets.get(EVENT_TIMES, {}).items()}


def record_batch(messages: list, topic: str) -> pa.RecordBatch:
    """One Arrow batch of consumed records (`confluent_kafka.Message`s), a column at a time:
    a comprehension per column costs about half of five appends per record."""
    n = len(messages)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([m.partition() for m in messages], pa.int32()),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array([m.timestamp()[1] for m in messages], pa.timestamp("ms", tz="UTC")).cast(
                pa.timestamp("us", tz="UTC")
            ),
            pa.array([m.headers() for m in messages], HEADER_TYPE),
        ],
        schema=ARROW_SCHEMA,
    )


@dataclass
class _Reader:
    """A Kafka client that reads ranges, and the topics it has met."""

    consumer: Consumer
    topics: set[str]


# Readers a worker process kept from the tasks it ran, by client settings, each with nothing
# assigned: a new one cost its connections and the cluster's metadata again, in every reading
# task of every micro-batch (`docs/performance.md`).
_idle_readers: dict[tuple[tuple[str, str], ...], list[_Reader]] = {}


def _reader(settings: tuple[tuple[str, str], ...], topic: str) -> _Reader:
    """An idle reader with these client settings, or a new one, that knows `topic`."""
    idle = _idle_readers.get(settings)
    reader = (
        idle.pop()
        if idle
        else _Reader(committed_reader(dict(settings), "streamjoin-reader"), set())
    )
    if topic not in reader.topics:
        # A client looks a topic it has not met up at its next scan of its topics, up to a
        # second after the partitions are assigned; asked now, the first fetch goes at once
        try:
            reader.consumer.list_topics(topic, timeout=STALL_TIMEOUT_S)
        except BaseException:
            reader.consumer.close()  # a reader that failed is not kept, nor left open
            raise
        reader.topics.add(topic)
    return reader


def read_range(task: OffsetRanges) -> Iterator[pa.RecordBatch]:
    """Read exactly the records of each partition's `[start, end)`, skipping transaction
    markers and aborts; the partitions are fetched together, each in its offsets' order."""
    settings = tuple(sorted(task.client_config.items()))
    reader = _reader(settings, task.topic)
    consumer = reader.consumer
    read_all = False
    ends = {p: end for p, (_, end) in task.ranges.items()}
    position = {p: start for p, (start, _) in task.ranges.items()}
    consumer.assign([TopicPartition(task.topic, p, o) for p, o in position.items()])
    pending: list = []
    paused: set[int] = set()
    last_progress = time.monotonic()
    try:
        while left := sum(ends[p] - position[p] for p in ends):
            # librdkafka's consume waits out its timeout unless `num_messages` are there: ask
            # for no more than the ranges still hold (a range's tail waited 0.5 s a task)
            messages = consumer.consume(num_messages=max(1, min(10_000, left)), timeout=0.5)
            read = len(pending)
            for message in messages:
                partition, offset, error = message.partition(), message.offset(), message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                end = ends[partition]
                if offset < end and error is None:
                    pending.append(message)
                    position[partition] = offset + 1
                elif offset >= end > position[partition]:  # past its last record: the range
                    position[partition] = end  # ends in a transaction marker or an abort
            # fetch no further than the ranges (records past one are skipped anyway)
            if done := [p for p, end in ends.items() if position[p] == end and p not in paused]:
                consumer.pause([TopicPartition(task.topic, p) for p in done])
                paused.update(done)
            if len(pending) > read:
                last_progress = time.monotonic()
            if len(pending) >= ARROW_BATCH_ROWS:
                yield record_batch(pending, task.topic)
                pending = []
            if time.monotonic() - last_progress > STALL_TIMEOUT_S:
                stuck = {p: o for p, o in position.items() if o < ends[p]}
                raise TimeoutError(
                    f"{task.topic}: stuck at offsets {stuck} of ranges {task.ranges} for "
                    f"{STALL_TIMEOUT_S:.0f}s"
                )
        if pending:
            yield record_batch(pending, task.topic)
        read_all = True
    finally:
        if read_all:  # kept for the next task, with nothing assigned or paused
            consumer.resume([TopicPartition(task.topic, p) for p in paused])
            consumer.unassign()
            _idle_readers.setdefault(settings, []).append(reader)
        else:  # an error, or a task that stopped reading: what it holds is not known
            consumer.close()
