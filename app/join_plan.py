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
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from app.plan import JoinSpec
from serdes.encode import KEY_COLUMN
from state.bucketed_processor import BucketedJoinProcessor
from state.interval_processor import IntervalJoinProcessor, IntervalJoinSpec
from state.regular_processor import RegularJoinProcessor, RegularJoinSpec
from state.temporal_processor import TemporalJoinProcessor, TemporalJoinSpec
from state.upsert_materializer import UpsertMaterializer

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


def output_schema(spec: JoinSpec, left: StructType, right: StructType,
                  sequenced: bool = False) -> StructType:  # fmt: skip
    """`op`, `seq` if `sequenced`, then every left column as `L_<col>` and (except SEMI/ANTI)
    right as `R_<col>`."""
    fields = [StructField("op", StringType(), False)]
    if sequenced:
        fields.append(StructField("seq", LongType(), False))
    fields += [StructField(f"L_{f.name}", f.dataType) for f in left]
    if spec.projects_right:
        fields += [StructField(f"R_{f.name}", f.dataType) for f in right]
    return StructType(fields)


def _join_key(spec: JoinSpec, left: StructType) -> list[Column]:
    if not spec.equi_keys:
        log.warning(
            "the join condition has no equality between an L and an R column: every row "
            "shares one key, so this join runs in one task and cannot scale out"
        )
        return [F.lit(0).alias("k0")]
    return [
        F.when(F.col("side") == 0, F.col("left")[a])
        .otherwise(F.col("right")[b].cast(left[a].dataType))
        .alias(f"k{i}")
        for i, (a, b) in enumerate(spec.equi_keys)
    ]


def value_kind(data_type: DataType) -> str:
    """How a bucketed processor turns a column's pandas values into Python ones."""
    if isinstance(data_type, ByteType | ShortType | IntegerType | LongType):
        return "integral"
    return "timestamp" if isinstance(data_type, TimestampType | TimestampNTZType) else ""


PROCESSORS: dict[type, type[BucketedJoinProcessor]] = {
    RegularJoinSpec: RegularJoinProcessor,
    IntervalJoinSpec: IntervalJoinProcessor,
    TemporalJoinSpec: TemporalJoinProcessor,
}


def bucketed_join(
    changes: DataFrame, spec: JoinSpec, left: StructType, right: StructType,
    late_rows: Accumulator[dict] | None = None, held_rows: Accumulator[dict] | None = None,
    sequenced: bool = False,
) -> DataFrame:  # fmt: skip
    """The joined changelog (`op` + output columns) of the unified input changelog; with
    `sequenced`, each change's `seq` in its task's order, for `materialized_upserts`.

    Rows are grouped by a hash bucket of their join key, not by the key itself, and cross to
    Python as flat columns: see `state.bucketed_processor` for why.
    """
    keys = _join_key(spec, left)
    schema = output_schema(spec, left, right, sequenced)
    bucket = F.pmod(F.xxhash64(*keys), F.lit(spec.buckets)).alias("bucket")
    flat = [F.col("left")[f.name].alias(f"L_{f.name}") for f in left]
    flat += [F.col("right")[f.name].alias(f"R_{f.name}") for f in right]
    # every input column's kind, not only the output's: a SEMI/ANTI join outputs no right
    # column, yet its condition reads them (a NULL right INT read as NaN never IS NULL)
    kinds = {f.name: value_kind(f.dataType) for f in schema if f.name != "seq"}
    kinds |= {f"{p}_{f.name}": value_kind(f.dataType) for p, side in (("L", left), ("R", right))
              for f in side}  # fmt: skip
    kinds |= {f"k{i}": value_kind(left[a].dataType) for i, (a, _) in enumerate(spec.equi_keys)}
    return (
        changes.select(bucket, *keys, "side", "op", "seq", "ts", *flat)
        .groupBy("bucket")
        .transformWithStateInPandas(
            PROCESSORS[type(spec)](spec, schema.names, kinds, late_rows, held_rows),
            outputStructType=schema,
            outputMode="Append",
            timeMode=spec.time_mode,
        )
    )


def materialized_upserts(changes: DataFrame, buckets: int, ttl_ms: int = 0,
                         held_rows: Accumulator[dict] | None = None) -> DataFrame:  # fmt: skip
    """An upsert output's changes (`op`, `seq`, the record key `KEY_COLUMN`, the row's
    columns) applied per record key as Flink's sink upsert materializer does
    (`state.upsert_materializer`): `op`, `KEY_COLUMN` and the row's columns, the keys hashed
    into `buckets`."""
    names = [c for c in changes.columns if c not in ("op", "seq", KEY_COLUMN)]
    flat = [F.col(f"`{name}`").alias(f"c{i}") for i, name in enumerate(names)]
    kinds = {f"c{i}": value_kind(changes.schema[name].dataType) for i, name in enumerate(names)}
    schema = StructType(
        [StructField("op", StringType(), False), StructField("key", BinaryType())]
        + [StructField(f"c{i}", changes.schema[name].dataType) for i, name in enumerate(names)]
    )
    key = F.col(KEY_COLUMN)
    bucket = F.pmod(F.xxhash64(key), F.lit(buckets)).alias("bucket")
    materialized = (
        changes.select(bucket, "op", "seq", key.alias("key"), *flat)
        .groupBy("bucket")
        .transformWithStateInPandas(
            UpsertMaterializer(len(names), kinds, ttl_ms, held_rows),
            outputStructType=schema,
            outputMode="Append",
            timeMode="ProcessingTime" if ttl_ms > 0 else "None",
        )
    )
    row = [F.col(f"c{i}").alias(name) for i, name in enumerate(names)]
    return materialized.select("op", F.col("key").alias(KEY_COLUMN), *row)
