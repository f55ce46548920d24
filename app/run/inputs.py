"""An input of the query: its Kafka records read and decoded into typed changes under its
watermark, normalized where its join needs it, as one side of the changelog the joins take.

Each input is decoded by the tasks that read its topic (records that cannot be decoded become
dead letters, written by those tasks); its changes carry their event time as a plain number, so
that Spark drops no late row before a join sees it (Flink's interval join keeps them).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from app.config.env import Config, InputConfig, JoinConfig
from app.config.registry import AVRO_FORMATS
from app.plan.planner import StateLayout, input_widening, normalized
from app.plan.pushdown import pushed_filter
from app.run.session import task_slots
from app.run.stateful import run_stateful, side_struct
from serdes.kafka.arrivals import IDLE_WAIT_MS
from serdes.kafka.datasource import NAME, decoding_source, kafka_options
from serdes.kafka.dead_letters import DeadLetterTopic
from serdes.kafka.decode import (
    RECORD_COLUMNS,
    EventTimes,
    Format,
    Tally,
    decoded_schema,
    decoder,
)
from serdes.kafka.event_times import WATERMARK_COLUMN, Peer, marks_group
from serdes.records.avro import AvroConfluentFormat, DebeziumAvroFormat, RegistrySchemas
from serdes.records.formats import DebeziumJsonFormat, JsonFormat, UpsertJsonFormat
from state.columns import BOUND, OP, SEQ, SIDE, TS
from state.spark.frame import WarmState
from state.spark.normalizer import NormalizeOperator

SIDE_HEADER = "streamjoin.side"
DECODERS = {  # the decoder of each input format, in the registry's order
    "json": JsonFormat,
    "avro-confluent": AvroConfluentFormat,
    "debezium-json": DebeziumJsonFormat,
    "debezium-avro-confluent": DebeziumAvroFormat,
    "upsert": UpsertJsonFormat,
}


def read_input(
    spark: SparkSession,
    config: Config,
    source: InputConfig,
    drain_marker: Path | None,
    tasks: int | None,
    wall_clock: bool,
    name: str = NAME,
    marks_group: str | None = None,
    idle_wait_ms: int = IDLE_WAIT_MS,
    peers: list[Peer] | None = None,
) -> DataFrame:
    """The input's Kafka records, from the data source registered as `name`, read by `tasks`
    tasks a micro-batch (one per partition if None); `wall_clock`: an operator of the job runs
    on it (`app.run.operators.on_wall_clock`); with `marks_group`, their watermark column
    filled as `serdes.kafka.event_times` says, with heartbeats carrying the watermark of its
    `peers` while it is wholly idle; back to back, the first input's reader waits up to
    `idle_wait_ms` for a record when a trigger found nothing new (`serdes.kafka.arrivals`)."""
    reader = (
        spark.readStream.format(name)
        .option("topic", source.topic)
        .option("startingOffsets", config.starting_offsets)
        .options(**kafka_options(config.kafka_client_config()))
    )
    if drain_marker is not None:
        reader = reader.option("drainMarker", str(drain_marker))
    if tasks is not None:
        reader = reader.option("readTasks", str(tasks))
    if marks_group is not None:
        reader = reader.option("marksGroup", marks_group)
        # a backlog's micro-batch read by a task per slot, as an input without marks is
        reader = reader.option("backlogTasks", str(task_slots(spark)))
        if config.source_idle_timeout_ms:
            reader = reader.option("idleTimeoutMs", str(config.source_idle_timeout_ms))
            reader = reader.option("peers", json.dumps([asdict(p) for p in peers or ()]))
            reader = reader.option("watermarkDelayMs", str(source.watermark_delay_ms))
    if config.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(config.max_records_per_trigger))
    inputs = config.inputs()
    if config.trigger_interval_ms == 0 and drain_marker is not None:
        # back to back: every reader marks in the service's runtime folder whether it left
        # records unread (a read limit), so that the waiting reader below does not wait then
        reader = reader.option("backlogDir", str(drain_marker.parent))
    if config.trigger_interval_ms == 0 and source == inputs[0]:
        # back to back: the first input's reader waits for a record on any input when a
        # trigger finds nothing new, instead of Spark asking again every 10 ms
        topics = sorted({s.topic for s in inputs})
        reader = reader.option("waitFor", json.dumps(topics)).option("waitMs", str(idle_wait_ms))
    if wall_clock:
        # a restart's first plan is a batch, so timers due while the job was down fire even
        # if no record comes (`KafkaStreamReader`)
        reader = reader.option("wakeAtStart", "true")
        if config.trigger_interval_ms is None:
            # available-now, see `app.run.pipeline.start`
            reader = reader.option("boundedAtStart", "true")
    return reader.load()


def read_decoded(
    spark: SparkSession,
    config: Config,
    source: InputConfig,
    tally: Tally,
    letters: DeadLetterTopic,
    keep_records: bool,
    drain_marker: Path | None,
    tasks: int | None,
    wall_clock: bool,
    partitions: int,
    job: str,
    idle_wait_ms: int = IDLE_WAIT_MS,
    event_times: EventTimes | None = None,
) -> DataFrame:
    """The input's changes as `decode_input` gives them, decoded by the `tasks` that read the
    topic (`serdes.kafka.datasource.decoding_source`), each input under a source name of its
    own; its dead letters written by those tasks; the watermark column filled where the input
    has event time and several `partitions` (`watermarked`), its marks kept for the `job`;
    its largest event time kept in `event_times`."""
    decode = input_decoder(config, source, tally, letters, keep_records, event_times)
    name = f"{NAME}-{source.side}-{next(_SOURCE_NAMES)}"
    spark.dataSource.register(decoding_source(name, decode, decoded_schema(row_type(source))))
    group = marks_group(job, source.side) if partition_marks(config, source, partitions) else None
    peers = [
        Peer(marks_group(job, other.side), other.topic, other.watermark_delay_ms)
        for other in config.inputs()
        if other != source and other.time != "proctime"
    ]
    return read_input(
        spark, config, source, drain_marker, tasks, wall_clock, name, group, idle_wait_ms, peers
    )


def partition_marks(config: Config, source: InputConfig, partitions: int) -> bool:
    """Whether the input's watermark is its partitions' least, the reading tasks filling the
    column it is taken from (`serdes.kafka.event_times`): an event-time input of several
    `partitions`, or of any number when idleness is timed (its heartbeats fill it too)."""
    timed_idle = config.source_idle_timeout_ms > 0
    return source.time != "proctime" and (partitions > 1 or timed_idle)


_SOURCE_NAMES = itertools.count()


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


def input_decoder(
    config: Config | None,
    source: InputConfig,
    tally: Tally | None,
    letters: DeadLetterTopic | None,
    keep_records: bool,
    event_times: EventTimes | None = None,
) -> Callable:
    """The function that decodes the input's Kafka record batches (`serdes.kafka.decode`)."""
    return decoder(
        format_factory(config, source),
        row_type(source),
        source.side,
        source.time,
        tally,
        letters,
        keep_records,
        source.metadata,
        pushed_filter(config, source) if config is not None else None,
        event_times,
    )


def format_factory(config: Config | None, source: InputConfig) -> Callable[[], Format]:
    """Makes the input's decoder where it runs (a Python worker): picklable, no clients yet.
    `config` gives the schema registry of the Avro formats."""
    if source.format in AVRO_FORMATS:
        assert config is not None, "the Avro formats need the registry's configuration"
        registry = RegistrySchemas(
            config.schema_registry_url or "", config.schema_registry_properties
        )
        return partial(DECODERS[source.format], source.schema, source.primary_key, registry)
    if source.fields or source.where:  # a view of a JSON topic's records
        # a record no view can read is dead-lettered by the first view of its topic alone
        views = [s for s in config.inputs() if s.fields or s.where] if config else [source]
        unreadable = next((s for s in views if s.topic == source.topic), source) == source
        return partial(
            JsonFormat, source.schema, source.primary_key, source.fields, source.where, unreadable
        )
    return partial(DECODERS[source.format], source.schema, source.primary_key)


def decode_input(
    raw: DataFrame,
    config: Config | None,
    source: InputConfig,
    tally: Tally | None = None,
    letters: DeadLetterTopic | None = None,
    keep_records: bool = False,
) -> DataFrame:
    """Decoded changes; the records that cannot be decoded written to `letters`, or kept as
    dead-letter rows without it. `tally` counts the dead letters by reason; `keep_records` keeps
    each change's Kafka record beside it."""
    decode = input_decoder(config, source, tally, letters, keep_records)
    return raw.mapInArrow(decode, decoded_schema(row_type(source)))


def normalize_changes(
    changes: DataFrame,
    source: InputConfig,
    buckets: int,
    held_rows: Accumulator[dict] | None = None,
    ttl_ms: int = 0,
    spread: bool = True,
    warm: WarmState | None = None,
) -> DataFrame:
    """The changelog rebuilt per primary key from the last row of each key, the keys grouped
    in `buckets` (see `state.joins.normalize`, and `run_stateful` for `spread`); `held_rows`
    takes the keys held; `ttl_ms` is the job's state retention, which the normalizer keeps as
    the join does."""
    row_schema = row_type(source)
    keys = [(F.col("row")[c], row_schema[c].dataType) for c in source.primary_key]
    normalized_rows = run_stateful(
        changes,
        NormalizeOperator(source.side, ttl_ms, input_widening(source)),
        keys,
        [(F.col("row"), row_schema)],
        buckets,
        out_seq=True,
        out_ts=True,
        held_rows=held_rows,
        spread=spread,
        warm=warm,
    )
    return normalized_rows.select(OP, SEQ, TS, side_struct(0, row_schema).alias("row"))


def watermarked(changes: DataFrame, delay_ms: int, marked: bool) -> DataFrame:
    """`changes` under their input's watermark, as Flink's Kafka source makes it: each
    partition's own (the largest event time it has shown, less `delay_ms`), the input's the
    least of its topic's partitions' (a partition behind the others in event time holds the
    input back, and none of its rows falls behind a watermark the others moved). With one
    partition that is Spark's own, of the event time; where `marked` (`partition_marks`), of
    the column the reading tasks fill with the least of the partitions' largest event times
    (`serdes.kafka.event_times`), whose heartbeat rows are dropped right after. The query's
    watermark is the least of its inputs' (Spark's `min` policy)."""
    if not marked:
        return changes.withWatermark("event_time", f"{delay_ms} milliseconds")
    # A heartbeat has no change. The filter names the watermark's column, so that Spark's
    # optimizer keeps it above the watermark, which would never see the row otherwise.
    watermarked = changes.withWatermark(WATERMARK_COLUMN, f"{delay_ms} milliseconds")
    return watermarked.where(F.col(OP).isNotNull() | F.col(WATERMARK_COLUMN).isNull())


def timed_changes(
    decoded: DataFrame, source: InputConfig, marked: bool = False, records: bool = False
) -> DataFrame:
    """The decoded changes (`op`, `seq`, `ts`, `row`) under the input's watermark (`watermarked`:
    `marked` by the reading tasks), each with its `bound` where the input has an event time
    (`state.columns`: the watermark's column, less its delay, as Spark takes it); with
    `records`, each with its Kafka record's columns (kept by `decode_input`)."""
    good = decoded.where(F.col("error").isNull())
    if source.time != "proctime":
        good = watermarked(good, source.watermark_delay_ms, marked)
    # The event time as a plain number: a column with watermark metadata would make Spark drop
    # rows behind the watermark before the join sees them (Flink's interval join keeps them).
    kept = RECORD_COLUMNS if records else ()
    bound = []
    if source.time != "proctime":  # the input's watermark once this micro-batch is read
        shown = F.unix_millis(F.col(WATERMARK_COLUMN) if marked else F.col("event_time"))
        bound = [(shown - F.lit(source.watermark_delay_ms)).alias(BOUND)]
    return good.select(OP, SEQ, F.unix_millis("event_time").alias(TS), *bound, "row", *kept)


def join_input(
    changes: DataFrame,
    source: InputConfig,
    left: StructType,
    right: StructType,
    join: JoinConfig,
    layout: StateLayout,
    held_rows: Accumulator[dict] | None = None,
    warm: WarmState | None = None,
    bounds: bool = False,
) -> DataFrame:
    """One input's changes, normalized if `join` needs it (its keys in the `layout`'s buckets,
    under the join's state retention), as one side of the unified changelog the joins take
    (`side`, `op`, `seq`, `ts`, `bound` if `bounds`, `left`, `right`)."""
    if normalized(source, join, layout):
        changes = normalize_changes(
            changes,
            source,
            layout.buckets,
            held_rows,
            join.state_ttl_ms,
            layout.spread_buckets,
            warm,
        )
    side = 0 if source.side == "left" else 1
    row = F.col("row")
    return changes.select(
        F.lit(side).cast("byte").alias(SIDE),
        OP,
        SEQ,
        TS,
        *([BOUND] if bounds else []),
        (row if side == 0 else F.lit(None).cast(left)).alias("left"),
        (row if side == 1 else F.lit(None).cast(right)).alias("right"),
    )
