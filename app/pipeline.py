"""Wiring of the streaming query: both input topics in, one output topic out.

With a join condition (`JOIN_ON`): each input is decoded into typed change rows (records that
cannot be decoded become dead letters), both are joined, the result is encoded and written to
the output topic, dead letters beside it to the dead-letter topic. Without one, both inputs are
forwarded unchanged, each record tagged with a `streamjoin.side` header naming its input.
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructField, StructType

from app.config import Config, InputConfig
from app.join_plan import regular_join
from app.plan import join_spec
from app.projection import project
from ops.metrics import ServiceMetrics
from serdes.decode import decoded_schema, decoder
from serdes.encode import KEY_COLUMN, encode
from serdes.formats import DebeziumJsonFormat, JsonFormat
from serdes.kafka_datasource import NAME, kafka_options
from state.regular_processor import RegularJoinSpec

SIDE_HEADER = "streamjoin.side"
FORMATS = {"json": JsonFormat, "debezium-json": DebeziumJsonFormat}


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


def _header(name: str, value: Column) -> Column:
    return F.struct(F.lit(name).alias("key"), value.cast("binary").alias("value"))


def _add_headers(records: DataFrame, *added: Column) -> Column:
    empty = F.array().cast(records.schema["headers"].dataType)
    return F.concat(F.coalesce(F.col("headers"), empty), F.array(*added))


def forward_both(left: DataFrame, right: DataFrame) -> DataFrame:
    def tagged(records: DataFrame, side: str) -> DataFrame:
        headers = _add_headers(records, _header(SIDE_HEADER, F.lit(side)))
        return records.select("key", "value", headers.alias("headers"))

    return tagged(left, "left").unionByName(tagged(right, "right"))


def row_type(source: InputConfig) -> StructType:
    return StructType([StructField(c.name, c.spark_type) for c in source.schema or ()])


def decode_input(raw: DataFrame, source: InputConfig) -> DataFrame:
    make_format = partial(FORMATS[source.format], source.schema, source.primary_key)
    schema = decoded_schema(row_type(source))
    return raw.mapInArrow(decoder(make_format, row_type(source)), schema)


def dead_letters(decoded: DataFrame, dlq_topic: str) -> DataFrame:
    """Undecodable records as they came, with the error and their coordinates in headers."""
    headers = _add_headers(
        decoded,
        _header("streamjoin.error", F.col("error")),
        _header("streamjoin.error.reason", F.col("reason")),
        _header("streamjoin.source.topic", F.col("topic")),
        _header("streamjoin.source.partition", F.col("partition").cast("string")),
        _header("streamjoin.source.offset", F.col("offset").cast("string")),
    )
    return decoded.where(F.col("error").isNotNull()).select(
        "key", "value", headers.alias("headers"), F.lit(dlq_topic).alias("topic")
    )


def _changes(decoded: DataFrame, side: int, left: StructType, right: StructType) -> DataFrame:
    row = F.col("row")
    return decoded.where(F.col("error").isNull()).select(
        F.lit(side).cast("byte").alias("side"),
        "op",
        "seq",
        (row if side == 0 else F.lit(None).cast(left)).alias("left"),
        (row if side == 1 else F.lit(None).cast(right)).alias("right"),
    )


def _join_key(spec: RegularJoinSpec) -> Column:
    """The output record key: the join key, so all changes of one key share a partition."""
    parts = [
        F.coalesce(F.col(f"L_{a}"), F.col(f"R_{b}")) if spec.projects_right else F.col(f"L_{a}")
        for a, b in spec.equi_keys
    ]
    return F.to_json(F.struct(*parts) if parts else F.struct(F.lit(0))).cast("binary")


def joined_output(spark: SparkSession, config: Config, metrics: ServiceMetrics) -> DataFrame:
    left_type, right_type = row_type(config.left), row_type(config.right)
    decoded_left = decode_input(read_input(spark, config, config.left), config.left)
    decoded_right = decode_input(read_input(spark, config, config.right), config.right)
    changes = _changes(decoded_left, 0, left_type, right_type).unionByName(
        _changes(decoded_right, 1, left_type, right_type)
    )
    spec = join_spec(config)
    joined = regular_join(changes, spec, left_type, right_type, metrics.expired_rows.accumulator)
    joined = joined.withColumn(KEY_COLUMN, _join_key(spec))
    if config.join.select:
        joined = project(joined, config.join.select, keep=[KEY_COLUMN])
    if config.output.key:
        joined = joined.withColumn(
            KEY_COLUMN, F.to_json(F.struct(*config.output.key)).cast("binary")
        )
    output = encode(joined, config.output.encoding).withColumn("topic", F.lit(None).cast("string"))
    dlq = config.output.dlq_topic
    return output.unionByName(dead_letters(decoded_left, dlq)).unionByName(
        dead_letters(decoded_right, dlq)
    )


def start(spark: SparkSession, config: Config, metrics: ServiceMetrics) -> StreamingQuery:
    if config.join.on:
        output = joined_output(spark, config, metrics)
    else:
        left, right = (read_input(spark, config, s) for s in (config.left, config.right))
        output = forward_both(left, right)
    writer = (
        output.writeStream.format(NAME)
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
