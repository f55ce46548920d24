"""Exactly-once output: a micro-batch's records for one partition in one Kafka transaction.

Spark re-runs a micro-batch after a crash when its commit did not reach the checkpoint, although
some of its tasks may already have written their output. Each task therefore writes its records
in one transaction together with a marker of (transactional id, partition, batch id):

- the marker Kafka reads back cheaply is a consumer-group offset committed inside the
  transaction (`send_offsets_to_transaction`): group `<id>-<partition>`, offset `batch + 1` on
  partition 0 of the marker topic. It becomes visible only if the transaction commits;
- the marker a person (or an auditor) reads is a record in the marker topic, keyed by
  `<id>/<partition>` (compact the topic), naming the batch and the attempt that committed it.

Every record also carries a `streamjoin.batch` header naming its attempt,
`<partition>:<batch>:<random token>`: a record counts if the last marker of its partition and
batch names its attempt, so a reader can tell a committed record from one of an aborted attempt
even on a broker that does not hide aborted transactions from `read_committed` consumers (Tansu
is one). The marker used to list the offsets each attempt took, which cost a Python delivery
callback per record (a quarter of producing's time); the attempt token costs nothing per record.

A task that finds its batch already marked writes nothing. On a broker that does not run Apache
Kafka's code (`serdes.kafka.broker_code`), a task reads its marker back after committing, and
fails the batch if it is not there, and the tasks of one host end their transactions one at a
time (`_ending_transactions`); Apache Kafka applies what it acknowledged, and the read-back cost
a task a tenth of a second a batch there (`docs/performance.md`). One transactional id per partition
means a second attempt of the same task fences the first (a zombie cannot commit after it) and
aborts whatever the first left open. The records are gathered before the transaction begins,
so a transaction stays open for as long as producing them takes, not for the whole batch.

A process that dies mid-batch leaves its tasks' transactions open until their ids are initialised
again; `fence` does that for every id at start-up, before any task writes (see there).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from serdes.kafka.client_log import logged
from serdes.kafka.committed_offsets import committed_offsets
from serdes.kafka.produce import (
    RECONNECT_BACKOFF_MS,
    DeliveryError,
    DeliveryFailures,
    OutputRecord,
    produce_all,
    producer_config,
)

# The Spark local property holding the running micro-batch's id (set by MicroBatchExecution).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
BATCH_HEADER = "streamjoin.batch"
TIMEOUT_S = 60.0
CONFIRM_TIMEOUT_S = 15.0
CONFIRM_POLL_S = 0.02
RETRIES = 5
FENCING_THREADS = 16


class TransactionError(RuntimeError):
    """A transaction could not be committed; the micro-batch fails and is re-run."""


@dataclass(frozen=True)
class ExactlyOnce:
    """Where the transactions' markers live and the prefix of their transactional ids;
    `guarded`: the broker is not known to apply every commit it acknowledges (the module doc)."""

    transactional_id: str
    marker_topic: str
    guarded: bool = True

    def committed_batch(self, consumer: Consumer) -> int:
        """The last batch committed by this partition's transactions, -1 if none."""
        [marked] = committed_offsets(consumer, [TopicPartition(self.marker_topic, 0)], TIMEOUT_S)
        return marked.offset - 1 if marked.offset >= 0 else -1

    def _confirm(self, consumer: Consumer, partition: int, batch: int) -> None:
        """Wait until the committed marker shows `batch`, or fail the batch.

        A committed transaction's offsets become visible shortly after the commit returns. Seen
        on Tansu: a commit acknowledged and never applied (see `fence` and
        `_ending_transactions`); failing the batch makes Spark re-run it rather than claim it.
        """
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while self.committed_batch(consumer) < batch:
            if time.monotonic() > deadline:
                raise TransactionError(
                    f"the broker acknowledged batch {batch} of partition {partition} but its "
                    f"marker did not appear within {CONFIRM_TIMEOUT_S:.0f}s; the batch is re-run"
                )
            time.sleep(CONFIRM_POLL_S)

    def fence(self, client_config: dict[str, str], partitions: int) -> None:
        """Abort the transactions a dead process left open, for the ids of tasks 0 to
        `partitions - 1`: called at start-up, before any task writes.

        The task of the re-run batch would abort its own, but only once it runs; until then
        the open transaction holds back others on the same topic-partitions: Kafka hides what
        follows it from `read_committed` consumers until it times out, and Tansu does not even
        apply a later commit (seen: a re-run task waited for its marker while the task that
        would have aborted the open transaction waited for a free slot). Flink's Kafka sink
        aborts lingering transactions at start-up for the same reason.

        The ids are initialised side by side: each is a few round trips to the broker, and
        the service's start waits for all of them (`_ending_transactions` still takes the
        ends one at a time where the broker needs that).
        """
        if partitions <= 0:
            return
        with ThreadPoolExecutor(min(partitions, FENCING_THREADS)) as pool:
            list(
                pool.map(
                    lambda p: self._initialised_producer(client_config, p, DeliveryFailures()),
                    range(partitions),
                )
            )

    @contextlib.contextmanager
    def _ending_transactions(self) -> Iterator[None]:
        """Hold this host's lock on ending the query's transactions (initialising a producer
        ends what its id left open; committing; aborting).

        Tansu (0.6) ends overlapping transactions together: a commit that overlaps one still
        writing its end markers marks that one committed, and the marker it writes next is
        recorded on a committed transaction, which then blocks every later commit on those
        partitions for good (seen: every task's commit acknowledged and left in PrepareCommit).
        Kafka needs no such care (`guarded` is off there).
        """
        if not self.guarded:
            yield
            return
        path = Path(tempfile.gettempdir()) / f"streamjoin-{self.transactional_id}.lock"
        with path.open("a") as lock:  # closing it (or the process dying) releases the lock
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _name(self, partition: int) -> str:
        return f"{self.transactional_id}-{partition}"

    def _initialised_producer(
        self, client_config: dict[str, str], partition: int, failures: DeliveryFailures
    ) -> Producer:
        """A producer with the partition's transactional id, initialised: any earlier
        producer of the id is fenced, and the transaction it left open aborted."""
        producer = Producer(
            {**producer_config(client_config, failures), "transactional.id": self._name(partition)}
        )
        _connected(producer, self.marker_topic)
        with self._ending_transactions():
            _call("initialising transactions", producer.init_transactions, TIMEOUT_S)
        return producer

    def open(self, client_config: dict[str, str], partition: int) -> PartitionTransaction:
        """What writes one batch of `partition`: its producer connected and initialised, its
        marker's reader. Its round trips (about half of a small batch's write on Kafka) need
        no records yet, so a task can make it while its input is still being computed."""
        failures = DeliveryFailures()
        producer = self._initialised_producer(client_config, partition, failures)
        consumer = Consumer(
            logged(
                {
                    "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
                    **client_config,
                    "group.id": self._name(partition),
                    "enable.auto.commit": False,
                }
            )
        )
        return PartitionTransaction(self, partition, producer, consumer, failures)

    def write(
        self, client_config: dict[str, str], partition: int, batch: int, records: list[OutputRecord]
    ) -> bool:
        """Write `records` as batch `batch` of `partition`, unless that batch is marked already;
        return whether they were written."""
        transaction = self.open(client_config, partition)
        try:
            return transaction.write(batch, records)
        finally:
            transaction.close()


@dataclass
class PartitionTransaction:
    """One task's way to write its batch of a partition exactly once (`ExactlyOnce.open`)."""

    owner: ExactlyOnce
    partition: int
    producer: Producer
    consumer: Consumer
    failures: DeliveryFailures

    def write(self, batch: int, records: list[OutputRecord]) -> bool:
        """Write `records` as batch `batch`, unless that batch is marked already; return
        whether they were written."""
        owner, partition, producer = self.owner, self.partition, self.producer
        try:
            if owner.committed_batch(self.consumer) >= batch:
                return False
            producer.begin_transaction()
            attempt = f"{partition}:{batch}:{secrets.token_hex(6)}"
            tag = (BATCH_HEADER, attempt.encode())
            tagged = ((t, k, v, [*h, tag] if h else [tag]) for t, k, v, h in records)
            produce_all(producer, tagged, self.failures, TIMEOUT_S, f"batch {batch}")
            marker = {
                "batch": batch,
                "partition": partition,
                "records": len(records),
                "attempt": attempt,
            }
            producer.produce(
                owner.marker_topic,
                json.dumps(marker).encode(),
                f"{owner.transactional_id}/{partition}".encode(),
            )
            _call(
                "committing the batch marker",
                producer.send_offsets_to_transaction,
                [TopicPartition(owner.marker_topic, 0, batch + 1)],
                self.consumer.consumer_group_metadata(),
                TIMEOUT_S,
            )
            with owner._ending_transactions():
                _call("committing the transaction", producer.commit_transaction, TIMEOUT_S)
            if owner.guarded:
                owner._confirm(self.consumer, partition, batch)
            return True
        except (TransactionError, DeliveryError, KafkaException):
            with owner._ending_transactions():
                _abort(producer)
            raise

    def close(self) -> None:
        self.consumer.close()


def _connected(producer: Producer, topic: str) -> None:
    """Return once `producer` is connected to a broker of the cluster, not only to the
    bootstrap address: `init_transactions` asks such a broker for the coordinator at once.

    The first metadata request goes to the bootstrap connection, which librdkafka then closes
    for the brokers it names; the second waits for a connection to one of those. Without it,
    `init_transactions` found no connected broker whenever the metadata had come back quickly,
    and waited out librdkafka's coordinator timer, other tasks of the host behind it (see
    `_ending_transactions`; measured in `docs/performance.md`)."""
    for _ in range(2):
        producer.list_topics(topic, timeout=TIMEOUT_S)


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
                + (
                    " (does the broker support transactions? OUTPUT_DELIVERY=at-least-once "
                    "works without them)"
                    if what == "initialising transactions"
                    else ""
                )
            ) from None


def _abort(producer: Producer) -> None:
    """Abort an open transaction if the producer still can; a fenced one cannot, and need not."""
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(TIMEOUT_S)
