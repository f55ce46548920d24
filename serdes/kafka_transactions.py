"""Exactly-once output: a micro-batch's records for one partition in one Kafka transaction.

Spark re-runs a micro-batch after a crash when its commit did not reach the checkpoint, although
some of its tasks may already have written their output. Each task therefore writes its records
in one transaction together with a marker of (transactional id, partition, batch id):

- the marker Kafka reads back cheaply is a consumer-group offset committed inside the
  transaction (`send_offsets_to_transaction`): group `<id>-<partition>`, offset `batch + 1` on
  partition 0 of the marker topic. It becomes visible only if the transaction commits;
- the marker a person (or an auditor) reads is a record in the marker topic, keyed by
  `<id>/<partition>` (compact the topic), naming the batch and the offsets its records took.

Every record also carries a `streamjoin.batch` header, `<partition>:<batch>`: with the marker's
offsets, a reader can tell a committed record from one of an aborted attempt even on a broker
that does not hide aborted transactions from `read_committed` consumers (Tansu is one).

A task that finds its batch already marked writes nothing; a task reads its marker back after
committing, and fails the batch if it is not there. One transactional id per partition
means a second attempt of the same task fences the first (a zombie cannot commit after it) and
aborts whatever the first left open. The records are gathered before the transaction begins,
so a transaction stays open for as long as producing them takes, not for the whole batch.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from serdes.kafka_produce import OutputRecord, produce, producer_config

# The Spark local property holding the running micro-batch's id (set by MicroBatchExecution).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
BATCH_HEADER = "streamjoin.batch"
TIMEOUT_S = 60.0
CONFIRM_TIMEOUT_S = 15.0
CONFIRM_POLL_S = 0.02
RETRIES = 5


class TransactionError(RuntimeError):
    """A transaction could not be committed; the micro-batch fails and is re-run."""


@dataclass(frozen=True)
class ExactlyOnce:
    """Where the transactions' markers live and the prefix of their transactional ids."""

    transactional_id: str
    marker_topic: str

    def committed_batch(self, consumer: Consumer) -> int:
        """The last batch committed by this partition's transactions, -1 if none."""
        [marked] = consumer.committed([TopicPartition(self.marker_topic, 0)], timeout=TIMEOUT_S)
        return marked.offset - 1 if marked.offset >= 0 else -1

    def _confirm(self, consumer: Consumer, partition: int, batch: int) -> None:
        """Wait until the committed marker shows `batch`, or fail the batch.

        A committed transaction's offsets become visible shortly after the commit returns. Seen
        on a broker that restarted mid-transaction: the commit was acknowledged, but nothing of
        the transaction was there; failing the batch makes Spark re-run it.
        """
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while self.committed_batch(consumer) < batch:
            if time.monotonic() > deadline:
                raise TransactionError(
                    f"the broker acknowledged batch {batch} of partition {partition} but its "
                    f"marker did not appear within {CONFIRM_TIMEOUT_S:.0f}s; the batch is re-run"
                )
            time.sleep(CONFIRM_POLL_S)

    def write(
        self, client_config: dict[str, str], partition: int, batch: int, records: list[OutputRecord]
    ) -> bool:
        """Write `records` as batch `batch` of `partition`, unless that batch is marked already;
        return whether they were written."""
        name = f"{self.transactional_id}-{partition}"
        producer = Producer({**producer_config(client_config), "transactional.id": name})
        consumer = Consumer({**client_config, "group.id": name, "enable.auto.commit": False})
        try:
            _call("initialising transactions", producer.init_transactions, TIMEOUT_S)
            if self.committed_batch(consumer) >= batch:
                return False
            producer.begin_transaction()
            tag = (BATCH_HEADER, f"{partition}:{batch}".encode())
            tagged = ((t, k, v, [*(h or ()), tag]) for t, k, v, h in records)
            offsets = _produce_all(producer, tagged)
            marker = {"batch": batch, "partition": partition, "records": len(records),
                      "offsets": offsets}  # fmt: skip
            producer.produce(self.marker_topic, json.dumps(marker).encode(),
                             f"{self.transactional_id}/{partition}".encode())  # fmt: skip
            _call(
                "committing the batch marker",
                producer.send_offsets_to_transaction,
                [TopicPartition(self.marker_topic, 0, batch + 1)],
                consumer.consumer_group_metadata(),
                TIMEOUT_S,
            )
            _call("committing the transaction", producer.commit_transaction, TIMEOUT_S)
            self._confirm(consumer, partition, batch)
            return True
        except (TransactionError, KafkaException):
            _abort(producer)
            raise
        finally:
            consumer.close()


def _produce_all(producer: Producer, records: Iterable[OutputRecord]) -> dict[str, list[int]]:
    """Produce and flush `records`; return the first and last offset per topic-partition."""
    failures: list[KafkaError] = []
    offsets: dict[str, list[int]] = {}

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(error)
            return
        where = f"{message.topic()}/{message.partition()}"
        span = offsets.setdefault(where, [message.offset(), message.offset()])
        span[0], span[1] = min(span[0], message.offset()), max(span[1], message.offset())

    for record in records:
        produce(producer, record, delivered)
    undelivered = producer.flush(TIMEOUT_S)
    if failures or undelivered:
        first = failures[0] if failures else "flush timed out"
        raise TransactionError(f"{len(failures) + undelivered} records not delivered: {first}")
    return offsets


def _call(what: str, method: Callable[..., object], *args: object) -> None:
    """Call a transactional API, retrying (a few times) what Kafka says is retriable."""
    for attempt in range(RETRIES + 1):
        try:
            method(*args)
            return
        except KafkaException as err:
            error: KafkaError = err.args[0]
            if error.retriable() and attempt < RETRIES:
                continue
            raise TransactionError(
                f"{what}: {error.str()}"
                + (" (does the broker support transactions? OUTPUT_DELIVERY=at-least-once "
                   "works without them)" if what == "initialising transactions" else "")
            ) from None  # fmt: skip


def _abort(producer: Producer) -> None:
    """Abort an open transaction if the producer still can; a fenced one cannot, and need not."""
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(TIMEOUT_S)
