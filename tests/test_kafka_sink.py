"""The Kafka sink: what it writes, and that a record Kafka does not take fails the batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from pyspark.sql.types import StructType

from app.broker import Tansu
from serdes.kafka.datasource import KafkaDataSource
from serdes.kafka.produce import DeliveryError
from serdes.kafka.sink import KafkaStreamWriter, in_background, write_once
from serdes.kafka.source import HEADER_TYPE
from serdes.kafka.transactions import BATCH_HEADER, ExactlyOnce
from tests.kafka_io import (
    committed_output,
    create_topics,
    died_mid_transaction,
    output_topics,
    read_topic,
    unique,
)

SCHEMA = pa.schema(
    [("key", pa.binary()), ("value", pa.binary()), ("headers", HEADER_TYPE), ("topic", pa.string())]
)


def batch(rows: list[tuple]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [dict(zip(SCHEMA.names, row, strict=True)) for row in rows], schema=SCHEMA
    )


def test_records_go_to_their_own_topic_or_the_sinks_with_their_headers(kafka: str) -> None:
    main, side = unique("sink"), unique("sink-dlq")
    create_topics(kafka, [main, side])
    writer = KafkaStreamWriter(main, {"bootstrap.servers": kafka}, None)
    header = [{"key": "h", "value": b"1"}]
    commit = writer.write(
        iter(
            [
                batch(
                    [
                        (b"k1", b"v1", header, None),
                        (b"k2", b"v2", None, side),
                        (b"k3", None, None, None),
                    ]
                )
            ]
        )
    )
    assert commit.records == 3
    [first, tombstone] = read_topic(kafka, main)
    assert (first.key, first.value, first.header("h")) == (b"k1", b"v1", b"1")
    assert (tombstone.key, tombstone.value) == (b"k3", None)
    assert [(r.key, r.value) for r in read_topic(kafka, side)] == [(b"k2", b"v2")]


def test_each_record_keeps_its_headers_in_order_in_any_slice_of_a_batch() -> None:
    one, two = {"key": "op", "value": b"+I"}, {"key": "trace", "value": None}
    rows = [
        (b"k1", b"v1", [one, two], None),
        (b"k2", b"v2", [two, one], None),
        (b"k3", b"v3", [], "dlq"),
        (b"k4", None, None, None),
        (b"k5", b"v5", [one], None),
    ]
    writer = KafkaStreamWriter("out", {}, None)
    assert list(writer.records(iter([batch(rows).slice(1, 4)]))) == [
        ("out", b"k2", b"v2", [("trace", None), ("op", b"+I")]),
        ("dlq", b"k3", b"v3", None),
        ("out", b"k4", None, None),
        ("out", b"k5", b"v5", [("op", b"+I")]),
    ]


def test_undelivered_records_fail_the_write() -> None:
    writer = KafkaStreamWriter(
        "t", {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "1500"}, None
    )
    with pytest.raises(DeliveryError, match="1 of 1 records to 't' were not delivered"):
        writer.write(iter([batch([(b"k", b"v", None, None)])]))


@dataclass
class MarkerAnswer:
    """What `Consumer.committed` gives for one partition: its offset, or the error reading it."""

    offset: int
    error: KafkaError | None = None


class CoordinatorLoading:
    """A marker group's consumer whose coordinator answers "not coordinator" and "load in
    progress" (as Apache Kafka does while it loads the group's partition of
    `__consumer_offsets`) before it answers `then`; a broker cannot be made to do that on cue."""

    def __init__(self, then: MarkerAnswer) -> None:
        self.not_ready = [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS]
        self.then = then

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[MarkerAnswer]:
        if self.not_ready:
            raise KafkaException(KafkaError(self.not_ready.pop(0)))
        return [self.then]


def test_a_marker_read_while_the_groups_coordinator_loads_waits_for_it() -> None:
    sink = ExactlyOnce("streamjoin-out", "out.markers")
    assert sink.committed_batch(CoordinatorLoading(MarkerAnswer(8))) == 7  # type: ignore[arg-type]


def test_a_marker_that_could_not_be_read_is_not_taken_for_no_batch_written() -> None:
    """Taken for "no batch yet", the task would write its batch a second time."""
    unreadable = MarkerAnswer(-1001, KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT))
    with pytest.raises(KafkaException, match="UNSTABLE_OFFSET_COMMIT"):
        ExactlyOnce("streamjoin-out", "out.markers").committed_batch(
            CoordinatorLoading(unreadable)  # type: ignore[arg-type]
        )


def transactional_topics(kafka: str) -> tuple[str, str]:
    out = unique("eos")
    output_topics(kafka, out)
    return out, f"{out}.markers"


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "on-kafkas-word"])
def test_exactly_once_writes_each_batch_of_a_partition_once_with_its_marker(
    kafka: str, guarded: bool
) -> None:
    """Guarded (each commit's marker read back) or not, a batch re-run right after its commit
    finds its marker and writes nothing."""
    out, markers = transactional_topics(kafka)
    sink = ExactlyOnce(unique("txn"), markers, guarded)
    config = {"bootstrap.servers": kafka}
    first = [(out, b"k1", b"v1", None), (f"{out}.dlq", b"k2", b"bad", [("h", b"1")])]
    assert sink.write(config, 3, 7, first)
    assert not sink.write(config, 3, 7, first)  # the batch re-run after a crash
    assert sink.write(config, 3, 8, [(out, b"k1", b"v2", None)])
    assert sink.write(config, 4, 7, [(out, b"k4", b"v4", None)])  # its own marker

    written = committed_output(kafka, out, markers)
    marked = [json.loads(m.value) for m in read_topic(kafka, markers)]
    assert [(m["partition"], m["batch"], m["records"]) for m in marked] == [
        (3, 7, 2),
        (3, 8, 1),
        (4, 7, 1),
    ]
    attempts = [m["attempt"].encode() for m in marked]
    assert [a.rsplit(b":", 1)[0] for a in attempts] == [b"3:7", b"3:8", b"4:7"]
    assert [(r.value, r.header(BATCH_HEADER)) for r in written] == [
        (b"v1", attempts[0]),
        (b"v2", attempts[1]),
        (b"v4", attempts[2]),
    ]
    [dead] = committed_output(kafka, f"{out}.dlq", markers)
    assert (dead.value, dead.header("h"), dead.header(BATCH_HEADER)) == (b"bad", b"1", attempts[0])


def test_a_transaction_set_up_for_a_task_with_nothing_to_write_is_over_when_the_task_ends(
    kafka: str,
) -> None:
    """A task sets up its transaction while its input is computed; one that ends with nothing to
    write returns only once that set-up is over, so that it cannot fence the producer of the
    partition's next task, which then writes its batch."""
    out, markers = transactional_topics(kafka)
    sink = ExactlyOnce(unique("txn"), markers, guarded=False)
    config = {"bootstrap.servers": kafka}
    opened = in_background(sink.open, config, 0)
    assert write_once(config, sink, [], out, opened=opened) == 0
    assert opened.done() and opened.exception() is None
    assert sink.write(config, 0, 1, [(out, b"k", b"next", None)])
    assert [r.value for r in committed_output(kafka, out, markers)] == [b"next"]


def test_the_sink_guards_its_commits_only_where_the_broker_does_not_run_kafkas_code(
    kafka: str,
) -> None:
    def writer(bootstrap: str) -> KafkaStreamWriter:
        options = {"topic": "t", "transactionalid": "x", "markertopic": "t.markers"}
        source = KafkaDataSource({**options, "kafka.bootstrap.servers": bootstrap})
        return source.streamWriter(StructType(), False)

    assert writer(kafka).exactly_once == ExactlyOnce("x", "t.markers", guarded=False)
    with Tansu() as tansu:
        assert writer(tansu.bootstrap).exactly_once == ExactlyOnce("x", "t.markers", guarded=True)


def test_an_attempt_that_died_mid_transaction_is_fenced_and_its_records_never_count(
    kafka: str,
) -> None:
    out, markers = transactional_topics(kafka)
    sink = ExactlyOnce(unique("txn"), markers)
    dead = died_mid_transaction(kafka, sink, 0, out)

    assert sink.write({"bootstrap.servers": kafka}, 0, 5, [(out, b"k", b"whole", None)])
    with pytest.raises(KafkaException):  # fenced (Tansu: no answer)
        dead.commit_transaction(5)
    assert [r.value for r in committed_output(kafka, out, markers)] == [b"whole"]


def test_transactions_a_dead_process_left_open_are_aborted_before_any_task_writes(
    kafka: str,
) -> None:
    """Task 0 of the crashed run died mid-transaction; task 1 of the re-run writes first. Its
    commit must not wait for task 0 of the re-run (Tansu would not apply it; Kafka would hide
    it from read_committed consumers until the open transaction timed out)."""
    out, markers = transactional_topics(kafka)
    sink = ExactlyOnce(unique("txn"), markers)
    died_mid_transaction(kafka, sink, 0, out)

    sink.fence({"bootstrap.servers": kafka}, 2)
    assert sink.write({"bootstrap.servers": kafka}, 1, 5, [(out, b"k", b"whole", None)])
    assert [r.value for r in committed_output(kafka, out, markers)] == [b"whole"]


def test_tasks_that_end_their_transactions_at_once_all_get_their_batches_committed(
    kafka: str,
) -> None:
    """Four tasks write twelve batches each, their transactions overlapping on every partition:
    every batch is committed (on a broker whose commits are slow, a commit that landed while
    another transaction wrote its end markers once wedged every later commit)."""
    tasks, batches, rows = 4, 12, 20
    out = unique("eos")
    output_topics(kafka, out, partitions=2)
    sink = ExactlyOnce(unique("txn"), f"{out}.markers")

    records = [(out, b"k%d" % i, b"v", None) for i in range(rows)]

    def task(partition: int) -> int:
        config = {"bootstrap.servers": kafka}
        return sum(sink.write(config, partition, b, records) for b in range(batches))

    with ThreadPoolExecutor(tasks) as pool:
        assert list(pool.map(task, range(tasks))) == [batches] * tasks
    written = committed_output(kafka, out, f"{out}.markers")
    assert len(written) == tasks * batches * rows


def test_librdkafkas_own_log_lines_come_as_json_lines_in_a_python_worker(tmp_path) -> None:
    # A Python worker never runs the entry point's logging set-up; a producer that cannot reach
    # its broker makes librdkafka log, and with LOG_FORMAT=json each line must still be JSON.
    script = (
        "from serdes.kafka.produce import DeliveryFailures, producer_config\n"
        "from confluent_kafka import Producer\n"
        "p = Producer(producer_config({'bootstrap.servers': '127.0.0.1:1'}, DeliveryFailures()))\n"
        "p.produce('t', b'v')\n"
        "p.flush(1.5)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "LOG_FORMAT": "json", "LOG_LEVEL": "INFO"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.splitlines()
    assert lines, "librdkafka logged nothing about the unreachable broker"
    logged = [json.loads(line) for line in lines]
    assert {line["logger"] for line in logged} == {"streamjoin.kafka"}
    assert any("127.0.0.1:1" in line["msg"] for line in logged)
