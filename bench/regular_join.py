"""Regular-join throughput: streamjoin's transformWithState join vs Spark's native stream join.

Usage: python bench/regular_join.py [ROWS_PER_SIDE] [ROWS_PER_KEY_PER_SIDE]

Both run in one SparkSession over the same input files (read as streams, one micro-batch,
`availableNow`), so Kafka is out of the picture and only the join is compared. Spark's native
stream-stream join is inner-only without watermarks, so every kind of ours is set against its
inner join. Each query runs once to warm up, then is timed; rows/s counts input rows.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import numbers, report, timed
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from app.run.joins import bucketed_join, changelog_schema
from app.run.session import build_session
from bench.plot import draw, plot_path
from state.joins.specs import RegularJoinSpec, SideSpec

LEFT = StructType(
    [
        StructField("order_id", StringType()),
        StructField("product_id", StringType()),
        StructField("qty", IntegerType()),
    ]
)
RIGHT = StructType([StructField("product_id", StringType()), StructField("price", IntegerType())])


def write_inputs(spark: SparkSession, work: Path, rows: int, per_key: int) -> None:
    keys = max(1, rows // per_key)
    base = spark.range(rows)
    left = base.select(
        F.concat(F.lit("o"), F.col("id").cast("string")).alias("order_id"),
        F.concat(F.lit("p"), (F.col("id") % keys).cast("string")).alias("product_id"),
        (F.col("id") % 7).cast("int").alias("qty"),
    )
    right = base.select(
        F.concat(F.lit("p"), (F.col("id") % keys).cast("string")).alias("product_id"),
        (F.col("id") % 100).cast("int").alias("price"),
    )
    left.write.parquet(str(work / "left"))
    right.write.parquet(str(work / "right"))
    null_left, null_right = F.lit(None).cast(LEFT), F.lit(None).cast(RIGHT)
    changes = left.select(
        F.lit(0).cast("byte").alias("side"),
        F.lit("+I").alias("op"),
        F.monotonically_increasing_id().alias("seq"),
        F.struct(*LEFT.names).alias("left"),
        null_right.alias("right"),
    ).unionByName(
        right.select(
            F.lit(1).cast("byte").alias("side"),
            F.lit("+I").alias("op"),
            F.monotonically_increasing_id().alias("seq"),
            null_left.alias("left"),
            F.struct(*RIGHT.names).alias("right"),
        )
    )
    changes.write.parquet(str(work / "changes"))


def ours(spark: SparkSession, work: Path, kind: str) -> DataFrame:
    spec = RegularJoinSpec(
        kind,
        "L.product_id = R.product_id",
        SideSpec(tuple(LEFT.names), ("order_id",)),
        SideSpec(tuple(RIGHT.names)),
    )
    changes = spark.readStream.schema(changelog_schema(LEFT, RIGHT)).parquet(str(work / "changes"))
    return bucketed_join(changes, spec, LEFT, RIGHT)


def native(spark: SparkSession, work: Path) -> DataFrame:
    left = spark.readStream.schema(LEFT).parquet(str(work / "left"))
    right = (
        spark.readStream.schema(RIGHT)
        .parquet(str(work / "right"))
        .withColumnRenamed("product_id", "r_product_id")
    )
    return left.join(right, left.product_id == right.r_product_id, "inner")


def main() -> None:
    rows, per_key = numbers(100_000, 2)
    spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "4"})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_inputs(spark, work, rows, per_key)
        results = {}
        plans = {"native inner": lambda: native(spark, work)}
        plans |= {
            f"streamjoin {k}": (lambda k=k: ours(spark, work, k)) for k in ("inner", "left", "full")
        }
        for name, plan in plans.items():
            timed(plan(), work / f"warm-{name}")
            results[name] = timed(plan(), work / f"ck-{name}")
        base = 2 * rows / results["native inner"][0]
        print(f"{2 * rows} input rows ({rows} per side, {per_key} rows per key per side)")
        for name, (seconds, output_rows, _timeline) in results.items():
            report(name, seconds, 2 * rows, base, output_rows)
        title = f"regular join, {rows:,} rows per side, {per_key} per key"
        written = draw(plot_path("regular_join"), title, {n: r[2] for n, r in results.items()})
        print(f"plot: {written}")
    spark.stop()


if __name__ == "__main__":
    main()
