"""The start of `streamjoin run`: a checkpoint's settings resolved and checked, the query built
(`app.run.builder`, or both inputs forwarded with `JOIN_TYPE=forward`) and written to the output
topic, exactly once where asked, under the trigger the configuration gives.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from functools import partial
from pathlib import Path

from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from app.config.env import Config
from app.config.registry import FORWARD, LOOKUP
from app.plan.planner import QueryPlan, query_plan
from app.plan.pushdown import pushed_filter
from app.run.builder import Writers, joined_output, late_writers
from app.run.checkpoint import (
    SPREAD_BUCKETS,
    VERSIONS_AS_IS,
    HeldRowsRecord,
    check_state_record,
    job_id,
    last_batch,
    read_tasks,
    shuffle_partitions,
    state_layout,
    state_record,
)
from app.run.evolution import column_changes, evolved, grown_record, oldest_rows, schema_text
from app.run.inputs import forward_both, read_input
from app.run.operators import on_wall_clock, stateful_operators
from app.run.rescale import rescale
from app.run.session import quieted
from app.run.starting import resolved_starts
from ops.metrics import ServiceMetrics
from serdes.kafka.client_log import logged
from serdes.kafka.datasource import NAME, kafka_options
from serdes.kafka.sink import in_background
from serdes.kafka.transactions import ExactlyOnce
from state.expr.condition import FLINK_LEXICON

TOPICS_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


def writers(spark: SparkSession, config: Config) -> Writers:
    client_config = config.kafka_client_config()
    topics = AdminClient(logged(client_config)).list_topics(timeout=TOPICS_TIMEOUT_S).topics
    partitions = {s.topic: len(topics[s.topic].partitions) for s in config.inputs()}
    count = state_partitions = shuffle_partitions(spark, config.checkpoint_location)
    first = {}
    for source in config.inputs():
        first[source.side] = count
        count += partitions[source.topic]
    if config.late_rows == "dead-letter":  # each join's state partitions: its late rows
        for number in range(1, 2 + len(config.chain)):
            first[late_writers(number)] = count
            count += state_partitions
    if config.lookup is not None:  # lookup tasks: the shuffle's partitions, or the input's
        first[LOOKUP] = count
        count += max(
            shuffle_partitions(spark, config.checkpoint_location),
            len(topics[config.left.topic].partitions),
        )
    return Writers(count, first, read_tasks(spark, config.checkpoint_location), partitions)


def state_settings(plan: QueryPlan | None) -> dict[str, object]:
    """The variables that decide how a checkpoint's state is laid out: its join, the buckets
    the bucketed processors hash their keys into, and the key of an upsert materializer (none
    without a join: `plan` None)."""
    if plan is None:
        return {}
    config = plan.config
    # the upsert materializer's state is keyed by the output key
    materializer_key = ",".join(config.output.key) if plan.materialized else None
    # the lookups after the last stateful join keep no state and change none
    stateful = list(config.chain)
    while stateful and stateful[-1].join.type == LOOKUP:
        stateful.pop()
    settings = {
        "JOIN_TYPE": config.join.type,
        "JOIN_STATE_BUCKETS": plan.layout.buckets,
        "OUTPUT_KEY": materializer_key,
        # the joins after the first, each an operator of its own or all one (SQL's only)
        "JOIN_CHAIN": ("multi-way " if plan.multi_way else "")
        + " ".join(f"{c.join.type}:{c.input.topic}" for c in stateful)
        if stateful
        else None,
    }
    settings |= SPREAD_BUCKETS if plan.layout.spread_buckets else {}
    return settings if plan.layout.versions_normalized else settings | VERSIONS_AS_IS


def state_meaning(plan: QueryPlan | None) -> dict[str, str]:
    """What the rows a checkpoint's state holds mean, by what decides it: each stateful join's
    kind and keys (the columns its `ON` equates) and, but for an inner join, the rest of its
    condition, each input's unique key and the columns its rows hold, with their types, and
    the select list of the rows an upsert materializer keeps, and which operators' entries
    expire. A restart that changes any of it is refused before anything is read
    (`check_state_record`): the state would be read as what it is not."""
    operators = [] if plan is None else stateful_operators(plan.config, plan.layout)
    if plan is None or not operators:
        return {}
    # Spark keeps the entries of an operator with a TTL in another value schema: a restart that
    # set a TTL where there was none (or removed one) would fail reading them
    expiring = [
        f"{p.label} {side}" for p in operators if p.operator.store_ttl_ms for side in p.sides
    ]
    meaning = {"STATE_TTL's expiring state": ", ".join(expiring) or "none"}
    for number, (stage, spec) in enumerate(zip(plan.stages, plan.specs, strict=True), 1):
        if stage.lookup is not None:  # it keeps no state
            continue
        of = "" if number == 1 else f" of join {number}"
        meaning[f"JOIN_KIND{of}"] = stage.join.kind
        meaning[f"JOIN_ON's keys{of}"] = " AND ".join(f"L.{a} = R.{b}" for a, b in spec.equi_keys)
        if stage.join.kind != "inner" and stage.join.type in ("regular", "interval"):
            # what an outer, semi or anti join's rows keep besides themselves (how many rows
            # of the other side each matched, whether it was ever joined) the residual decides;
            # a temporal or window join applies its condition only when it emits
            residual = spec.join_condition.residual
            meaning[f"JOIN_ON's residual{of}"] = (
                "none" if residual is None else residual.sql(FLINK_LEXICON)
            )
    for source in plan.config.inputs():
        side = source.side.upper()
        meaning[f"{side}_PRIMARY_KEY"] = ",".join(source.primary_key)
        meaning[f"{side}_SCHEMA"] = schema_text(source.schema)
        if source.held_columns is not None:  # rows held from before columns were added
            meaning[oldest_rows(source.side)] = str(source.held_columns)
        # the rows a filter pushed below an inner join never kept cannot join a looser one
        meaning[f"JOIN_ON's filter of {side}"] = pushed_filter(plan.config, source) or "none"
        # nor can the records a view skipped join another view; its columns' fields are theirs
        meaning[f"{side}_WHERE"] = (
            ",".join(f"{f}={json.dumps(v)}" for f, v in source.where) or "none"
        )
        meaning[f"{side}_FIELDS"] = (
            ",".join(f"{c}={'.'.join(path)}" for c, path in source.fields) or "none"
        )
    if plan.config.join.window is not None:  # rows kept in one window's bounds, not another's
        meaning["JOIN_WINDOW"] = str(plan.config.join.window)
    if plan.materialized:
        # the upsert materializer keeps the rows it wrote, as the select list made them: a
        # retraction made by another select list would find none of them
        meaning["JOIN_SELECT"] = " ".join((plan.config.join.select or "*").split())
    return meaning


def resumed_plan(spark: SparkSession, config: Config, write: bool = True) -> QueryPlan | None:
    """The query's plan over its checkpoint's state (None: no join), once the checkpoint's
    record says that state is laid out and means as this plan's would (`check_state_record`,
    StartupError otherwise); `write`: record it for a new checkpoint (False: only check)."""
    layout = state_layout(spark, config.checkpoint_location, config.join.state_buckets)
    if config.join.type != FORWARD and last_batch(spark, config.checkpoint_location) is not None:
        config = evolved(config, state_record(spark, config.checkpoint_location) or {})
    plan = None if config.join.type == FORWARD else query_plan(config, layout)
    check_state_record(
        spark,
        config.checkpoint_location,
        state_settings(plan),
        len(config.inputs()),
        state_meaning(plan),
        write,
        grown_record(config),
    )
    return plan


def _exactly_once(config: Config) -> ExactlyOnce | None:
    if config.output.delivery != "exactly-once" or config.output.sink == "blackhole":
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
    config = resolved_starts(spark, config, [s.topic for s in config.inputs()])
    plan = resumed_plan(spark, config)
    if plan is not None:  # its inputs read as the state holds them
        for change in column_changes(config, plan.config):
            log.info("%s", change)
        config = plan.config
    tasks = writers(spark, config)  # after the record: it says how many tasks read
    fenced = tasks.count  # ids that may have written: the old partitions' too after a rescale
    if (
        config.state_partitions is not None
        and stateful_operators(config)
        and rescale(
            spark,
            config.checkpoint_location,
            config.state_partitions,
            len(config.inputs()),
            partial(_finish_pending, spark, config, metrics),
        )
    ):
        tasks = writers(spark, config)
    if held is not None:
        metrics.held_rows.accumulator.add(held.restored())
    exactly_once = _exactly_once(config)
    # Abort what an earlier run left open, for every task that may write a micro-batch: the
    # broker's round trips overlap the query's building
    fencing = (
        None
        if exactly_once is None
        else in_background(
            exactly_once.fence, config.kafka_client_config(), max(tasks.count, fenced)
        )
    )
    if plan is not None:
        job = job_id(spark, config.checkpoint_location)
        output = joined_output(spark, plan, metrics, tasks, drain_marker, exactly_once, job)
    else:
        left, right = (
            read_input(spark, config, s, drain_marker, tasks.read, on_wall_clock(config))
            for s in (config.left, config.right)
        )
        output = forward_both(left, right)
    writer = output.writeStream.queryName("streamjoin").option(
        "checkpointLocation", config.checkpoint_location
    )
    if config.output.sink == "blackhole":  # Spark's sink that computes the rows and drops them
        writer = writer.format("noop")
    else:
        writer = (
            writer.format(NAME)
            .option("topic", config.output.topic)
            .options(**kafka_options(config.kafka_client_config()))
        )
    if fencing is not None:
        fencing.result()  # over before any task of the query writes
    if exactly_once is not None:
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
