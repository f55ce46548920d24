"""Wiring of the streaming query: both input topics in, one output topic out.

With a join (`JOIN_TYPE`, `JOIN_ON`): each input is decoded into typed change rows (records that
cannot be decoded become dead letters), both are joined, the result is encoded and written to
the output topic, dead letters beside it to the dead-letter topic. With `JOIN_TYPE=forward`,
both inputs are forwarded unchanged, each record tagged with a `streamjoin.side` header naming
its input.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from confluent_kafka.admin import AdminClient
from pyspark import Accumulator
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructField, StructType

from app.config.env import Config, InputConfig, JoinConfig
from app.config.registry import AVRO_FORMATS, FORWARD, LOOKUP
from app.plan.planner import (
    JoinSpec,
    join_spec,
    join_stages,
    multi_way_spec,
    normalized,
    upsert_materialized,
)
from app.run.checkpoint import (
    SPREAD_BUCKETS,
    VERSIONS_AS_IS,
    HeldRowsRecord,
    check_state_record,
    job_id,
    normalizes_versions,
    read_tasks,
    shuffle_partitions,
    spreads_buckets,
    state_buckets,
)
from app.run.joins import (
    as_left_input,
    bucketed_join,
    join_label,
    join_operator,
    materialized_upserts,
    multi_way_input,
    multi_way_join,
)
from app.run.projection import project
from app.run.rescale import rescale
from app.run.session import quieted
from app.run.starting import resolved_starts
from app.run.stateful import run_stateful, side_struct
from ops.metrics import ServiceMetrics
from ops.progress import CAST_FAILURES_OBSERVATION, CHANGES_OBSERVATION, EVENT_TIME_OBSERVATION
from ops.state_report import PlannedOperator
from serdes.kafka.datasource import NAME, decoding_source, kafka_options
from serdes.kafka.dead_letters import DeadLetterTopic
from serdes.kafka.event_times import WATERMARK_COLUMN, marks_group
from serdes.kafka.transactions import ExactlyOnce
from serdes.records.avro import AvroConfluentFormat, DebeziumAvroFormat, RegistrySchemas
from serdes.records.avro_out import as_avro
from serdes.records.decode import RECORD_COLUMNS, Format, Tally, decoded_schema, decoder
from serdes.records.encode import KEY_COLUMN, as_json, divert_failed_casts, encode
from serdes.records.formats import DebeziumJsonFormat, JsonFormat, UpsertJsonFormat
from state.changes import RowKind
from state.joins.specs import MultiJoinSpec
from state.spark.columns import side_column
from state.spark.normalizer import NormalizeOperator
from state.spark.regular import MultiJoinOperator
from state.spark.upsert import UpsertMaterializeOperator

SIDE_HEADER = "streamjoin.side"
TOPICS_TIMEOUT_S = 30.0
FORMATS = {  # the decoder of each input format, in the registry's order
    "json": JsonFormat,
    "avro-confluent": AvroConfluentFormat,
    "debezium-json": DebeziumJsonFormat,
    "debezium-avro-confluent": DebeziumAvroFormat,
    "upsert": UpsertJsonFormat,
}


def read_input(spark: SparkSession, config: Config, source: InputConfig,
               drain_marker: Path | None, tasks: int | None, name: str = NAME,
               marks_group: str | None = None) -> DataFrame:  # fmt: skip
    """The input's Kafka records, from the data source registered as `name`, read by `tasks`
    tasks a micro-batch (one per partition if None); with `marks_group`, their watermark
    column filled as `serdes.kafka.event_times` says."""
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
    if config.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(config.max_records_per_trigger))
    if on_wall_clock(config):
        # a restart's first plan is a batch, so timers due while the job was down fire even
        # if no record comes (`KafkaStreamReader`)
        reader = reader.option("wakeAtStart", "true")
        if config.trigger_interval_ms is None:
            reader = reader.option("boundedAtStart", "true")  # available-now, see `start`
    return reader.load()


def read_decoded(spark: SparkSession, config: Config, source: InputConfig, tally: Tally,
                 letters: DeadLetterTopic, keep_records: bool, drain_marker: Path | None,
                 tasks: Writers, job: str) -> DataFrame:  # fmt: skip
    """The input's changes as `decode_input` gives them, decoded by the tasks that read the
    topic (`serdes.kafka.datasource.decoding_source`), each input under a source name of its
    own; its dead letters written by those tasks; the watermark column filled where the input
    has event time and several partitions (`watermarked`), its marks kept for the `job`."""
    make_format = format_factory(config, source)
    decode = decoder(make_format, row_type(source), source.side, source.time, tally, letters,
                     keep_records, source.metadata)  # fmt: skip
    name = f"{NAME}-{source.side}-{next(_SOURCE_NAMES)}"
    spark.dataSource.register(decoding_source(name, decode, decoded_schema(row_type(source))))
    per_partition = source.time != "proctime" and tasks.partitions[source.topic] > 1
    group = marks_group(job, source.side) if per_partition else None
    return read_input(spark, config, source, drain_marker, tasks.read, name, group)


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


def format_factory(config: Config | None, source: InputConfig) -> Callable[[], Format]:
    """Makes the input's decoder where it runs (a Python worker): picklable, no clients yet.
    `config` gives the schema registry of the Avro formats."""
    if source.format in AVRO_FORMATS:
        assert config is not None, "the Avro formats need the registry's configuration"
        registry = RegistrySchemas(
            config.schema_registry_url or "", config.schema_registry_properties
        )
        return partial(FORMATS[source.format], source.schema, source.primary_key, registry)
    return partial(FORMATS[source.format], source.schema, source.primary_key)


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
    make_format = format_factory(config, source)
    decode = decoder(make_format, row_type(source), source.side, source.time, tally, letters,
                     keep_records, source.metadata)  # fmt: skip
    return raw.mapInArrow(decode, decoded_schema(row_type(source)))


def normalize_changes(changes: DataFrame, source: InputConfig, buckets: int,
                      held_rows: Accumulator[dict] | None = None,
                      ttl_ms: int = 0, spread: bool = True) -> DataFrame:  # fmt: skip
    """The changelog rebuilt per primary key from the last row of each key, the keys grouped
    in `buckets` (see `state.joins.normalize`, and `run_stateful` for `spread`); `held_rows`
    takes the keys held; `ttl_ms` is the job's state retention, which the normalizer keeps as
    the join does."""
    row_schema = row_type(source)
    keys = [(F.col("row")[c], row_schema[c].dataType) for c in source.primary_key]
    normalized_rows = run_stateful(
        changes, NormalizeOperator(source.side, ttl_ms), keys, [(F.col("row"), row_schema)],
        buckets, out_seq=True, out_ts=True, held_rows=held_rows, spread=spread,
    )  # fmt: skip
    return normalized_rows.select("op", "seq", "ts", side_struct(0, row_schema).alias("row"))


def watermarked(changes: DataFrame, delay_ms: int, partitions: int) -> DataFrame:
    """`changes` under their input's watermark, as Flink's Kafka source makes it: each
    partition's own (the largest event time it has shown, less `delay_ms`), the input's the
    least of its topic's `partitions`' (a partition behind the others in event time holds the
    input back, and none of its rows falls behind a watermark the others moved). With one
    partition that is Spark's own, of the event time; with several, of the column the reading
    tasks fill with the least of the partitions' largest event times (`serdes.kafka.
    event_times`). The query's watermark is the least of its inputs' (Spark's `min` policy)."""
    column = "event_time" if partitions <= 1 else WATERMARK_COLUMN
    return changes.withWatermark(column, f"{delay_ms} milliseconds")


def timed_changes(decoded: DataFrame, source: InputConfig, partitions: int = 1,
                  records: bool = False) -> DataFrame:  # fmt: skip
    """The decoded changes (`op`, `seq`, `ts`, `row`) under the input's watermark (`watermarked`,
    over its topic's `partitions`); with `records`, each with its Kafka record's columns (kept
    by `decode_input`)."""
    good = decoded.where(F.col("error").isNull())
    if source.time != "proctime":
        good = watermarked(good, source.watermark_delay_ms, partitions).observe(
            EVENT_TIME_OBSERVATION.format(side=source.side),
            F.max(F.unix_millis("event_time")).alias("max_ms"),
        )
    # The event time as a plain number: a column with watermark metadata would make Spark drop
    # rows behind the watermark before the join sees them (Flink's interval join keeps them).
    kept = RECORD_COLUMNS if records else ()
    return good.select("op", "seq", F.unix_millis("event_time").alias("ts"), "row", *kept)


def join_input(changes: DataFrame, source: InputConfig, left: StructType, right: StructType,
               join: JoinConfig, buckets: int,
               held_rows: Accumulator[dict] | None = None) -> DataFrame:  # fmt: skip
    """One input's changes, normalized if `join` needs it (its keys in `buckets`, under the
    join's state retention), as one side of the unified changelog the joins take (`side`,
    `op`, `seq`, `ts`, `left`, `right`)."""
    if normalized(source, join):
        changes = normalize_changes(changes, source, buckets, held_rows, join.state_ttl_ms,
                                    join.spread_buckets)  # fmt: skip
    side = 0 if source.side == "left" else 1
    row = F.col("row")
    return changes.select(
        F.lit(side).cast("byte").alias("side"),
        "op",
        "seq",
        "ts",
        (row if side == 0 else F.lit(None).cast(left)).alias("left"),
        (row if side == 1 else F.lit(None).cast(right)).alias("right"),
    )


def _join_key(spec: JoinSpec) -> Column:
    """The output record key: the join key, so all changes of one key share a partition."""
    parts = [
        F.coalesce(F.col(side_column(0, a)), F.col(side_column(1, b)))
        if spec.projects_right
        else F.col(side_column(0, a))
        for a, b in spec.equi_keys
    ]
    return F.to_json(F.struct(*parts) if parts else F.struct(F.lit(0))).cast("binary")


def joined_output(
    spark: SparkSession,
    config: Config,
    metrics: ServiceMetrics,
    tasks: Writers,
    drain_marker: Path | None,
    job: str,
) -> DataFrame:
    stages = join_stages(config)
    first, last = stages[0], stages[-1]
    exactly_once = _exactly_once(config)
    lookup_letters = (  # failed lookups, when they are dead-lettered
        DeadLetterTopic(config.output.dlq_topic, config.kafka_client_config(), exactly_once,
                        tasks.first[LOOKUP])
        if config.lookup is not None and config.lookup.on_error == "dead-letter" else None
    )  # fmt: skip

    def changes_of(source: InputConfig) -> DataFrame:
        letters = DeadLetterTopic(config.output.dlq_topic, config.kafka_client_config(),
                                  exactly_once, tasks.first[source.side])  # fmt: skip
        decoded = read_decoded(spark, config, source, metrics.dead_letters.accumulator, letters,
                               lookup_letters is not None, drain_marker, tasks, job)  # fmt: skip
        return timed_changes(
            decoded, source, tasks.partitions[source.topic], records=lookup_letters is not None
        )

    materialize = upsert_materialized(config)
    multi_way = multi_way_spec(config)
    if multi_way is not None:
        inputs = [_multi_way_input(changes_of(s), i, s, multi_way, last, metrics)
                  for i, s in enumerate(config.inputs())]  # fmt: skip
        joined = multi_way_join(
            functools.reduce(DataFrame.unionByName, inputs), multi_way,
            tuple(s.side for s in config.inputs()), row_type(last.left), row_type(last.right),
            metrics.held_rows.accumulator, sequenced=materialize,
            spread=config.join.spread_buckets,
        )  # fmt: skip
    elif first.lookup is not None:
        joined = _looked_up(changes_of(config.left), first, metrics, lookup_letters)
    else:
        joined = _first_join(first, [changes_of(config.left), changes_of(config.right)],
                             metrics, sequenced=materialize or len(stages) > 1)  # fmt: skip
    chained_stages = [] if multi_way is not None else list(zip(stages[1:], config.chain,
                                                               strict=True))  # fmt: skip
    for number, (stage, chained) in enumerate(chained_stages, 2):
        right_type = row_type(stage.right)
        left, left_type = as_left_input(joined, number, right_type, stage.left.time)
        if stage.lookup is not None:
            changes = left.select("op", "seq", "ts", F.col("left").alias("row"))
            joined = _looked_up(changes, stage, metrics)
            continue
        right = join_input(
            changes_of(chained.input),
            chained.input,
            left_type,
            right_type,
            stage.join,
            stage.join.state_buckets,
            metrics.held_rows.accumulator,
        )
        joined = bucketed_join(left.unionByName(right), join_spec(stage), left_type, right_type,
                               metrics.late_rows.accumulator, metrics.held_rows.accumulator,
                               sequenced=materialize or stage is not last,
                               number=number, spread=stage.join.spread_buckets)  # fmt: skip
    joined = joined.observe(
        CHANGES_OBSERVATION,
        *[F.sum((F.col("op") == kind).cast("long")).alias(kind) for kind in RowKind.ALL],
    )
    joined = joined.withColumn(KEY_COLUMN, _join_key(join_spec(last)))
    if last.join.select:
        joined = project(joined, last.join.select,
                         keep=[KEY_COLUMN, "seq"] if materialize else [KEY_COLUMN])  # fmt: skip
    if config.output.key:
        joined = joined.withColumn(
            KEY_COLUMN, F.to_json(F.struct(*config.output.key)).cast("binary")
        )
    if materialize:
        joined = materialized_upserts(
            joined, config.join.state_buckets, config.join.state_ttl_ms,
            metrics.held_rows.accumulator, config.join.spread_buckets,
        )  # fmt: skip
    records = encode(joined, config.output.encoding)
    if config.output.format == "avro-confluent":
        records = as_avro(records, config.schema_registry_url or "",
                          config.schema_registry_properties, config.output.topic)  # fmt: skip
    else:
        records = as_json(records)
    records = divert_failed_casts(records, config.output.dlq_topic)
    if "topic" in records.columns:  # the rows a CAST failed on, counted as dead letters
        records = records.observe(CAST_FAILURES_OBSERVATION, F.count("topic").alias("rows"))
    return records


def _looked_up(changes: DataFrame, stage: Config, metrics: ServiceMetrics,
               letters: DeadLetterTopic | None = None) -> DataFrame:  # fmt: skip
    """A lookup join of `changes` (`op`, `seq`, `ts`, `row`): `op`, `seq`, `L_*`, `R_*`."""
    from app.run.lookup import looked_up

    return looked_up(
        changes,
        stage,
        join_spec(stage),
        metrics.lookups.events.accumulator,
        metrics.lookups.latency,
        letters,
        metrics.dead_letters.accumulator,
    )


def _multi_way_input(changes: DataFrame, index: int, source: InputConfig, spec: MultiJoinSpec,
                     last: Config, metrics: ServiceMetrics) -> DataFrame:  # fmt: skip
    """One input of the multi-way join: normalized if it needs it, as the chain's joins would
    have it, then placed as `multi_way_input` says."""
    if normalized(source, last.join):
        changes = normalize_changes(changes, source, spec.buckets,
                                    metrics.held_rows.accumulator, spec.state_ttl_ms,
                                    last.join.spread_buckets)  # fmt: skip
    return multi_way_input(changes, index, spec, row_type(source), row_type(last.left),
                           row_type(last.right))  # fmt: skip


def _first_join(config: Config, sides: list[DataFrame], metrics: ServiceMetrics,
                sequenced: bool) -> DataFrame:  # fmt: skip
    """The first join of the job, of its two first inputs' changes."""
    left_type, right_type = row_type(config.left), row_type(config.right)
    left_changes, right_changes = (
        join_input(changes, source, left_type, right_type, config.join,
                   config.join.state_buckets, metrics.held_rows.accumulator)
        for changes, source in zip(sides, (config.left, config.right), strict=True)
    )  # fmt: skip
    return bucketed_join(left_changes.unionByName(right_changes), join_spec(config), left_type,
                         right_type, metrics.late_rows.accumulator,
                         metrics.held_rows.accumulator, sequenced=sequenced,
                         spread=config.join.spread_buckets)  # fmt: skip


def on_wall_clock(config: Config) -> bool:
    """Whether an operator of the job runs on the wall clock (a state TTL, a processing-time
    join): Spark then plans a batch at every trigger, new input or not, so its timers fire."""
    return any(p.operator.clock == "processing" for p in stateful_operators(config))


def stateful_operators(config: Config) -> list[PlannedOperator]:
    """The stateful operators `joined_output` builds, in the order Spark numbers them (its
    `operatorId`, from the sink down: the upsert materializer, then each join before what it
    reads, its left input's operators (the join before it, or a normalizer) before its right
    input's)."""
    if config.join.type == FORWARD:
        return []
    stages = join_stages(config)
    planned = []
    if upsert_materialized(config):
        planned.append(PlannedOperator("upsert", UpsertMaterializeOperator(
            config.join.state_ttl_ms), {"output": StructType()}))  # fmt: skip
    multi_way = multi_way_spec(config)
    if multi_way is None:
        return planned + _join_operators(config, stages, len(stages))
    sides = {source.side: row_type(source) for source in config.inputs()}
    operator = MultiJoinOperator(multi_way, tuple(sides))
    planned.append(PlannedOperator("join", operator, sides))
    return planned + _normalizers(config, [(s, sides[s.side]) for s in config.inputs()],
                                  stages[-1].join)  # fmt: skip


def _join_operators(config: Config, stages: list[Config], number: int) -> list[PlannedOperator]:
    """The `number`-th join's operators (`stateful_operators`); a lookup join has none."""
    stage = stages[number - 1]
    if stage.lookup is not None:  # it keeps no state
        return _join_operators(config, stages, number - 1) if number > 1 else []
    types = {"left": row_type(stage.left), "right": row_type(stage.right)}
    operator = join_operator(join_spec(stage), number)
    planned = [PlannedOperator(join_label(number), operator, types)]
    if number > 1:
        planned += _join_operators(config, stages, number - 1)
        inputs = [(config.chain[number - 2].input, types["right"])]
    else:
        inputs = [(config.left, types["left"]), (config.right, types["right"])]
    return planned + _normalizers(config, inputs, stage.join)


def _normalizers(config: Config, inputs: list[tuple[InputConfig, StructType]],
                 join: JoinConfig) -> list[PlannedOperator]:  # fmt: skip
    """The changelog normalizers of those `inputs` (each with its row type) that `join` needs
    normalized, in the order given."""
    return [PlannedOperator("normalizer", NormalizeOperator(source.side,
                                                            config.join.state_ttl_ms),
                            {source.side: row})
            for source, row in inputs if normalized(source, join)]  # fmt: skip


@dataclass(frozen=True)
class Writers:
    """The tasks that may write a micro-batch, each under a transactional id of its own index:
    one per state partition (the joined changes, `0 ..`), then one per partition of each input
    (its dead letters, or its forwarded records), from `first[side]` on, then for a lookup join
    one per lookup task (its failed lookups' dead letters), from `first["lookup"]` on. `read`
    tasks read each input's partitions (`app.run.checkpoint.read_tasks`); `partitions` is how
    many each input topic has."""

    count: int
    first: dict[str, int]
    read: int | None
    partitions: dict[str, int]


def writers(spark: SparkSession, config: Config) -> Writers:
    client_config = config.kafka_client_config()
    topics = AdminClient(client_config).list_topics(timeout=TOPICS_TIMEOUT_S).topics
    partitions = {s.topic: len(topics[s.topic].partitions) for s in config.inputs()}
    count = shuffle_partitions(spark, config.checkpoint_location)
    first = {}
    for source in config.inputs():
        first[source.side] = count
        count += partitions[source.topic]
    if config.lookup is not None:  # lookup tasks: the shuffle's partitions, or the input's
        first[LOOKUP] = count
        count += max(shuffle_partitions(spark, config.checkpoint_location),
                     len(topics[config.left.topic].partitions))  # fmt: skip
    return Writers(count, first, read_tasks(spark, config.checkpoint_location), partitions)


def state_settings(config: Config) -> dict[str, object]:
    """The variables that decide how a checkpoint's state is laid out: its join, the buckets
    the bucketed processors hash their keys into, and the key of an upsert materializer."""
    if config.join.type == FORWARD:
        return {}
    # the upsert materializer's state is keyed by the output key
    materializer_key = ",".join(config.output.key) if upsert_materialized(config) else None
    settings = {"JOIN_TYPE": config.join.type, "JOIN_STATE_BUCKETS": config.join.state_buckets,
                "OUTPUT_KEY": materializer_key,
                # the joins after the first, each an operator of its own or all one (SQL's only)
                "JOIN_CHAIN": ("multi-way " if multi_way_spec(config) else "")
                + " ".join(f"{c.join.type}:{c.input.topic}" for c in config.chain)
                if config.chain else None}  # fmt: skip
    settings |= SPREAD_BUCKETS if config.join.spread_buckets else {}
    return settings if config.join.versions_normalized else settings | VERSIONS_AS_IS


def state_meaning(config: Config) -> dict[str, str]:
    """What the rows a checkpoint's state holds mean, by what decides it: each stateful join's
    kind and keys (the columns its `ON` equates), each input's unique key and the columns its
    rows hold, with their types. A restart that changes any of it is refused before anything
    is read (`check_state_record`): the state would be read as what it is not."""
    if not stateful_operators(config):
        return {}
    meaning = {}
    for number, stage in enumerate(join_stages(config), 1):
        if stage.lookup is not None:  # it keeps no state
            continue
        of = "" if number == 1 else f" of join {number}"
        keys = join_spec(stage).equi_keys
        meaning[f"JOIN_KIND{of}"] = stage.join.kind
        meaning[f"JOIN_ON's keys{of}"] = " AND ".join(f"L.{a} = R.{b}" for a, b in keys)
    for source in config.inputs():
        side = source.side.upper()
        meaning[f"{side}_PRIMARY_KEY"] = ",".join(source.primary_key)
        meaning[f"{side}_SCHEMA"] = ", ".join(
            f"{c.name} {c.spark_type.simpleString()}" for c in source.schema or ()
        )
    return meaning


def _exactly_once(config: Config) -> ExactlyOnce | None:
    if config.output.delivery != "exactly-once":
        return None
    return ExactlyOnce(config.output.transactional_id, config.output.marker_topic)


# An available-now job on the wall clock: how often it plans a batch (`start`); longer than a
# batch that reads nothing, so that the stop once dry finds a gap between two
DRY_POLL_MS = 1000

# Spark warns as it takes a restarted query's settings from its checkpoint over the session's
# (the checkpoint's partitions over STATE_PARTITIONS, on purpose), and that a once trigger reads
# what the batch was planned with, whatever the read limit
RESTORED_CONF = "org.apache.spark.sql.execution.streaming.checkpointing.OffsetSeqMetadata"
ONCE_TRIGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"


def _finish_pending(spark: SparkSession, config: Config, metrics: ServiceMetrics) -> None:
    """Run the batch the last run planned and did not finish, and nothing after it (Spark's
    once trigger: its available-now would go on running a batch at every trigger for a
    processing-time TTL), on the partitions it was planned with."""
    pending = replace(config, state_partitions=None)
    with quieted(spark, RESTORED_CONF), quieted(spark, ONCE_TRIGGER):
        start(spark, pending, metrics, pending_only=True).awaitTermination()


def start(
    spark: SparkSession,
    config: Config,
    metrics: ServiceMetrics,
    drain_marker: Path | None = None,
    held: HeldRowsRecord | None = None,
    pending_only: bool = False,
) -> StreamingQuery:
    """Start the query; once `drain_marker` exists, the sources offer no more records; `held`
    gives what the state held when the last run stopped (`streamjoin_state_rows`);
    `pending_only`: run only the batch the last run left unfinished, then end."""
    if config.join.state_buckets is None:
        buckets = state_buckets(spark, config.checkpoint_location)
        config = replace(config, join=replace(config.join, state_buckets=buckets))
    if normalizes_versions(spark, config.checkpoint_location):
        config = replace(config, join=replace(config.join, versions_normalized=True))
    if not spreads_buckets(spark, config.checkpoint_location):
        config = replace(config, join=replace(config.join, spread_buckets=False))
    config = resolved_starts(spark, config, [s.topic for s in config.inputs()])
    check_state_record(spark, config.checkpoint_location, state_settings(config),
                       len(config.inputs()), state_meaning(config))  # fmt: skip
    tasks = writers(spark, config)  # after the record: it says how many tasks read
    fenced = tasks.count  # ids that may have written: the old partitions' too after a rescale
    if (
        config.state_partitions is not None
        and stateful_operators(config)
        and rescale(spark, config.checkpoint_location, config.state_partitions,
                    len(config.inputs()), partial(_finish_pending, spark, config, metrics))
    ):  # fmt: skip
        tasks = writers(spark, config)
    if held is not None:
        metrics.held_rows.accumulator.add(held.restored())
    if config.join.type != FORWARD:
        output = joined_output(
            spark, config, metrics, tasks, drain_marker, job_id(spark, config.checkpoint_location)
        )
    else:
        left, right = (
            read_input(spark, config, s, drain_marker, tasks.read)
            for s in (config.left, config.right)
        )
        output = forward_both(left, right)
    writer = (
        output.writeStream.format(NAME)
        .queryName("streamjoin")
        .option("topic", config.output.topic)
        .options(**kafka_options(config.kafka_client_config()))
        .option("checkpointLocation", config.checkpoint_location)
    )
    exactly_once = _exactly_once(config)
    if exactly_once is not None:
        # Abort what an earlier run left open, for every task that may write a micro-batch.
        exactly_once.fence(config.kafka_client_config(), max(tasks.count, fenced))
        writer = writer.option("transactionalId", exactly_once.transactional_id).option(
            "markerTopic", exactly_once.marker_topic
        )
    if pending_only:
        writer = writer.trigger(once=True)
    elif config.trigger_interval_ms is None and on_wall_clock(config):
        # Spark's available-now would plan a batch after the last for ever, for the wall-clock
        # timers: the sources stop at what they held at the start, and the service stops the
        # query once a batch had nothing new (`app.run.lifecycle.supervise`), between batches
        writer = writer.trigger(processingTime=f"{DRY_POLL_MS} milliseconds")
    elif config.trigger_interval_ms is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_interval_ms} milliseconds")
    return writer.start()
