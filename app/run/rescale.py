"""Growing (or shrinking) a job: its state moved to STATE_PARTITIONS partitions at start.

A checkpoint fixes the partitions its state is in at its first start: Spark records
`spark.sql.shuffle.partitions` in every batch's offsets entry and uses that on restart, whatever
the session says. When STATE_PARTITIONS differs from the checkpoint's, the state is
repartitioned offline before the query starts, by Spark's own offline repartitioning
(SPARK-54345): it rewrites every stateful operator's state into the new partitions, and
records that as a batch of its own that reads nothing, so the next batch starts on the new
partitions. Timers and TTL indexes move with the keys they belong to; what fires them after a
restart is the first batch, which a wall-clock job runs even on quiet topics
(`serdes.kafka.source.KafkaStreamReader`'s `wake`).

Spark repartitions only a checkpoint whose last batch finished. A run that died mid-batch
left one pending, and so may a graceful stop: under a processing-time TTL Spark plans a batch at
every trigger, and a stop as it begins leaves it planned. That batch is run first, on the
partitions it was planned with (`finish`). A run that died mid-repartition left that batch
unfinished: Spark takes it up only with the same partitions, so it is finished first too, then
repartitioned again if STATE_PARTITIONS changed since.

Key buckets are the most partitions a job can use, as Flink's key groups are its max
parallelism: every operator groups by a bucket of its keys (`state.spark.frame`), so partitions
beyond the buckets would hold nothing. A rescale past them is refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyspark.sql import SparkSession

from app.run.checkpoint import (
    last_batch,
    last_committed_batch,
    set_read_tasks,
    shuffle_partitions,
    state_buckets,
)
from app.run.preflight import StartupError
from app.run.session import quiet

log = logging.getLogger(__name__)

# Spark's state reader warns that repartitioning reads every column family, at every operator
REPARTITION_READER = "org.apache.spark.sql.execution.datasources.v2.state.StateSourceOptions"


def rescale(
    spark: SparkSession,
    location: str,
    partitions: int,
    inputs: int,
    finish: Callable[[], None],
) -> bool:
    """Move the state of the checkpoint at `location` to `partitions` partitions if it is in
    another number; whether it moved. `inputs` Kafka inputs share the new read tasks
    (`app.run.checkpoint.read_tasks`); `finish` runs the batch the last run left pending."""
    batch = last_batch(spark, location)
    if batch is None:  # a new checkpoint takes the session's
        return False
    moved = False
    if _abandoned_repartition(spark, location, batch):
        log.info("finishing the state's repartitioning the last run began")
        _repartition(
            spark,
            location,
            shuffle_partitions(spark, location, batch - 1),
            shuffle_partitions(spark, location),
            inputs,
        )
        batch, moved = last_batch(spark, location), True
    before = shuffle_partitions(spark, location)
    if before == partitions:
        return moved
    buckets = state_buckets(spark, location)
    if partitions > buckets:
        raise StartupError(
            f"STATE_PARTITIONS: {partitions}, but the state at CHECKPOINT_LOCATION is hashed "
            f"into {buckets} key buckets (JOIN_STATE_BUCKETS), the most partitions it can use: "
            f"set at most {buckets}, or start a new CHECKPOINT_LOCATION with JOIN_STATE_BUCKETS "
            f"of {partitions} or more"
        )
    if last_committed_batch(spark, location) != batch:
        log.info(
            "running batch %d first, which the last run planned and did not finish, on "
            "its %d partitions",
            batch,
            before,
        )
        finish()
    _repartition(spark, location, before, partitions, inputs)
    return True


def _abandoned_repartition(spark: SparkSession, location: str, batch: int) -> bool:
    """Whether `batch`, the last, is a repartitioning that did not finish: unfinished, and on
    other partitions than the batch before it (a query's own batches never change them)."""
    return (
        batch > 0
        and last_committed_batch(spark, location) != batch
        and shuffle_partitions(spark, location, batch)
        != shuffle_partitions(spark, location, batch - 1)
    )


def _repartition(spark: SparkSession, location: str, before: int, after: int, inputs: int) -> None:
    log.info("repartitioning the state from %d to %d partitions", before, after)
    started = time.monotonic()
    quiet(spark, REPARTITION_READER)
    spark._streamingCheckpointManager.repartition(location, after)  # type: ignore[attr-defined]
    set_read_tasks(spark, location, max(1, after // inputs))
    log.info(
        "state repartitioned from %d to %d partitions in %.1f s; the query goes on from batch %d",
        before,
        after,
        time.monotonic() - started,
        (last_batch(spark, location) or 0) + 1,
    )
