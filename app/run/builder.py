"""The query a plan runs (`app.plan.planner.QueryPlan`): its inputs' changes joined, as Flink
SQL plans the joins, and, for `streamjoin run`, the joined changes as the output topic's
records. `streamjoin run` and `streamjoin replay` build their joins here, so what a replay of
Flink's cases shows holds for `run`: they differ only in where the inputs' changes come from
(Kafka topics, files) and where the joined changes go.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

from app.config.env import Config, InputConfig
from app.config.registry import LOOKUP
from app.plan.planner import QueryPlan, normalized, zoned_columns
from app.plan.projection import filtered, project
from app.run.inputs import (
    join_input,
    normalize_changes,
    partition_marks,
    read_decoded,
    row_type,
    timed_changes,
)
from app.run.joins import (
    as_left_input,
    bucketed_join,
    materialized_upserts,
    multi_way_input,
    multi_way_join,
)
from app.run.operators import idle_wait_ms, on_wall_clock
from app.run.windows import windowed, windowed_type
from ops.metrics import ServiceMetrics
from ops.progress import CAST_FAILURES_OBSERVATION
from serdes.kafka.dead_letters import DeadLetterTopic, LateRowLetters
from serdes.kafka.transactions import ExactlyOnce
from serdes.records.avro_out import as_avro
from serdes.records.encode import KEY_COLUMN, as_json, divert_failed_casts, encode, json_text
from state.columns import OP, SEQ, TS, side_column
from state.joins.specs import JoinSpec, TemporalJoinSpec
from state.spark.frame import WarmState

# An input's changes (`op`, `seq`, `ts`, `row`) under its watermark, by the input
ChangesOf = Callable[[InputConfig], DataFrame]
# Where the `number`-th join (its spec, its left and right row types) sends its late rows
LateLettersOf = Callable[[int, JoinSpec, StructType, StructType], LateRowLetters | None]


@dataclass(frozen=True)
class Writers:
    """The tasks that may write a micro-batch, each under a transactional id of its own index:
    one per state partition (the joined changes, `0 ..`), then one per partition of each input
    (its dead letters, or its forwarded records), from `first[side]` on, then for a lookup join
    one per lookup task (its failed lookups' dead letters), from `first["lookup"]` on, then
    with `LATE_ROWS=dead-letter` one per state partition of each join (its late rows), from
    `first[late_writers(number)]` on. `read`
    tasks read each input's partitions (`app.run.checkpoint.read_tasks`); `partitions` is how
    many each input topic has."""

    count: int
    first: dict[str, int]
    read: int | None
    partitions: dict[str, int]


def late_writers(number: int) -> str:
    """The name in `Writers.first` of the `number`-th join's late-row writers."""
    return f"late{number}"


def late_letters_of(
    config: Config, tasks: Writers, exactly_once: ExactlyOnce | None, tally: Accumulator[dict]
) -> LateLettersOf:
    """Where each event-time join sends its late rows with `LATE_ROWS=dead-letter`: both inputs
    of an interval join, the probe side of a temporal join (a versioned table's late change
    still updates its table: without it, later rows would join a version that is not the
    one valid at their time); never a join's result, which is not late there."""

    def late_letters(
        number: int, spec: JoinSpec, left: StructType, right: StructType
    ) -> LateRowLetters | None:
        if config.late_rows != "dead-letter" or spec.clock != "event":
            return None
        sides = (1,) if number > 1 else (0, 1)
        if isinstance(spec, TemporalJoinSpec):
            sides = tuple(s for s in sides if s == 0)
        if not sides:
            return None
        inputs = (
            (config.left, config.right) if number == 1 else (None, config.chain[number - 2].input)
        )
        letters = DeadLetterTopic(
            config.output.dlq_topic,
            config.kafka_client_config(),
            exactly_once,
            tasks.first[late_writers(number)],
        )
        rows = (left, right)
        return LateRowLetters(
            letters,
            sides,
            tuple(s.side if s else "" for s in inputs),  # type: ignore[arg-type]
            tuple(s.topic if s else "" for s in inputs),  # type: ignore[arg-type]
            tuple(tuple(row.names) for row in rows),  # type: ignore[arg-type]
            frozenset(
                f"{side}.{f.name}"
                for side, row in enumerate(rows)
                for f in row
                if isinstance(f.dataType, TimestampType | TimestampNTZType)
            ),
            tally,
        )

    return late_letters


def warm_state(config: Config, metrics: ServiceMetrics | None) -> WarmState:
    """The state the workers keep between micro-batches (`WARM_STATE_MB`), its reads counted
    where there are metrics."""
    reads = None if metrics is None else metrics.warm_reads.accumulator
    return WarmState(config.warm_state_mb * 2**20, reads)


def joined_changes(
    plan: QueryPlan,
    changes_of: ChangesOf,
    metrics: ServiceMetrics | None,
    lookup_letters: DeadLetterTopic | None = None,
    late_letters: LateLettersOf | None = None,
) -> DataFrame:
    """The changes of the plan's last join (`op`, its `L_`/`R_` columns, `seq` where the
    upsert materializer or a next join takes them): each input's changes (`changes_of`)
    normalized where its join needs it, joined in the order Flink SQL plans the joins, or all
    at once by the multi-way join. `metrics`: what the tasks count (none in a replay);
    `lookup_letters`: where a lookup join's failed lookups go, when they are dead-lettered;
    `late_letters`: where an event-time join's late rows go, when they are dead-lettered."""
    config, last, layout = plan.config, plan.last, plan.layout
    held = None if metrics is None else metrics.held_rows.accumulator
    late = None if metrics is None else metrics.late_rows.accumulator
    fanout = None if metrics is None else metrics.fanout.accumulator
    counted = None if metrics is None else metrics.changes.accumulator  # the last join's output
    warm = warm_state(config, metrics)
    if plan.multi_way is not None:
        inputs = []
        for index, source in enumerate(config.inputs()):
            changes = changes_of(source)
            if normalized(source, last.join, layout):
                changes = normalize_changes(
                    changes,
                    source,
                    plan.multi_way.buckets,
                    held,
                    plan.multi_way.state_ttl_ms,
                    layout.spread_buckets,
                    warm,
                )
            inputs.append(
                multi_way_input(
                    changes,
                    index,
                    plan.multi_way,
                    row_type(source),
                    row_type(last.left),
                    row_type(last.right),
                )
            )
        return multi_way_join(
            functools.reduce(DataFrame.unionByName, inputs),
            plan.multi_way,
            tuple(s.side for s in config.inputs()),
            row_type(last.left),
            row_type(last.right),
            held,
            sequenced=plan.materialized,
            spread=layout.spread_buckets,
            warm=warm,
            fanout=fanout,
            changes_out=counted,
        )
    first = plan.stages[0]
    if first.lookup is not None:
        joined = _looked_up(
            changes_of(config.left),
            first,
            plan.specs[0],
            metrics,
            lookup_letters,
            counted if first is last else None,
        )
    else:
        left_type, right_type = row_type(first.left), row_type(first.right)
        inputs = {source.side: changes_of(source) for source in (first.left, first.right)}
        if first.join.window is not None:  # each row once per window, with its columns
            window = first.join.window
            inputs = {
                s.side: windowed(inputs[s.side], window, row_type(s))
                for s in (first.left, first.right)
            }
            left_type, right_type = windowed_type(left_type), windowed_type(right_type)
        bounds = _fires_in_its_batch(plan)
        sides = [
            join_input(
                inputs[source.side],
                source,
                left_type,
                right_type,
                first.join,
                layout,
                held,
                warm,
                bounds,
            )
            for source in (first.left, first.right)
        ]
        joined = bucketed_join(
            sides[0].unionByName(sides[1]),
            plan.specs[0],
            left_type,
            right_type,
            late,
            held,
            sequenced=plan.materialized or len(plan.stages) > 1,
            spread=layout.spread_buckets,
            warm=warm,
            fanout=fanout,
            late_letters=late_letters and late_letters(1, plan.specs[0], left_type, right_type),
            bounds=bounds,
            changes_out=counted if first is last else None,
        )
    for number, (stage, spec, chained) in enumerate(
        zip(plan.stages[1:], plan.specs[1:], config.chain, strict=True), 2
    ):
        right_type = row_type(stage.right)
        left, left_type = as_left_input(joined, number, right_type, stage.left.time)
        if stage.lookup is not None:
            changes = left.select(OP, SEQ, TS, F.col("left").alias("row"))
            joined = _looked_up(
                changes, stage, spec, metrics, changes_out=counted if stage is last else None
            )
            continue
        right = join_input(
            changes_of(chained.input),
            chained.input,
            left_type,
            right_type,
            stage.join,
            layout,
            held,
            warm,
        )
        joined = bucketed_join(
            left.unionByName(right),
            spec,
            left_type,
            right_type,
            late,
            held,
            sequenced=plan.materialized or stage is not last,
            number=number,
            spread=layout.spread_buckets,
            warm=warm,
            fanout=fanout,
            late_letters=late_letters and late_letters(number, spec, left_type, right_type),
            changes_out=counted if stage is last else None,
        )
    return joined


def _fires_in_its_batch(plan: QueryPlan) -> bool:
    """Whether the job's join fires its timers up to the watermark its micro-batch's rows show
    (`state.spark.frame`): an event-time join of two inputs read straight from their topics,
    alone in the query, so that the watermark Spark gives it is the least of those two inputs'
    and nothing else; not a window join, whose rows are each window's."""
    first = plan.stages[0]
    return (
        len(plan.stages) == 1
        and plan.multi_way is None
        and first.lookup is None
        and first.join.window is None
        and plan.specs[0].clock == "event"
        and not any(normalized(s, first.join, plan.layout) for s in (first.left, first.right))
    )


def _looked_up(
    changes: DataFrame,
    stage: Config,
    spec: JoinSpec,
    metrics: ServiceMetrics | None,
    letters: DeadLetterTopic | None = None,
    changes_out: Accumulator[dict] | None = None,
) -> DataFrame:
    """A lookup join of `changes` (`op`, `seq`, `ts`, `row`): `op`, `seq`, `L_*`, `R_*`, its
    output counted by kind in `changes_out`."""
    from app.run.lookups import looked_up

    assert metrics is not None, "a lookup join runs in the service, which counts its lookups"
    return looked_up(
        changes,
        stage,
        spec,
        metrics.lookups.events.accumulator,
        metrics.lookups.latency,
        letters,
        metrics.dead_letters.accumulator,
        changes_out,
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
    plan: QueryPlan,
    metrics: ServiceMetrics,
    tasks: Writers,
    drain_marker: Path | None,
    exactly_once: ExactlyOnce | None,
    job: str,
) -> DataFrame:
    """`streamjoin run`'s query: its inputs read from Kafka by `tasks`, which write their dead
    letters, joined (`joined_changes`), projected, materialized for an upsert output, encoded as
    the output topic's records (the rows a CAST failed on, with the dead-letter topic's name);
    `job`: whose partition marks the inputs keep (`serdes.kafka.event_times`)."""
    config = plan.config
    dlq, client = config.output.dlq_topic, config.kafka_client_config()
    lookup_letters = (  # failed lookups, when they are dead-lettered
        DeadLetterTopic(dlq, client, exactly_once, tasks.first[LOOKUP])
        if config.lookup is not None and config.lookup.on_error == "dead-letter"
        else None
    )
    wall_clock, idle_wait = on_wall_clock(config), idle_wait_ms(config)

    def changes_of(source: InputConfig) -> DataFrame:
        letters = DeadLetterTopic(dlq, client, exactly_once, tasks.first[source.side])
        decoded = read_decoded(
            spark,
            config,
            source,
            metrics.dead_letters.accumulator,
            letters,
            lookup_letters is not None,
            drain_marker,
            tasks.read,
            wall_clock,
            tasks.partitions[source.topic],
            job,
            idle_wait,
            metrics.event_times.accumulator,
        )
        marked = partition_marks(config, source, tasks.partitions[source.topic])
        return timed_changes(decoded, source, marked, records=lookup_letters is not None)

    late_letters = late_letters_of(config, tasks, exactly_once, metrics.dead_letters.accumulator)
    joined = joined_changes(plan, changes_of, metrics, lookup_letters, late_letters)
    joined = joined.withColumn(KEY_COLUMN, _join_key(plan.specs[-1]))
    if plan.last.join.where:
        joined = filtered(joined, plan.last.join.where)
    if plan.last.join.select:
        keep = [KEY_COLUMN, SEQ] if plan.materialized else [KEY_COLUMN]
        joined = project(joined, plan.last.join.select, keep=keep)
    zoned = zoned_columns(config)  # TIMESTAMP_LTZ columns: written with a Z in JSON
    if config.output.key:
        key = json_text(joined, F.struct(*config.output.key), zoned)
        joined = joined.withColumn(KEY_COLUMN, key.cast("binary"))
    if plan.materialized:
        joined = materialized_upserts(
            joined,
            plan.layout.buckets,
            config.join.state_ttl_ms,
            metrics.held_rows.accumulator,
            plan.layout.spread_buckets,
            warm_state(config, metrics),
        )
    records = encode(joined, config.output.encoding, bool(plan.last.join.where))
    if config.output.format == "avro-confluent":
        records = as_avro(
            records,
            config.schema_registry_url or "",
            config.schema_registry_properties,
            config.output.topic,
        )
    else:
        records = as_json(records, zoned)
    records = divert_failed_casts(records, config.output.dlq_topic)
    if "topic" in records.columns:  # the rows a CAST failed on, counted as dead letters
        records = records.observe(CAST_FAILURES_OBSERVATION, F.count("topic").alias("rows"))
    return records
