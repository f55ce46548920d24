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

from app.plan.planner import JoinSpec, join_label
from app.run.key_type import common_key_type
from app.run.stateful import run_stateful
from serdes.records.encode import KEY_COLUMN
from state.columns import (
    OP,
    SEQ,
    SIDE,
    SIDE_PREFIXES,
    TS,
    chained_column,
    chained_names,
    key_column,
    side_column,
)
from state.joins.specs import IntervalJoinSpec, MultiJoinSpec, RegularJoinSpec, WindowJoinSpec
from state.spark.frame import LateLetters, StatefulOperator, WarmState
from state.spark.interval import IntervalJoinOperator
from state.spark.regular import MultiJoinOperator, RegularJoinOperator
from state.spark.temporal import EventTimeTemporalJoinOperator, ProcessingTimeTemporalJoinOperator
from state.spark.upsert import UpsertMaterializeOperator
from state.spark.window import WindowJoinOperator

log = logging.getLogger(__name__)


def changelog_schema(left: StructType, right: StructType) -> StructType:
    return StructType(
        [
            StructField(SIDE, ByteType(), False),
            StructField(OP, StringType(), False),
            StructField(SEQ, LongType(), False),
            StructField(TS, LongType()),
            StructField("left", left),
            StructField("right", right),
        ]
    )


def _join_key(spec: JoinSpec, left: StructType, right: StructType) -> list[tuple[Column, DataType]]:
    if not spec.equi_keys:
        log.warning(
            "the join condition has no equality between an L and an R column: every row "
            "shares one key, so this join runs in one task and cannot scale out"
        )
        return [(F.lit(0), IntegerType())]
    keys = []
    for a, b in spec.equi_keys:
        compared = common_key_type([left[a].dataType, right[b].dataType])
        key = F.when(F.col(SIDE) == 0, F.col("left")[a].cast(compared))
        keys.append((key.otherwise(F.col("right")[b].cast(compared)), compared))
    return keys


def join_operator(spec: JoinSpec, number: int = 1) -> StatefulOperator:
    """The stateful operator of a job's `number`-th join on the frame (`state.spark`)."""
    operator: StatefulOperator
    if isinstance(spec, RegularJoinSpec):
        operator = RegularJoinOperator(spec)
    elif isinstance(spec, IntervalJoinSpec):
        operator = IntervalJoinOperator(spec, chained=number > 1)
    elif isinstance(spec, WindowJoinSpec):
        operator = WindowJoinOperator(spec)
    elif spec.clock == "processing":
        operator = ProcessingTimeTemporalJoinOperator(spec)
    else:
        operator = EventTimeTemporalJoinOperator(spec)
    operator.name = join_label(number)  # its state's rows are reported under it
    return operator


def bucketed_join(
    changes: DataFrame,
    spec: JoinSpec,
    left: StructType,
    right: StructType,
    late_rows: Accumulator[dict] | None = None,
    held_rows: Accumulator[dict] | None = None,
    sequenced: bool = False,
    number: int = 1,
    spread: bool = True,
    warm: WarmState | None = None,
    fanout: Accumulator[dict] | None = None,
    late_letters: LateLetters | None = None,
    bounds: bool = False,
    changes_out: Accumulator[dict] | None = None,
) -> DataFrame:
    """The joined changelog (`op` + `L_`/`R_` output columns) of the unified input changelog
    (`changelog_schema`), as the job's `number`-th join; with `sequenced`, each change's `seq`
    in its task's order, for `materialized_upserts` or a next join (`as_left_input`); `spread`
    as `run_stateful` takes it; `late_letters`: where its late rows go instead of joined;
    `bounds`: the changelog carries each row's `bound` (`state.columns`); `changes_out`: where
    its output is counted by kind (the job's last join)."""
    return run_stateful(
        changes,
        join_operator(spec, number),
        _join_key(spec, left, right),
        [(F.col("left"), left), (F.col("right"), right)],
        spec.buckets,
        outputs=(0, 1) if spec.projects_right else (0,),
        out_seq=sequenced,
        late_rows=late_rows,
        held_rows=held_rows,
        chained=number > 1,
        spread=spread,
        warm=warm,
        fanout=fanout,
        late_letters=late_letters,
        bounds=bounds,
        changes_out=changes_out,
    )


def as_left_input(
    joined: DataFrame, number: int, right: StructType, time: str | None = None
) -> tuple[DataFrame, StructType]:
    """A join's result (`op`, `seq`, its `L_`/`R_` output columns) as the left side of the
    `number`-th join's unified changelog (`changelog_schema`), and the row type of that side
    (its fields named by `state.columns.chained_names`). Its `seq` orders each task's
    changes, so the next join takes the changes of one key in the order they were made, as
    Flink's channels keep it (a lookup join's are its left's); its event time is its column
    `time` (a rowtime of a table before it, for an interval or temporal join), else none."""
    sides = [[f for f in joined.schema if f.name.startswith(prefix)] for prefix in SIDE_PREFIXES]
    own = [
        [f.name[len(p) :] for f in fields] for p, fields in zip(SIDE_PREFIXES, sides, strict=True)
    ]
    names = chained_names(own[0], own[1], number)
    fields = [*sides[0], *sides[1]]
    left = StructType([StructField(n, f.dataType) for n, f in zip(names, fields, strict=True)])
    row = F.struct(*[F.col(f.name).alias(n) for n, f in zip(names, fields, strict=True)])
    ts = F.lit(None).cast("long")
    if time in names:
        ts = F.unix_millis(F.col(fields[names.index(time)].name))
    changes = joined.select(
        F.lit(0).cast("byte").alias(SIDE),
        OP,
        SEQ,
        ts.alias(TS),
        row.alias("left"),
        F.lit(None).cast(right).alias("right"),
    )
    return changes, left


def multi_way_input(
    changes: DataFrame,
    index: int,
    spec: MultiJoinSpec,
    row: StructType,
    left: StructType,
    right: StructType,
) -> DataFrame:
    """Input `index`'s changes (`op`, `seq`, `ts`, `row`) as the multi-way join takes them
    (`state.spark.regular.MultiJoinOperator`): `side` the input, the last input's row as
    `right`, any other's columns at their place in `left` (the others NULL)."""
    last = index == len(spec.inputs) - 1
    own = {chained_column(index, name): name for name in row.names}
    as_left = F.struct(
        *[
            (F.col("row")[own[f.name]] if f.name in own else F.lit(None).cast(f.dataType)).alias(
                f.name
            )
            for f in left
        ]
    )
    return changes.select(
        F.lit(index).cast("byte").alias(SIDE),
        OP,
        SEQ,
        TS,
        (F.lit(None).cast(left) if last else as_left).alias("left"),
        (F.col("row") if last else F.lit(None).cast(right)).alias("right"),
    )


def multi_way_join(
    changes: DataFrame,
    spec: MultiJoinSpec,
    sides: tuple[str, ...],
    left: StructType,
    right: StructType,
    held_rows: Accumulator[dict] | None = None,
    sequenced: bool = False,
    spread: bool = True,
    warm: WarmState | None = None,
    fanout: Accumulator[dict] | None = None,
    changes_out: Accumulator[dict] | None = None,
) -> DataFrame:
    """The multi-way join of its inputs' unified changes (`multi_way_input`), hashed by the key
    they share: the output of the chain's last join (`op` + `L_`/`R_` columns). `sides`: the
    inputs' labels; `spread` as `run_stateful` takes it; `changes_out`: where its output is
    counted by kind."""
    key_types = [left[chained_column(i, name)].dataType for i, name in enumerate(spec.keys[:-1])]
    key_type = common_key_type([*key_types, right[spec.keys[-1]].dataType])
    key = F.when(F.col(SIDE) == len(spec.keys) - 1, F.col("right")[spec.keys[-1]])
    for index, name in enumerate(spec.keys[:-1]):
        key = key.when(F.col(SIDE) == index, F.col("left")[chained_column(index, name)])
    return run_stateful(
        changes,
        MultiJoinOperator(spec, sides),
        [(key.cast(key_type), key_type)],
        [(F.col("left"), left), (F.col("right"), right)],
        spec.buckets,
        outputs=(0, 1),
        out_seq=sequenced,
        held_rows=held_rows,
        spread=spread,
        warm=warm,
        fanout=fanout,
        changes_out=changes_out,
    )


def materialized_upserts(
    changes: DataFrame,
    buckets: int,
    ttl_ms: int = 0,
    held_rows: Accumulator[dict] | None = None,
    spread: bool = True,
    warm: WarmState | None = None,
) -> DataFrame:
    """An upsert output's changes (`op`, `seq`, the record key `KEY_COLUMN`, the row's
    columns) applied per record key as Flink's sink upsert materializer does
    (`state.joins.materialize`): `op`, `KEY_COLUMN` and the row's columns, the keys hashed
    into `buckets` (`spread` as `run_stateful` takes it)."""
    names = [c for c in changes.columns if c not in (OP, SEQ, KEY_COLUMN)]
    # the row's columns by position: an output column's name may be anything
    row = StructType([StructField(str(i), changes.schema[n].dataType) for i, n in enumerate(names)])
    struct = F.struct(*[F.col(f"`{name}`").alias(str(i)) for i, name in enumerate(names)])
    materialized = run_stateful(
        changes,
        UpsertMaterializeOperator(ttl_ms),
        [(F.col(KEY_COLUMN), BinaryType())],
        [(struct, row)],
        buckets,
        times=False,
        out_key=True,
        held_rows=held_rows,
        spread=spread,
        warm=warm,
    )
    values = [F.col(side_column(0, str(i))).alias(name) for i, name in enumerate(names)]
    return materialized.select(OP, F.col(key_column(0)).alias(KEY_COLUMN), *values)
