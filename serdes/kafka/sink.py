"""Kafka as a PySpark streaming sink: exactly-once by default, at-least-once on request.

Records are keyed and partitioned with the Java client's murmur2 hash, so every change of one
key lands on one partition, in order, and Java consumers agree on where a key lives. A record
that cannot be delivered fails the task and with it the micro-batch; Spark then re-runs the
batch from its checkpointed offsets, so nothing is dropped. Exactly-once (see
`serdes.kafka.transactions`) also makes that re-run write nothing twice; at-least-once (an
idempotent producer, for brokers without transactions) may write a re-run batch's records again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from confluent_kafka import KafkaException, Producer
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from ops.worker.collector import settle_worker
from serdes.kafka.produce import (
    DeliveryFailures,
    OutputRecord,
    produce_all,
    producer_config,
)
from serdes.kafka.transactions import (
    BATCH_ID_PROPERTY,
    ExactlyOnce,
    PartitionTransaction,
    TransactionError,
)

FLUSH_TIMEOUT_S = 120.0

T = TypeVar("T")


def header_pairs(column: pa.ListArray) -> list[list[tuple[str, bytes | None]] | None]:
    """Each row's headers as (key, value) pairs, None for none: from the column's flat key and
    value arrays and its offsets, not a dict per header as `to_pylist` builds (a record's
    `op` header made that a large share of the sink's time)."""
    flat = column.flatten()
    pairs = list(zip(flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
    offsets = column.offsets.to_pylist()
    base = offsets[0]  # a slice's offsets point into its parent's values; `flatten` does not
    valid = column.is_valid().to_pylist()
    return [
        pairs[start - base : end - base] if present and end > start else None
        for start, end, present in zip(offsets[:-1], offsets[1:], valid, strict=True)
    ]


@dataclass
class SinkCommit(WriterCommitMessage):
    records: int  # records this task wrote (0 when its batch had been committed before)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes rows of `key binary, value binary[, headers][, topic]`: to the row's topic, if
    the row names one, else to the sink's topic (the dead letters travel beside the output)."""

    def __init__(
        self, topic: str, client_config: dict[str, str], exactly_once: ExactlyOnce | None
    ) -> None:
        self.topic = topic
        self.client_config = client_config
        self.exactly_once = exactly_once

    def records(self, batches: Iterator[pa.RecordBatch]) -> Iterator[OutputRecord]:
        for batch in batches:
            names, absent = batch.schema.names, [None] * batch.num_rows
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            headers = header_pairs(batch.column("headers")) if "headers" in names else absent
            topics = batch.column("topic").to_pylist() if "topic" in names else absent
            default = self.topic
            for key, value, pairs, topic in zip(keys, values, headers, topics, strict=True):
                yield topic or default, key, value, pairs

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        settle_worker()
        # the transaction's set-up waits on the broker, not on the input: it runs while the
        # stateful operators upstream still compute what this task writes
        opened = None
        if self.exactly_once is not None:
            opened = in_background(
                self.exactly_once.open, self.client_config, TaskContext.get().partitionId()
            )
        try:
            # All of the task's input is consumed even when its batch was written before: the
            # stateful operators upstream commit their state only once their input is exhausted.
            records = list(self.records(iterator))
        except BaseException:
            if opened is not None:
                _close(opened)
            raise
        return SinkCommit(
            write_once(self.client_config, self.exactly_once, records, self.topic, opened=opened)
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records were acknowledged (and committed) in `write`; nothing is left per batch."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A failed batch is re-run from its checkpointed offsets: with exactly-once, its
        uncommitted transactions are aborted then; with at-least-once, its output stays."""


def write_once(
    client_config: dict[str, str],
    exactly_once: ExactlyOnce | None,
    records: list[OutputRecord],
    topic: str,
    writer: int | None = None,
    opened: Future[PartitionTransaction] | None = None,
) -> int:
    """Write one task's records of the running micro-batch: exactly-once as that batch of
    `writer` (the index of a transactional id; the task's partition by default), or
    at-least-once when `exactly_once` is None. Returns how many were written: 0 when the batch
    had been written before. `topic` names where they go, for errors; `opened`, the writer's
    transaction, set up already (`ExactlyOnce.open`)."""
    if exactly_once is None:
        return deliver(client_config, records, topic)
    if not records:
        if opened is not None:
            _close(opened)
        return 0
    task = TaskContext.get()
    batch = int(task.getLocalProperty(BATCH_ID_PROPERTY))
    if opened is None:
        writer = task.partitionId() if writer is None else writer
        written = exactly_once.write(client_config, writer, batch, records)
    else:
        transaction = opened.result()
        try:
            written = transaction.write(batch, records)
        finally:
            transaction.close()
    return len(records) if written else 0


def in_background(make: Callable[..., T], *args: object) -> Future[T]:
    """`make(*args)` run in a thread of its own; its result, or its error, in the future: a
    transaction's set-up (a task's, or the ids fenced at start-up) while other work goes on."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(make(*args))
        except BaseException as error:  # handed to whoever waits for the result
            future.set_exception(error)

    threading.Thread(target=run, name="transaction-set-up", daemon=True).start()
    return future


def _close(opened: Future[PartitionTransaction]) -> None:
    """Close a transaction set up for a task that had nothing to write, or failed, once it is
    set up: a set-up left running could initialise the transactional id after the next task
    of the partition did, and fence that one. Its failure is not the task's: it writes
    nothing with it."""
    with contextlib.suppress(TransactionError, KafkaException):
        opened.result().close()


def deliver(client_config: dict[str, str], records: list[OutputRecord], topic: str) -> int:
    """Produce `records` with an idempotent producer and wait until each is acknowledged."""
    failures = DeliveryFailures()
    producer = Producer(producer_config(client_config, failures))
    produce_all(producer, records, failures, FLUSH_TIMEOUT_S, repr(topic))
    return len(records)
