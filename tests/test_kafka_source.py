"""The Kafka source: exact offset planning against a real broker, and reading through Spark."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from app.broker import Tansu
from serdes.kafka.arrivals import IDLE_WAIT_MS
from serdes.kafka.broker_code import runs_kafka_code
from serdes.kafka.offsets import (
    PROBE_TIMEOUT_S,
    UNANSWERED,
    UNCONFIRMED,
    PartitionBounds,
    TopicMissingError,
)
from serdes.kafka.source import (
    BACKLOG_TASKS,
    SPLIT_FROM,
    KafkaStreamReader,
    OffsetRanges,
    _idle_readers,
    read_range,
    split_limit,
    task_ranges,
)
from tests.kafka_io import create_topics, produce, unique


def test_split_limit_shares_in_proportion_and_starves_no_partition() -> None:
    assert split_limit({0: 10, 1: 5}, 100) == {0: 10, 1: 5}
    shares = split_limit({0: 900, 1: 90, 2: 10}, 100)
    assert sum(shares.values()) == 100
    assert shares[0] >= 80 and shares[1] >= 9 and shares[2] >= 1


class LeaderMoving:
    """A topic's consumer whose partition answers "not leader" twice (as a partition does while
    its leader moves to another broker) before it lists its offsets."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.not_ready = [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE]

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        partitions = {0: SimpleNamespace(id=0)}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple:
        if self.not_ready:
            raise KafkaException(KafkaError(self.not_ready.pop(0)))
        return (3, 42)

    def close(self) -> None: ...


def test_a_partition_whose_leader_moves_is_listed_once_it_has_one() -> None:
    bounds = PartitionBounds("orders", {"bootstrap.servers": "127.0.0.1:9"}, probe=False)
    bounds.close()
    bounds._consumer = LeaderMoving("orders")  # type: ignore[assignment]
    assert bounds.ends() == {0: 42}
    assert bounds.fallbacks == {UNCONFIRMED: 0, UNANSWERED: 0}


def assert_ends_exact(kafka: str) -> PartitionBounds:
    topic = unique("bounds")
    create_topics(kafka, [topic], partitions=3)
    bounds = PartitionBounds(topic, {"bootstrap.servers": kafka})
    assert bounds.ends() == {0: 0, 1: 0, 2: 0}
    # Many records per produce batch: a broker answering ListOffsets with the batch's base
    # offset + 1 would under-report these ends.
    produce(kafka, topic, [b"%d" % i for i in range(3000)], partitions=3)
    assert bounds.ends() == {0: 1000, 1: 1000, 2: 1000}
    produce(kafka, topic, [b"x", b"y"], partitions=3)
    assert bounds.ends() == {0: 1001, 1: 1001, 2: 1000}
    assert bounds.starts() == {0: 0, 1: 0, 2: 0}
    bounds.close()
    return bounds


def test_end_offsets_are_the_brokers_list_offsets_on_apache_kafka(kafka: str) -> None:
    assert runs_kafka_code({"bootstrap.servers": kafka})
    bounds = assert_ends_exact(kafka)
    assert bounds.fallbacks == {UNCONFIRMED: 0, UNANSWERED: 0}


def test_end_offsets_are_read_to_on_a_broker_whose_list_offsets_lag() -> None:
    with Tansu() as tansu:
        assert not runs_kafka_code({"bootstrap.servers": tansu.bootstrap})
        assert_ends_exact(tansu.bootstrap)


def open_transaction(kafka: str, topic: str, records: int) -> Producer:
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": unique("open")})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(records):
        producer.produce(topic, b"%d" % i, partition=0)
    producer.flush()
    return producer


def ends_become(bounds: PartitionBounds, expected: dict[int, int]) -> bool:
    """Whether the ends come to `expected` within seconds: a commit returns once the
    transaction's coordinator decided it; its markers, which move the ends, come after."""
    deadline = time.monotonic() + 10
    while bounds.ends() != expected:
        if time.monotonic() > deadline:
            return False
    return True


def test_a_partition_ends_at_its_open_transaction_for_a_committed_reader(kafka: str) -> None:
    """The last stable offset: what a `read_committed` reader may read to."""
    topic = unique("open")
    create_topics(kafka, [topic])
    produce(kafka, topic, [b"a", b"b", b"c"])
    transaction = open_transaction(kafka, topic, 5)
    bounds = PartitionBounds(topic, {"bootstrap.servers": kafka})
    assert bounds.ends() == {0: 3}
    transaction.commit_transaction()
    assert ends_become(bounds, {0: 9})  # its 5 records and the commit's marker
    bounds.close()


@pytest.mark.parametrize("probe", [False, True], ids=["listed", "probed"])
def test_a_partition_written_without_pause_never_holds_planning_up(kafka: str, probe) -> None:
    """A producer writing as fast as it can: each end found, listed or probed (a probe that
    shows no end marker in time plans to the last record it read), comes within the probe's
    time, never goes back nor beyond what was written, and the last one is exact."""
    topic = unique("busy")
    create_topics(kafka, [topic], partitions=2)
    records, written = 100_000, [0]

    def write() -> None:
        producer = Producer({"bootstrap.servers": kafka, "linger.ms": 1})
        while written[0] < records:
            written[0] += 1  # before the hand-over: a record is never readable before counted
            try:
                producer.produce(topic, b"%d" % written[0], partition=written[0] % 2)
            except BufferError:  # the producer's queue is full: let it drain, then again
                written[0] -= 1
                producer.poll(0.01)
        producer.flush()

    writer = threading.Thread(target=write)
    writer.start()
    bounds = PartitionBounds(topic, {"bootstrap.servers": kafka}, probe=probe)
    found: dict[int, int] = {}
    while writer.is_alive():
        began = time.monotonic()
        ends = bounds.ends()
        assert time.monotonic() - began < PROBE_TIMEOUT_S
        assert all(ends[p] >= found.get(p, 0) for p in ends)
        assert sum(ends.values()) <= written[0]
        found = ends
    assert ends_become(bounds, {0: records // 2, 1: records // 2})
    bounds.close()


def test_a_missing_topic_is_named(kafka: str) -> None:
    bounds = PartitionBounds("no-such-topic-here", {"bootstrap.servers": kafka})
    with pytest.raises(TopicMissingError, match="'no-such-topic-here' does not exist"):
        bounds.ends()
    bounds.close()


def test_a_range_reads_exactly_its_records(kafka: str) -> None:
    topic = unique("range")
    create_topics(kafka, [topic])
    produce(kafka, topic, [b"v%d" % i for i in range(500)])
    task = OffsetRanges(topic, {0: (120, 380)}, {"bootstrap.servers": kafka})
    batches = list(read_range(task))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(120, 380))
    assert batches[0].column("value")[0].as_py() == b"v120"


def test_tasks_one_after_another_in_a_worker_each_read_exactly_their_ranges(kafka: str) -> None:
    # A worker keeps its reader between tasks: a range read after another, earlier or later in
    # the same partition, or a partition left paused by the task before, reads its own records
    topic = unique("reuse")
    create_topics(kafka, [topic], partitions=2)
    produce(kafka, topic, [b"%d" % i for i in range(2000)], partitions=2)  # 1000 a partition
    config = {"bootstrap.servers": kafka}
    tasks = [{0: (0, 10), 1: (0, 900)}, {0: (500, 700)}, {0: (100, 120), 1: (899, 1000)}]
    for ranges in tasks:
        batches = list(read_range(OffsetRanges(topic, ranges, config)))
        read = [
            (p, o)
            for b in batches
            for p, o in zip(
                b.column("partition").to_pylist(), b.column("offset").to_pylist(), strict=True
            )
        ]
        assert sorted(read) == [(p, o) for p, (s, e) in sorted(ranges.items()) for o in range(s, e)]
    # one reader served the three tasks
    assert len(_idle_readers[tuple(sorted(config.items()))]) == 1


def test_a_kept_reader_reads_the_next_task_s_topic_at_once(kafka: str) -> None:
    # A worker's reader serves the tasks of every input: a range of a topic it has not met is
    # fetched at once, not at the client's next look at its topics (up to a second later), and
    # a range read to a partition's end leaves no fetch at the broker that holds up the next
    # task's (500 ms by librdkafka's default)
    topics = [unique("met") for _ in range(4)]
    create_topics(kafka, topics, partitions=1)
    for topic in topics:
        produce(kafka, topic, [b"%d" % i for i in range(100)], partitions=1)
    config = {"bootstrap.servers": kafka}
    list(read_range(OffsetRanges(topics[0], {0: (0, 100)}, config)))  # a reader, kept
    started = time.monotonic()
    for topic in topics[1:]:
        batches = read_range(OffsetRanges(topic, {0: (0, 100)}, config))
        assert sum(batch.num_rows for batch in batches) == 100
    assert time.monotonic() - started < 1.0


def test_one_task_reads_the_ranges_of_several_partitions_each_in_order(kafka: str) -> None:
    topic = unique("ranges")
    create_topics(kafka, [topic], partitions=3)
    produce(kafka, topic, [b"%d" % i for i in range(3000)], partitions=3)  # 1000 a partition
    ranges = {0: (10, 990), 2: (500, 501), 1: (0, 1000)}
    batches = list(read_range(OffsetRanges(topic, ranges, {"bootstrap.servers": kafka})))
    read = [
        (p, o)
        for b in batches
        for p, o in zip(
            b.column("partition").to_pylist(), b.column("offset").to_pylist(), strict=True
        )
    ]
    for partition, (start, end) in ranges.items():
        assert [o for p, o in read if p == partition] == list(range(start, end))
    assert len(read) == 980 + 1 + 1000


def test_a_batch_is_read_by_at_most_the_given_number_of_tasks() -> None:
    start, end = {"0": 5, "1": 7, "2": 0, "3": 9}, {"0": 8, "1": 7, "2": 4, "3": 10, "4": 2}
    tasks = task_ranges("t", start, end, 2, {})
    assert [t.ranges for t in tasks] == [{0: (5, 8), 2: (0, 4), 4: (0, 2)}, {3: (9, 10)}]
    alone = task_ranges("t", start, end, None, {})  # partition 1 has nothing new
    assert [t.ranges for t in alone] == [{0: (5, 8)}, {2: (0, 4)}, {3: (9, 10)}, {4: (0, 2)}]


def test_planning_respects_the_read_limit_and_picks_up_new_partitions(kafka: str) -> None:
    topic = unique("plan")
    create_topics(kafka, [topic], partitions=2)
    produce(kafka, topic, [b"%d" % i for i in range(100)], partitions=2)
    reader = KafkaStreamReader(topic, {"bootstrap.servers": kafka}, "earliest", 30)
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit().max_rows == 30
    assert reader.latestOffset(start, ReadMaxRows(30)) == {topic: {"0": 15, "1": 15}}
    everything = reader.latestOffset(start, ReadAllAvailable())
    assert everything == {topic: {"0": 50, "1": 50}}
    # A start that does not know partition 1 yet (as after the topic grew) reads it from 0.
    grown = reader.latestOffset({topic: {"0": 50}}, ReadAllAvailable())
    assert grown == {topic: {"0": 50, "1": 50}}
    assert [p.ranges for p in reader.partitions({topic: {"0": 50}}, grown)] == [{1: (0, 50)}]
    reader.stop()


def test_back_to_back_a_quiet_trigger_waits_for_the_next_record_on_any_input(kafka: str) -> None:
    # The first input's reader holds a trigger that found nothing new until a record comes to
    # any of the query's topics, and plans it at once if it is its own; quiet, about a second.
    own, other = unique("wait-own"), unique("wait-other")
    create_topics(kafka, [own, other], partitions=2)
    produce(kafka, own, [b"a", b"b"], partitions=2)
    config = {"bootstrap.servers": kafka}
    reader = KafkaStreamReader(own, config, "earliest", None, wait_for=[own, other])
    planned = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert planned == {own: {"0": 1, "1": 1}}
    began = time.monotonic()
    assert reader.latestOffset(planned, ReadAllAvailable()) == planned  # the ends' first look
    assert reader.latestOffset(planned, ReadAllAvailable()) == planned  # a quiet second
    waited = time.monotonic() - began
    assert IDLE_WAIT_MS / 1000 <= waited < IDLE_WAIT_MS / 1000 + 2

    def after(delay_s: float, topic: str) -> threading.Thread:
        thread = threading.Timer(delay_s, produce, (kafka, topic, [b"c"]))
        thread.start()
        return thread

    for topic, moved in ((own, {own: {"0": 2, "1": 1}}), (other, {own: {"0": 2, "1": 1}})):
        reader.latestOffset(planned, ReadAllAvailable())  # takes in the ends as they are now
        producing = after(0.3, topic)
        began = time.monotonic()
        assert reader.latestOffset(planned, ReadAllAvailable()) == moved  # its own planned
        assert time.monotonic() - began < IDLE_WAIT_MS / 1000 - 0.2  # woken by the record
        producing.join()
        planned = moved
    reader.stop()


def test_a_quiet_trigger_does_not_wait_while_another_input_has_records_left_unread(
    kafka: str, tmp_path: Path
) -> None:
    """Under a read limit a backlog's ends stand still from one micro-batch to the next: the
    waiting reader, with nothing of its own, plans at once while another input's reader left
    records unread, and waits once nothing is left anywhere."""
    own, other = unique("quiet-own"), unique("backlog")
    create_topics(kafka, [own, other], partitions=1)
    produce(kafka, other, [b"%d" % i for i in range(30)])
    config = {"bootstrap.servers": kafka}
    shared = {"backlog_dir": str(tmp_path)}
    waiting = KafkaStreamReader(own, config, "earliest", None, wait_for=[own, other], **shared)
    limited = KafkaStreamReader(other, config, "earliest", 10, **shared)
    quiet = waiting.latestOffset(waiting.initialOffset(), ReadAllAvailable())  # a first look
    read = limited.initialOffset()
    for _ in range(2):  # ten of thirty, then twenty: each next trigger planned at once
        read = limited.latestOffset(read, ReadMaxRows(10))
        began = time.monotonic()
        assert waiting.latestOffset(quiet, ReadAllAvailable()) == quiet
        assert time.monotonic() - began < IDLE_WAIT_MS / 1000 / 2
    assert limited.latestOffset(read, ReadMaxRows(10)) == {other: {"0": 30}}
    began = time.monotonic()
    assert waiting.latestOffset(quiet, ReadAllAvailable()) == quiet
    assert time.monotonic() - began >= IDLE_WAIT_MS / 1000  # nothing left: a quiet trigger
    for reader in (waiting, limited):
        reader.stop()
    assert not list(tmp_path.iterdir())


def test_a_mark_left_by_a_killed_reader_does_not_keep_quiet_triggers_from_waiting(
    kafka: str, tmp_path: Path
) -> None:
    """A reader killed while its plan left records unread cannot take its mark back; Spark
    starts another. The mark must not hold the waiting reader in a loop of 10-ms triggers."""
    own = unique("quiet-after-kill")
    create_topics(kafka, [own], partitions=1)
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    (tmp_path / f"backlog-{killed.pid}").touch()
    waiting = KafkaStreamReader(
        own,
        {"bootstrap.servers": kafka},
        "earliest",
        None,
        wait_for=[own],
        backlog_dir=str(tmp_path),
    )
    quiet = waiting.latestOffset(waiting.initialOffset(), ReadAllAvailable())  # a first look
    began = time.monotonic()
    assert waiting.latestOffset(quiet, ReadAllAvailable()) == quiet
    assert time.monotonic() - began >= IDLE_WAIT_MS / 1000
    waiting.stop()
    assert not list(tmp_path.iterdir())


def test_a_waking_reader_plans_a_batch_at_each_start_with_nothing_new_to_read(kafka: str) -> None:
    """A wall-clock job's timers fire only in a batch, and Spark plans none after a restart
    until the sources' offsets move: a waking reader's first plan moves them, reading nothing."""
    topic = unique("wake")
    create_topics(kafka, [topic], partitions=2)
    produce(kafka, topic, [b"%d" % i for i in range(10)], partitions=2)
    config = {"bootstrap.servers": kafka}
    first = KafkaStreamReader(topic, config, "earliest", None, wake=True)
    read = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    assert first.latestOffset(read, ReadAllAvailable()) == read  # no batch while nothing comes
    restarted = KafkaStreamReader(topic, config, "earliest", None, wake=True)
    woken = restarted.latestOffset(read, ReadAllAvailable())
    assert woken != read and woken[topic] == read[topic] == {"0": 5, "1": 5}
    assert restarted.partitions(read, woken) == []  # the batch reads nothing
    assert restarted.latestOffset(woken, ReadAllAvailable()) == woken
    plain = KafkaStreamReader(topic, config, "earliest", None)
    assert plain.latestOffset(read, ReadAllAvailable()) == {topic: read[topic]}
    for reader in (first, restarted, plain):
        reader.stop()


def test_an_event_time_backlog_is_read_by_several_tasks_and_its_last_batch_by_one(
    kafka: str,
) -> None:
    """One task reads an event-time input's micro-batch, so that the watermark it stamps is its
    partitions' least; a micro-batch that leaves records for the next is split among tasks (a
    lower watermark there passes no row), and the one that reads to the end is not, so the
    watermark catches up. A re-run reads a batch as its plan said."""
    topic = unique("backlog")
    create_topics(kafka, [topic], partitions=4)
    produce(kafka, topic, [b"%d" % i for i in range(2 * SPLIT_FROM + 400)], partitions=4)
    reader = KafkaStreamReader(
        topic,
        {"bootstrap.servers": kafka},
        "earliest",
        SPLIT_FROM,
        marks_group=unique("marks"),
        backlog_tasks=2,
    )
    start = reader.initialOffset()
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first[BACKLOG_TASKS] == {"tasks": 2}
    split = [t.ranges for t in reader.partitions(start, first)]
    assert split == [{0: (0, 2500), 2: (0, 2500)}, {1: (0, 2500), 3: (0, 2500)}]
    again = KafkaStreamReader(topic, {"bootstrap.servers": kafka}, "earliest", SPLIT_FROM)
    again.marks_group = reader.marks_group  # a restart's reader, its option not yet set
    assert [t.ranges for t in again.partitions(start, first)] == split
    second = reader.latestOffset(first, reader.getDefaultReadLimit())
    assert BACKLOG_TASKS in second  # 400 records remain after it
    last = reader.latestOffset(second, reader.getDefaultReadLimit())
    assert BACKLOG_TASKS not in last and last[topic] == {str(p): 5100 for p in range(4)}
    assert len(reader.partitions(second, last)) == 1
    unmarked = KafkaStreamReader(topic, {"bootstrap.servers": kafka}, "earliest", SPLIT_FROM)
    assert BACKLOG_TASKS not in unmarked.latestOffset(start, unmarked.getDefaultReadLimit())
    for each in (reader, again, unmarked):
        each.stop()


def test_starting_offsets_latest_and_explicit(kafka: str) -> None:
    topic = unique("start")
    create_topics(kafka, [topic], partitions=2)
    produce(kafka, topic, [b"%d" % i for i in range(10)], partitions=2)
    config = {"bootstrap.servers": kafka}
    latest = KafkaStreamReader(topic, config, "latest", None)
    assert latest.initialOffset() == {topic: {"0": 5, "1": 5}}
    explicit = KafkaStreamReader(topic, config, json.dumps({topic: {"0": 3, "1": -1}}), None)
    assert explicit.initialOffset() == {topic: {"0": 3, "1": 5}}
    latest.stop()
    explicit.stop()


@pytest.mark.spark
def test_spark_reads_all_columns_in_limited_micro_batches(kafka: str, spark, tmp_path) -> None:
    topic = unique("spark-src")
    create_topics(kafka, [topic], partitions=2)
    produce(kafka, topic, [b"r%d" % i for i in range(1000)], partitions=2)
    batches: list[list] = []
    query = (
        spark.readStream.format("streamjoin-kafka")
        .option("topic", topic)
        .option("kafka.bootstrap.servers", kafka)
        .option("maxRecordsPerTrigger", "300")
        .load()
        .writeStream.foreachBatch(lambda df, _id: batches.append(df.collect()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    rows = [r for batch in batches for r in batch]
    assert max(len(b) for b in batches) <= 300
    assert sorted(r.value for r in rows) == sorted(b"r%d" % i for i in range(1000))
    first = rows[0]
    assert first.topic == topic and first.key == first.value and first.timestamp is not None
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in (0, 1) for o in range(500)}
