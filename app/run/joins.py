"""Spark wiring of the joins: key the unified changelog by the join key, run the processor.

Both inputs arrive as one changelog with the columns `side` (0 left, 1 right), `op`
(`+I -U +U -D`), `seq` (arrival order within a side), `ts` (the row's event time in epoch ms,
without Spark's watermark metadata, so no row is dropped as late before a join sees it) and the
structs `left` and `right` (one of them null). The join operators themselves live in `state/`.
"""

from __future__ import annotations

import logging

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from app.plan.planner import JoinSpec
from app.run.stateful import run_stateful
from serdes.records.encode import KEY_COLUMN
from state.joins.specs import IntervalJoinSpec, RegularJoinSpec
from state.spark.columns import key_column, side_column
from state.spark.frame import StatefulOperator
from state.spark.interval import IntervalJoinOperator
from state.spark.regular import RegularJoinOperator
from state.spark.temporal import EventTimeTemporalJoinOperator, ProcessingTimeTemporalJoinOperator
from state.spark.upsert import UpsertMaterializeOperator

log = logging.getLogger(__name__)


def changelog_schema(left: StructType, right: StructType) -> StructType:
    return StructType(
        [
            StructField("side", ByteType(), False),
            StructField("op", StringType(), False),
            StructField("seq", LongType(), False),
            StructField("ts", LongType()),
            StructField("left", left),
            StructField("right", right),
        ]
    )


def _join_key(spec: JoinSpec, left: StructType) -> list[tuple[Column, DataType]]:
    if not spec.equi_keys:
        log.warning(
            "the join condition has no equality between an L and an R column: every row "
            "shares one key, so this join runs in one task and cannot scale out"
        )
        return [(F.lit(0), IntegerType())]
    return [
        (F.when(F.col("side") == 0, F.col("left")[a])
         .otherwise(F.col("right")[b].cast(left[a].dataType)), left[a].dataType)
        for a, b in spec.equi_keys
    ]  # fmt: skip


def join_operator(spec: JoinSpec) -> StatefulOperator:
    """The stateful operator of a join on the frame (`state.spark`)."""
    if isinstance(spec, RegularJoinSpec):
        return RegularJoinOperator(spec)
    if isinstance(spec, IntervalJoinSpec):
        return IntervalJoinOperator(spec)
    if spec.clock == "processing":
        return ProcessingTimeTemporalJoinOperator(spec)
    return EventTimeTemporalJoinOperator(spec)


def bucketed_join(
    changes: DataFrame, spec: JoinSpec, left: StructType, right: StructType,
    late_rows: Accumulator[dict] | None = None, held_rows: Accumulator[dict] | None = None,
    sequenced: bool = False,
) -> DataFrame:  # fmt: skip
    """The joined changelog (`op` + `L_`/`R_` output columns) of the unified input changelog
    (`changelog_schema`); with `sequenced`, each change's `seq` in its task's order, for
    `materialized_upserts`."""
    return run_stateful(
        changes, join_operator(spec), _join_key(spec, left),
        [(F.col("left"), left), (F.col("right"), right)], spec.buckets,
        outputs=(0, 1) if spec.projects_right else (0,), out_seq=sequenced,
        late_rows=late_rows, held_rows=held_rows,
    )  # fmt: skip


def materialized_upserts(changes: DataFrame, buckets: int, ttl_ms: int = 0,
                         held_rows: Accumulator[dict] | None = None) -> DataFrame:  # fmt: skip
    """An upsert output's changes (`op`, `seq`, the record key `KEY_COLUMN`, the row's
    columns) applied per record key as Flink's sink upsert materializer does
    (`state.joins.materialize`): `op`, `KEY_COLUMN` and the row's columns, the keys hashed
    into `buckets`."""
    names = [c for c in changes.columns if c not in ("op", "seq", KEY_COLUMN)]
    # the row's columns by position: an output column's name may be anything
    row = StructType([StructField(str(i), changes.schema[n].dataType) for i, n in enumerate(names)])
    struct = F.struct(*[F.col(f"`{name}`").alias(str(i)) for i, name in enumerate(names)])
    materialized = run_stateful(
        changes, UpsertMaterializeOperator(ttl_ms), [(F.col(KEY_COLUMN), BinaryType())],
        [(struct, row)], buckets, times=False, out_key=True, held_rows=held_rows,
    )  # fmt: skip
    values = [F.col(side_column(0, str(i))).alias(name) for i, name in enumerate(names)]
    return materialized.select("op", F.col(key_column(0)).alias(KEY_COLUMN), *values)
