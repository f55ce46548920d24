"""Interval-join throughput: streamjoin's transformWithState join vs Spark's native one.

Usage: python bench/interval_join.py [ROWS_PER_SIDE] [ROWS_PER_KEY_PER_SIDE] [BATCHES]

Both run in one SparkSession over the same input files, read as streams with the same
watermarks, with the same condition (`L.order_id = R.order_id AND L.ot BETWEEN R.st - INTERVAL
4 HOURS AND R.st`) and join kind, so Kafka is out of the picture and only the join is compared.
The input is cut in BATCHES files per side in time order, one per micro-batch (`availableNow`):
from the second batch on, the watermark moves and both joins evict state. Each query runs once
to warm up, then is timed; rows/s counts input rows.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import as_changelog, numbers, report, timed
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from app.run.joins import bucketed_join
from app.run.session import build_session
from bench.plot import draw, plot_path
from state.joins.specs import IntervalJoinSpec, SideSpec

LEFT = StructType([StructField("order_id", StringType()), StructField("ot", TimestampType())])
RIGHT = StructType(
    [
        StructField("ship_id", StringType()),
        StructField("order_id", StringType()),
        StructField("st", TimestampType()),
    ]
)
ON = "L.order_id = R.order_id AND L.ot BETWEEN R.st - INTERVAL '4' HOUR AND R.st"
WATERMARK = "1 hour"


def write_inputs(spark: SparkSession, work: Path, rows: int, per_key: int, batches: int) -> None:
    """Order i at second i; its shipments up to an hour later (some after the 4 h bound).

    A key's rows are consecutive (order ids i // per_key), so keys come and go over time."""
    chunk = -(-rows // batches)
    for start in range(0, rows, chunk):
        base = spark.range(start, min(rows, start + chunk)).coalesce(1)
        base.select(
            F.concat(F.lit("o"), (F.col("id") / per_key).cast("long").cast("string")).alias(
                "order_id"
            ),
            F.timestamp_seconds(F.col("id")).alias("ot"),
        ).write.mode("append").parquet(str(work / "left"))
        base.select(
            F.concat(F.lit("s"), F.col("id").cast("string")).alias("ship_id"),
            F.concat(F.lit("o"), (F.col("id") / per_key).cast("long").cast("string")).alias(
                "order_id"
            ),
            F.timestamp_seconds(F.col("id") + F.col("id") % 3600).alias("st"),
        ).write.mode("append").parquet(str(work / "right"))


def inputs(spark: SparkSession, work: Path) -> tuple[DataFrame, DataFrame]:
    reader = spark.readStream.option("maxFilesPerTrigger", 1)
    left = reader.schema(LEFT).parquet(str(work / "left"))
    right = reader.schema(RIGHT).parquet(str(work / "right"))
    return left.withWatermark("ot", WATERMARK), right.withWatermark("st", WATERMARK)


def ours(spark: SparkSession, work: Path, kind: str) -> DataFrame:
    """As `streamjoin run` feeds the join: one changelog, event time as plain epoch ms."""
    left, right = inputs(spark, work)
    changes = as_changelog(left, right, LEFT, RIGHT, "ot", "st")
    spec = IntervalJoinSpec(
        kind, ON, SideSpec(tuple(LEFT.names)), SideSpec(tuple(RIGHT.names)), "ot", "st"
    )
    return bucketed_join(changes, spec, LEFT, RIGHT)


def native(spark: SparkSession, work: Path, kind: str) -> DataFrame:
    left, right = inputs(spark, work)
    right = right.withColumnRenamed("order_id", "r_order_id")
    condition = F.expr("order_id = r_order_id AND ot BETWEEN st - INTERVAL 4 HOURS AND st")
    return left.join(right, condition, {"left": "left_outer", "full": "full_outer"}.get(kind, kind))


def main() -> None:
    rows, per_key, batches = numbers(100_000, 2, 1)
    spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "4"})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_inputs(spark, work, rows, per_key, batches)
        print(
            f"{2 * rows} input rows ({rows} per side, {per_key} rows per key per side, "
            f"{batches} micro-batches)"
        )
        timelines = {}
        for kind in ("inner", "left", "full"):
            results = {}
            for name, plan in (("native", native), ("streamjoin", ours)):
                timed(plan(spark, work, kind), work / f"warm-{name}-{kind}")
                results[name] = timed(plan(spark, work, kind), work / f"ck-{name}-{kind}")
            base = 2 * rows / results["native"][0]
            for name, (seconds, output_rows, timeline) in results.items():
                report(f"{kind} {name}", seconds, 2 * rows, base, output_rows)
                timelines[f"{kind} {name}"] = timeline
        title = f"interval join, {rows:,} rows per side, {batches} micro-batches"
        print(f"plot: {draw(plot_path('interval_join'), title, timelines)}")
    spark.stop()


if __name__ == "__main__":
    main()
