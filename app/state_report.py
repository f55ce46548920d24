"""`streamjoin state`: what a checkpoint's join state holds, read with Spark's state data source.

Spark numbers a query's stateful operators (`state-metadata`) and reads any state variable of a
`transformWithState` operator as rows (`statestore`, `stateVarName`); the bytes in them are this
service's (`state.store.encoding`), and only the operator that wrote them knows what they mean
(`StatefulOperator.inspect`). So each variable's entries are decoded where Spark reads them, by
the operator the configuration plans at that number (`app.run.operators.stateful_operators`), into
one row per entry, key and side; the counts, the largest keys and the oldest event times are
Spark aggregations over those, and only they (and one key's rows, with `--key`) reach the driver.
A checkpoint of millions of keys is read the way the job itself would read it.

The question it answers: why did a row not join? `--key` shows what each side holds for that
join key: an order waiting with no version of its product, say.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pandas as pd
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from app.run.operators import PlannedOperator
from state.changes import EPOCH

HELD = StructType(
    [
        StructField("side", StringType()),
        StructField("key", StringType()),  # the key's values as a JSON list
        StructField("count", LongType()),
        StructField("oldest", LongType()),
        StructField("rows", StringType()),  # with a key asked for: its rows as a JSON list
    ]
)
# The state stores a read opens report their snapshot uploads to the driver's coordinator from a
# maintenance thread; a read uploads nothing, and at the stop that thread outlives the
# coordinator and warns at every tick that it is gone. Forcing uploads on a lag needs those
# reports (a streaming query refuses the one without the other): off too. For a session of
# `streamjoin state`'s own, never one that runs queries.
READ_ONLY_STATE = {
    "spark.sql.streaming.stateStore.coordinatorReportSnapshotUploadLag": "false",
    "spark.sql.streaming.stateStore.forceSnapshotUploadOnLag": "false",
}


class NoStateError(Exception):
    """The checkpoint holds no state this configuration can read; the message says why."""


def plain(value: Any, timestamp: bool = False) -> Any:
    """A state value as JSON shows it: timestamps (epoch µs in state) and dates as ISO-8601,
    decimals as strings, bytes as text."""
    if timestamp and isinstance(value, int):
        return (EPOCH + timedelta(microseconds=value)).isoformat()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


@dataclass(frozen=True)
class RowShape:
    """How one side's rows are shown: by column name where the side's schema is known."""

    names: tuple[str, ...]
    timestamps: frozenset[int]

    @classmethod
    def of(cls, schema: StructType) -> RowShape:
        stamps = {
            i
            for i, f in enumerate(schema)
            if isinstance(f.dataType, TimestampType | TimestampNTZType)
        }
        return cls(tuple(schema.names), frozenset(stamps))

    def show(self, row: tuple) -> Any:
        values = [plain(v, i in self.timestamps) for i, v in enumerate(row)]
        return dict(zip(self.names, values, strict=True)) if self.names else values


def key_text(key: tuple) -> list[str]:
    """A key's values as typed on the command line (`--key`, once per key column)."""
    return [str(plain(v)) for v in key]


def decoder(
    planned: PlannedOperator, variable: str, now: int, key: list[str] | None
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The `mapInPandas` function that decodes one state variable's entries (`name`, `value`)
    into `HELD` rows: every key's counts, or only `key`'s, with its rows."""
    operator = planned.operator
    shapes = {side: RowShape.of(schema) for side, schema in planned.sides.items()}

    def decode(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            out = []
            for name, value in zip(frame["name"], frame["value"], strict=True):
                for held in operator.inspect(variable, name, value, now):
                    if key is not None and key_text(held.key) != key:
                        continue
                    shape = shapes.get(held.side, RowShape((), frozenset()))
                    rows = None if key is None else json.dumps([shape.show(r) for r in held.rows])
                    out.append(
                        (
                            held.side,
                            json.dumps([plain(v) for v in held.key]),
                            held.count,
                            held.oldest,
                            rows,
                        )
                    )
            yield pd.DataFrame(out, columns=HELD.names)

    return decode


def _metadata(spark: SparkSession, location: str) -> list[Any]:
    try:
        return spark.read.format("state-metadata").load(location).orderBy("operatorId").collect()
    except AnalysisException as err:
        raise NoStateError(
            f"{location} holds no readable state ({str(err).splitlines()[0]})"
        ) from None


def _entries(
    spark: SparkSession, location: str, operator_id: int, variable: str, batch: int
) -> DataFrame:
    state = (
        spark.read.format("statestore")
        .option("operatorId", operator_id)
        .option("stateVarName", variable)
        .option("batchId", batch)
        .load(location)
    )
    if "user_map_key" in state.columns:  # a map state: an entry per name
        return state.select(
            F.col("user_map_key.key").alias("name"), F.col("user_map_value.bucket").alias("value")
        )
    return state.select(
        F.lit(None).cast("binary").alias("name"), F.col("value.bucket").alias("value")
    )


def held_state(
    spark: SparkSession, location: str, planned: list[PlannedOperator], key: list[str] | None
) -> tuple[int, DataFrame]:
    """The last committed batch and the rows of `HELD` with `operator` (id and label) of every
    planned operator's state; `NoStateError` when the checkpoint's operators are not those."""
    recorded = _metadata(spark, location)
    if not recorded:
        raise NoStateError(f"{location} holds no state: no batch has been committed")
    # Spark's own variables (timers, TTL indexes) are named `$...`
    found = [
        sorted(
            v["stateName"]
            for v in json.loads(r.operatorProperties or "{}").get("stateVariables", [])
            if not v["stateName"].startswith("$")
        )
        for r in recorded
    ]
    wanted = [sorted(p.operator.variables) for p in planned]
    if found != wanted:
        raise NoStateError(
            f"{location} holds other state than this configuration plans (operators' "
            f"variables {found}, planned {wanted}): give `streamjoin state` the job's own "
            "variables"
        )
    batch = max(r.maxBatchId for r in recorded)
    now = int(time.time() * 1000)
    parts = []
    for number, operator in enumerate(planned):
        for variable in operator.operator.variables:
            entries = _entries(spark, location, number, variable, batch)
            held = entries.mapInPandas(decoder(operator, variable, now, key), HELD)
            parts.append(
                held.select(F.lit(number).alias("id"), F.lit(operator.label).alias("operator"), "*")
            )
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return batch, union


def report(
    spark: SparkSession,
    location: str,
    planned: list[PlannedOperator],
    key: list[str] | None = None,
    top: int = 5,
) -> dict[str, Any]:
    """What the checkpoint at `location` holds: per operator and side, rows, keys, the oldest
    event time (ms) and the `top` largest keys; with `key`, that key's rows. `left` and `right`
    are the join's own sides."""
    batch, held = held_state(spark, location, planned, key)
    by_key = (
        held.groupBy("id", "operator", "side", "key")
        .agg(
            F.sum("count").alias("rows"),
            F.min("oldest").alias("oldest"),
            F.collect_list("rows").alias("rows_json"),
        )
        .cache()
    )
    totals = by_key.groupBy("id", "operator", "side").agg(
        F.sum("rows").alias("rows"), F.count("*").alias("keys"), F.min("oldest").alias("oldest")
    )
    rank = F.row_number().over(Window.partitionBy("id", "side").orderBy(F.desc("rows"), "key"))
    largest = by_key.withColumn("rank", rank).where(F.col("rank") <= top)
    sides: dict[tuple[int, str], dict[str, Any]] = {}
    for r in totals.orderBy("id", "side").collect():
        sides[(r.id, r.side)] = {
            "id": r.id,
            "operator": r.operator,
            "side": r.side,
            "rows": r.rows,
            "keys": r.keys,
            "oldest_event_time": r.oldest,
            "largest_keys": [],
        }
    for r in largest.orderBy("id", "side", "rank").collect():
        sides[(r.id, r.side)]["largest_keys"].append({"key": json.loads(r.key), "rows": r.rows})
    if key is not None:
        for r in by_key.collect():
            sides[(r.id, r.side)]["held"] = [
                row for rows in r.rows_json for row in json.loads(rows)
            ]
    by_key.unpersist()
    operators = list(sides.values())
    result: dict[str, Any] = {"checkpoint": location, "batch": batch}
    if key is not None:
        result["key"] = key
    for side in ("left", "right"):
        join = next((o for o in operators if o["operator"] == "join" and o["side"] == side), None)
        empty = {"rows": 0, "keys": 0, "oldest_event_time": None, "largest_keys": []}
        result[side] = {
            k: v for k, v in (join or empty).items() if k not in ("id", "operator", "side")
        }
        if key is not None:
            result[side].setdefault("held", [])
    result["operators"] = operators
    return result


def _when(ms: int | None) -> str:
    return "-" if ms is None else (EPOCH + timedelta(milliseconds=ms)).isoformat()


def table(result: dict[str, Any]) -> list[str]:
    """The report as plain text lines."""
    lines = [f"checkpoint {result['checkpoint']}, batch {result['batch']}"]
    operators = result["operators"]
    if not operators:
        return [*lines, "no rows held"]
    width = max(len(f"{o['operator']} {o['side']}") for o in operators)
    lines.append(f"{'held by':<{width}}  {'rows':>10}  {'keys':>10}  oldest event time")
    for o in operators:
        label = f"{o['operator']} {o['side']}"
        lines.append(
            f"{label:<{width}}  {o['rows']:>10}  {o['keys']:>10}  {_when(o['oldest_event_time'])}"
        )
    if "key" in result:
        lines.append(f"rows held for key {', '.join(result['key'])}:")
        for o in operators:
            for row in o.get("held", []):
                lines.append(f"  {o['operator']} {o['side']}: {json.dumps(row)}")
        return lines
    lines.append("largest keys:")
    for o in operators:
        for entry in o["largest_keys"]:
            lines.append(
                f"  {o['operator']} {o['side']}: {json.dumps(entry['key'])} {entry['rows']} rows"
            )
    return lines
