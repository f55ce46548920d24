"""Spark wiring of every stateful operator: one frame, built one way.

An operator's input is hashed into buckets of its keys, flattened into the columns its
`ColumnLayout` names, and run by the one processor (`state.spark.frame.StatefulFrame`) under
`transformWithStateInPandas`; see `state.columns` for the columns and
`state.spark.frame` for why buckets and flat columns.
"""

from __future__ import annotations

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
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

from app.run.key_buckets import spread_ids
from state.columns import (
    BOUND,
    BUCKET,
    OP,
    SEQ,
    SIDE,
    TS,
    ColumnLayout,
    key_column,
    side_column,
)
from state.spark.frame import LateLetters, StatefulFrame, StatefulOperator, WarmState


def value_kind(data_type: DataType) -> str:
    """How the frame turns a column's pandas values into Python ones."""
    if isinstance(data_type, ByteType | ShortType | IntegerType | LongType):
        return "integral"
    return "timestamp" if isinstance(data_type, TimestampType | TimestampNTZType) else ""


def run_stateful(
    changes: DataFrame,
    operator: StatefulOperator,
    keys: list[tuple[Column, DataType]],
    sides: list[tuple[Column, StructType]],
    buckets: int,
    *,
    times: bool = True,
    bounds: bool = False,
    outputs: tuple[int, ...] = (0,),
    out_seq: bool = False,
    out_ts: bool = False,
    out_key: bool = False,
    late_rows: Accumulator[dict] | None = None,
    held_rows: Accumulator[dict] | None = None,
    chained: bool = False,
    spread: bool = True,
    warm: WarmState | None = None,
    fanout: Accumulator[dict] | None = None,
    late_letters: LateLetters | None = None,
    changes_out: Accumulator[dict] | None = None,
) -> DataFrame:
    """`operator` over `changes` (`op`, `seq`, `ts` if `times`, `bound` if `bounds`, `side` if
    two `sides`), grouped by a hash of its `keys` into `buckets`, each side's row the struct
    `sides[i]`. Out: `op`, then `seq` / `ts` / the first key if asked, then the `outputs` sides'
    flat columns (`state.columns.side_column`); `chained`: the left side is a join's result in the
    same query (`state.spark.frame.StatefulFrame`); `spread`: each bucket grouped by its id of
    `app.run.key_buckets` (False: by its index, as a checkpoint made before ids keeps it);
    `warm`: the state the workers keep between micro-batches; `fanout`: where a join counts
    its fan-out and hot keys (`state.joins.fanout`); `late_letters`: where an event-time
    operator's late rows go instead of to the operator; `changes_out`: where its output is
    counted by kind."""
    kinds = {key_column(i): value_kind(t) for i, (_, t) in enumerate(keys)}
    # every input column's kind, not only the output's: a SEMI/ANTI join outputs no right
    # column, yet its condition reads them (a NULL right INT read as NaN never IS NULL)
    kinds |= {
        side_column(s, f.name): value_kind(f.dataType)
        for s, (_, row) in enumerate(sides)
        for f in row
    }
    layout = ColumnLayout(
        len(keys),
        tuple(tuple(row.names) for _, row in sides),
        kinds,
        times,
        outputs,
        out_seq,
        out_ts,
        out_key,
        bounds,
    )
    key_columns = [column.alias(key_column(i)) for i, (column, _) in enumerate(keys)]
    flat = [
        struct[f.name].alias(side_column(s, f.name))
        for s, (struct, row) in enumerate(sides)
        for f in row
    ]
    head = [SIDE] if len(sides) > 1 else []
    head += [OP, SEQ, *([TS] if times else []), *([BOUND] if bounds else [])]
    fields = [StructField(OP, StringType(), False)]
    fields += [StructField(SEQ, LongType(), False)] if out_seq else []
    fields += [StructField(TS, LongType())] if out_ts else []
    fields += [StructField(key_column(0), keys[0][1])] if out_key else []
    fields += [
        StructField(side_column(s, f.name), f.dataType) for s in outputs for f in sides[s][1]
    ]
    frame = StatefulFrame(
        operator, layout, late_rows, held_rows, chained, warm, fanout, late_letters, changes_out
    )
    bucket = F.pmod(F.xxhash64(*key_columns), F.lit(buckets))
    if spread:
        ids = F.array(*[F.lit(i) for i in spread_ids(buckets)]).cast("array<bigint>")
        bucket = F.element_at(ids, (bucket + 1).cast("int"))
    bucket = bucket.alias(BUCKET)
    return (
        changes.select(bucket, *key_columns, *head, *flat)
        .groupBy(BUCKET)
        .transformWithStateInPandas(
            frame,
            outputStructType=StructType(fields),
            outputMode="Append",
            timeMode=frame.time_mode,
        )
    )


def side_struct(side: int, row: StructType) -> Column:
    """A side's flat output columns as the struct of its row."""
    return F.struct(*[F.col(side_column(side, f.name)).alias(f.name) for f in row])
