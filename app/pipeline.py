"""Wiring of the streaming query: both input topics in, one output topic out.

Until the join kinds land, both inputs are forwarded unchanged, each record tagged with a
`streamjoin.side` header naming the input it came from.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from app.config import Config, InputConfig
from serdes.kafka_datasource import NAME, kafka_options

SIDE_HEADER = "streamjoin.side"


def read_input(spark: SparkSession, config: Config, source: InputConfig) -> DataFrame:
    reader = (
        spark.readStream.format(NAME)
        .option("topic", source.topic)
        .option("startingOffsets", config.starting_offsets)
        .options(**kafka_options(config.kafka_client_config()))
    )
    if config.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(config.max_records_per_trigger))
    return reader.load()


def _with_side(records: DataFrame, side: str) -> DataFrame:
    tag: Column = F.array(
        F.struct(F.lit(SIDE_HEADER).alias("key"), F.lit(side.encode()).alias("value"))
    )
    headers = F.concat(
        F.coalesce(F.col("headers"), F.array().cast(records.schema["headers"].dataType)), tag
    )
    return records.select("key", "value", headers.alias("headers"))


def forward_both(left: DataFrame, right: DataFrame) -> DataFrame:
    return _with_side(left, "left").unionByName(_with_side(right, "right"))


def start(spark: SparkSession, config: Config) -> StreamingQuery:
    left = read_input(spark, config, config.left)
    right = read_input(spark, config, config.right)
    writer = (
        forward_both(left, right)
        .writeStream.format(NAME)
        .queryName("streamjoin")
        .option("topic", config.output.topic)
        .options(**kafka_options(config.kafka_client_config()))
        .option("checkpointLocation", config.checkpoint_location)
    )
    if config.trigger_interval_ms is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_interval_ms} milliseconds")
    return writer.start()
