"""What the benchmarks share: arguments, timing one query, reporting, the joins' input."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from app.broker import embedded_broker
from bench.plot import Timeline, from_progress
from tests.kafka_io import create_topics, output_topics, unique


def service_topics(stack: ExitStack, partitions: int = 4) -> tuple[str, Path, str, str, str]:
    """For a benchmark of `streamjoin run`: the broker (KAFKA_BOOTSTRAP_SERVERS or an embedded
    one, stopped with `stack`), a work directory, and fresh left, right and output topics."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        bootstrap = stack.enter_context(embedded_broker()).bootstrap
    work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    left, right, out = unique("left"), unique("right"), unique("out")
    create_topics(bootstrap, [left, right], partitions)
    output_topics(bootstrap, out, partitions)
    return bootstrap, work, left, right, out


def numbers(*defaults: int) -> list[int]:
    """The command line's numbers, each defaulting as given."""
    given = [int(a) for a in sys.argv[1 : 1 + len(defaults)]]
    return given + list(defaults[len(given) :])


def timed(output: DataFrame, checkpoint: Path) -> tuple[float, int, Timeline]:
    """Seconds for one availableNow run, the number of output rows, and the run's timeline
    (`bench.plot`)."""
    counted: dict[int, int] = {}
    start, wall = time.monotonic(), time.time()
    query = (
        output.writeStream.foreachBatch(lambda df, batch: counted.update({batch: df.count()}))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    seconds = time.monotonic() - start
    return seconds, sum(counted.values()), from_progress(query.recentProgress, counted, wall)


def report(name: str, seconds: float, input_rows: int, base_rate: float, output_rows: int) -> None:
    rate = input_rows / seconds
    print(
        f"  {name:18s} {seconds:7.1f}s {rate:10,.0f} rows/s  ratio {rate / base_rate:5.2f}"
        f"  ({output_rows} output rows)"
    )


def as_changelog(
    left: DataFrame,
    right: DataFrame,
    left_type: StructType,
    right_type: StructType,
    left_time: str,
    right_time: str,
) -> DataFrame:
    """Inserts of both sides, ordered by event time, which travels as plain epoch ms."""
    null_left, null_right = F.lit(None).cast(left_type), F.lit(None).cast(right_type)
    return left.select(
        F.lit(0).cast("byte").alias("side"),
        F.lit("+I").alias("op"),
        (F.unix_millis(left_time) * 2).alias("seq"),
        F.unix_millis(left_time).alias("ts"),
        F.struct(*left_type.names).alias("left"),
        null_right.alias("right"),
    ).unionByName(
        right.select(
            F.lit(1).cast("byte").alias("side"),
            F.lit("+I").alias("op"),
            (F.unix_millis(right_time) * 2 + 1).alias("seq"),
            F.unix_millis(right_time).alias("ts"),
            null_left.alias("left"),
            F.struct(*right_type.names).alias("right"),
        )
    )
