"""Output encodings of the joined changelog, as Spark column expressions (no Python per row).

- `append`: inserts only, the row as the value.
- `retract`: every change a record; the kind in the value (`"op"`) and in the `op` header.
- `upsert`: the record key is the unique key; +I/+U carry the row, -D is a tombstone, -U is
  dropped (the +U that follows replaces the row), or a tombstone after a filter of the joined
  rows, which may have dropped that +U (as Flink's upsert-kafka sink writes an update's
  before-image where its plan keeps one).
- `debezium-json`: what Debezium consumers read, as Flink's debezium-json writes it: +I/+U as
  `{"before": null, "after": row, "op": "c"}`, -U/-D as `{"before": row, "after": null, "op": "d"}`.

Values and record keys are JSON as Flink's JSON format writes them: every field, NULL ones too;
a timestamp as `yyyy-MM-dd HH:mm:ss` with the fraction digits its value needs (`.5`, `.123456`,
none for a whole second), its microseconds kept.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from state.changes import RowKind

_JSON_OPTIONS = {"ignoreNullFields": "false"}
OP_HEADER = "op"
KEY_COLUMN = "__key"
# Columns of the joined changes that ride beside the record, not in it, for the dead-letter
# topic (`app.plan.projection`): a select list's first CAST that failed on the row, and on what;
# the joined row it failed on, as JSON.
CAST_ERROR = "__cast_error"
FAILED_ROW = "__failed_row"
CARRIED = (CAST_ERROR, FAILED_ROW)


def _op_header() -> Column:
    return F.array(
        F.struct(F.lit(OP_HEADER).alias("key"), F.col("op").cast("binary").alias("value"))
    )


def encode(changes: DataFrame, encoding: str, filtered: bool = False) -> DataFrame:
    """`key`, `value` (a struct, null for a tombstone), `headers` records for `changes`: `op`,
    the record key as JSON bytes in `KEY_COLUMN`, then the row's columns, and the `CARRIED`
    columns it has. The value is turned into bytes by `as_json` or `serdes.records.avro_out`.
    `filtered`: the changes went through a filter (upsert: -U a tombstone)."""
    row = F.struct(*row_fields(changes))
    key, headers = F.col(KEY_COLUMN).alias("key"), _op_header().alias("headers")
    carried = [c for c in CARRIED if c in changes.columns]
    if encoding == "append":
        return changes.select(key, row.alias("value"), headers, *carried)
    if encoding == "retract":
        value = F.struct("op", *row_fields(changes))
        return changes.select(key, value.alias("value"), headers, *carried)
    if encoding == "upsert":
        value = F.when(F.col("op").isin(*RowKind.ACCUMULATE), row)
        kept = changes if filtered else changes.where(F.col("op") != RowKind.UPDATE_BEFORE)
        return kept.select(key, value.alias("value"), headers, *carried)
    if encoding == "debezium-json":
        added = F.col("op").isin(*RowKind.ACCUMULATE)
        envelope = F.struct(
            F.when(~added, row).alias("before"),
            F.when(added, row).alias("after"),
            F.when(added, F.lit("c")).otherwise(F.lit("d")).alias("op"),
        )
        return changes.select(key, envelope.alias("value"), headers, *carried)
    raise ValueError(f"unknown output encoding {encoding!r}")


def divert_failed_casts(records: DataFrame, topic: str) -> DataFrame:
    """`key`, `value`, `headers`, `topic`: a record whose row a CAST failed on goes to `topic`
    (the dead-letter topic) as the joined row, with the failure in `streamjoin.error` and
    `streamjoin.error.reason` `cast`; the others go where the sink writes (`topic` NULL)."""
    if CAST_ERROR not in records.columns:
        return records
    error, failed_row = F.col(CAST_ERROR), F.col(FAILED_ROW)
    failed = error.isNotNull()
    letter_headers = F.concat(
        F.col("headers"),
        F.array(
            F.struct(F.lit("streamjoin.error").alias("key"), error.cast("binary").alias("value")),
            F.struct(
                F.lit("streamjoin.error.reason").alias("key"),
                F.lit("cast").cast("binary").alias("value"),
            ),
        ),
    )
    return records.select(
        "key",
        F.when(failed, failed_row.cast("binary")).otherwise(F.col("value")).alias("value"),
        F.when(failed, letter_headers).otherwise(F.col("headers")).alias("headers"),
        F.when(failed, F.lit(topic)).alias("topic"),
    )


def _has_timestamp(kind: T.DataType) -> bool:
    if isinstance(kind, T.StructType):
        return any(_has_timestamp(f.dataType) for f in kind.fields)
    return isinstance(kind, T.TimestampType)


def _timestamps_as_text(
    value: Column, kind: T.DataType, zoned: frozenset[str], name: str | None = None
) -> Column:
    """`value` with each timestamp in it as Flink's JSON text, a `Z` after the fields named in
    `zoned` (TIMESTAMP_LTZ columns). Spark's CAST to STRING (in the session's UTC) writes that
    text, where a `timestampFormat` has a fixed number of digits."""
    if isinstance(kind, T.TimestampType):
        text = value.cast("string")
        return F.concat(text, F.lit("Z")) if name in zoned else text
    if isinstance(kind, T.StructType) and _has_timestamp(kind):
        fields = [
            _timestamps_as_text(value[f.name], f.dataType, zoned, f.name).alias(f.name)
            for f in kind.fields
        ]
        return F.when(value.isNotNull(), F.struct(*fields))
    return value


def json_text(frame: DataFrame, value: Column, zoned: frozenset[str] = frozenset()) -> Column:
    """`value`, a struct computed from `frame`'s columns, as Flink's JSON text (NULL stays
    NULL); `zoned`: the names of its TIMESTAMP_LTZ fields, at any depth."""
    kind = frame.select(value).schema[0].dataType
    return F.to_json(_timestamps_as_text(value, kind, zoned), _JSON_OPTIONS)


def as_json(records: DataFrame, zoned: frozenset[str] = frozenset()) -> DataFrame:
    """Values as JSON bytes (a null value stays null: a tombstone); `zoned` as `json_text`."""
    return records.withColumn("value", json_text(records, F.col("value"), zoned).cast("binary"))


def row_fields(changes: DataFrame) -> list[str]:
    return [c for c in changes.columns if c not in ("op", KEY_COLUMN, *CARRIED)]
