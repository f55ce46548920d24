"""Output encodings of the joined changelog, as Spark column expressions (no Python per row).

- `append`: inserts only, the row as the value.
- `retract`: every change a record; the kind in the value (`"op"`) and in the `op` header.
- `upsert`: the record key is the unique key; +I/+U carry the row, -D is a tombstone, -U is
  dropped (the +U that follows replaces the row).
- `debezium-json`: what Debezium consumers read, as Flink's debezium-json writes it: +I/+U as
  `{"before": null, "after": row, "op": "c"}`, -U/-D as `{"before": row, "after": null, "op": "d"}`.

Values are JSON with timestamps as `yyyy-MM-dd HH:mm:ss.SSS` (Flink's SQL format).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from state.changes import RowKind

JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd HH:mm:ss.SSS", "ignoreNullFields": "false"}
OP_HEADER = "op"
KEY_COLUMN = "__key"


def _op_header() -> Column:
    return F.array(
        F.struct(F.lit(OP_HEADER).alias("key"), F.col("op").cast("binary").alias("value"))
    )


def encode(changes: DataFrame, encoding: str) -> DataFrame:
    """`key`, `value` (a struct, null for a tombstone), `headers` records for `changes`: `op`,
    the record key as JSON bytes in `KEY_COLUMN`, then the row's columns. The value is turned
    into bytes by `as_json` or `serdes.records.avro_out`."""
    row = F.struct(*row_fields(changes))
    key, headers = F.col(KEY_COLUMN).alias("key"), _op_header().alias("headers")
    if encoding == "append":
        return changes.select(key, row.alias("value"), headers)
    if encoding == "retract":
        return changes.select(key, F.struct("op", *row_fields(changes)).alias("value"), headers)
    if encoding == "upsert":
        value = F.when(F.col("op") != RowKind.DELETE, row)
        return changes.where(F.col("op") != RowKind.UPDATE_BEFORE).select(
            key, value.alias("value"), headers
        )
    if encoding == "debezium-json":
        added = F.col("op").isin(*RowKind.ACCUMULATE)
        envelope = F.struct(
            F.when(~added, row).alias("before"),
            F.when(added, row).alias("after"),
            F.when(added, F.lit("c")).otherwise(F.lit("d")).alias("op"),
        )
        return changes.select(key, envelope.alias("value"), headers)
    raise ValueError(f"unknown output encoding {encoding!r}")


def as_json(records: DataFrame) -> DataFrame:
    """Values as JSON bytes (a null value stays null: a tombstone)."""
    return records.withColumn("value", F.to_json("value", JSON_OPTIONS).cast("binary"))


def row_fields(changes: DataFrame) -> list[str]:
    return [c for c in changes.columns if c not in ("op", KEY_COLUMN)]
