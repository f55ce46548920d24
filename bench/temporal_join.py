"""Event-time temporal join throughput (Spark has no temporal join of its own to compare with).

Usage: python bench/temporal_join.py [ORDERS] [PRODUCTS] [BATCHES]

Orders (one per second) look up the price of their product as of their time, in a price history
where every product changes price every ten minutes (an append-only history keyed by product:
the temporal table function form, the same operator as a versioned changelog). Both inputs are
read as streams with watermarks from the same files, cut in BATCHES files per side in time
order, one per micro-batch (`availableNow`). The query runs once to warm up, then is timed;
rows/s counts input rows of both sides.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import as_changelog, numbers, timed
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

from app.run.joins import bucketed_join
from app.run.session import build_session
from bench.plot import draw, plot_path
from state.joins.specs import SideSpec, TemporalJoinSpec

LEFT = StructType(
    [
        StructField("order_id", StringType()),
        StructField("product_id", StringType()),
        StructField("ot", TimestampType()),
    ]
)
RIGHT = StructType(
    [
        StructField("product_id", StringType()),
        StructField("price", IntegerType()),
        StructField("ut", TimestampType()),
    ]
)


def write_inputs(spark: SparkSession, work: Path, orders: int, products: int, batches: int) -> int:
    """Returns the number of price rows written."""
    seconds = orders
    chunk = -(-seconds // batches)
    prices = 0
    for start in range(0, seconds, chunk):
        end = min(seconds, start + chunk)
        spark.range(start, end).coalesce(1).select(
            F.concat(F.lit("o"), F.col("id").cast("string")).alias("order_id"),
            F.concat(F.lit("p"), (F.col("id") % products).cast("string")).alias("product_id"),
            F.timestamp_seconds("id").alias("ot"),
        ).write.mode("append").parquet(str(work / "left"))
        changes = spark.range(start // 600, -(-end // 600)).crossJoin(
            spark.range(products).withColumnRenamed("id", "p")
        )
        changes.coalesce(1).select(
            F.concat(F.lit("p"), F.col("p").cast("string")).alias("product_id"),
            ((F.col("id") * 7 + F.col("p")) % 1000).cast("int").alias("price"),
            F.timestamp_seconds(F.col("id") * 600).alias("ut"),
        ).write.mode("append").parquet(str(work / "right"))
        prices += changes.count()
    return prices


def ours(spark: SparkSession, work: Path) -> DataFrame:
    reader = spark.readStream.option("maxFilesPerTrigger", 1)
    left = reader.schema(LEFT).parquet(str(work / "left")).withWatermark("ot", "1 minute")
    right = reader.schema(RIGHT).parquet(str(work / "right")).withWatermark("ut", "1 minute")
    changes = as_changelog(left, right, LEFT, RIGHT, "ot", "ut")
    spec = TemporalJoinSpec(
        "left",
        "L.product_id = R.product_id",
        SideSpec(tuple(LEFT.names)),
        SideSpec(tuple(RIGHT.names), ("product_id",)),
        "ot",
    )
    return bucketed_join(changes, spec, LEFT, RIGHT)


def main() -> None:
    orders, products, batches = numbers(200_000, 1000, 4)
    spark = build_session("local[2]", {"spark.sql.shuffle.partitions": "4"})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prices = write_inputs(spark, work, orders, products, batches)
        timed(ours(spark, work), work / "warm")
        seconds, output_rows, timeline = timed(ours(spark, work), work / "timed")
        rows = orders + prices
        print(f"{orders} orders, {prices} price rows ({products} products), {batches} batches:")
        print(f"  {seconds:.1f}s, {rows / seconds:,.0f} rows/s ({output_rows} output rows)")
        title = f"temporal join, {orders:,} orders, {products:,} products, {batches} batches"
        print(f"plot: {draw(plot_path('temporal_join'), title, {'streamjoin': timeline})}")
    spark.stop()


if __name__ == "__main__":
    main()
