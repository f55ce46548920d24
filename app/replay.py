"""`streamjoin replay`: run the Flink oracle's join cases through this service's Spark pipeline.

The case format is the one of `shared/oracle/oracle.py` (streams with fields, rows with op and
optional event time `ts`, primary keys, rowtime; a structured `join`). Each case's input is
written to files and read back as a stream, so it passes through the same processors as
`streamjoin run`, and the output is printed in the oracle's JSON-lines format, so the two can
be compared with the oracle's `compare.py`.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DecimalType, StructField, StructType, TimestampType

from app.join_plan import changelog_schema, regular_join
from app.projection import project
from serdes.schema import parse_schema
from state.regular_processor import RegularJoinSpec, SideSpec


class CaseError(ValueError):
    """A case this service cannot run; reported as the case's `error` line."""


def load_cases(path: Path) -> list[dict[str, Any]]:
    """A file holds one case, a list of cases, or `{"cases": [...]}`."""
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        return data.get("cases", [data])
    return data


def stream_schema(stream: dict[str, Any]) -> StructType:
    """The stream's fields, then its rowtime column (TIMESTAMP_LTZ(3) from the row's `ts`)."""
    columns = parse_schema(", ".join(f'"{name}" {sql_type}' for name, sql_type in stream["fields"]))
    fields = [StructField(c.name, c.spark_type) for c in columns]
    if stream.get("rowtime"):
        fields.append(StructField(stream["rowtime"], TimestampType()))
    return StructType(fields)


def _typed(value: Any, field: StructField) -> Any:
    if value is None:
        return None
    if isinstance(field.dataType, DecimalType):
        return Decimal(str(value))
    return value


def stream_rows(stream: dict[str, Any], schema: StructType) -> list[tuple[str, tuple[Any, ...]]]:
    """(op, row) for every input row, typed as the schema says."""
    names = [name for name, _ in stream["fields"]]
    rows = []
    for record in stream["rows"]:
        raw = record["v"]
        values = [raw.get(n) for n in names] if isinstance(raw, dict) else list(raw)
        if stream.get("rowtime"):
            values.append(datetime.fromtimestamp(record["ts"] / 1000, tz=timezone.utc))
        typed = tuple(_typed(v, f) for v, f in zip(values, schema.fields, strict=True))
        rows.append((record.get("op", "+I"), typed))
    return rows


def interleave(left: list, right: list) -> Iterable[tuple[int, str, int, Any, Any]]:
    """Both inputs as one changelog, alternating sides, each side in its own order."""
    for i in range(max(len(left), len(right))):
        if i < len(left):
            yield (0, left[i][0], 2 * i, left[i][1], None)
        if i < len(right):
            yield (1, right[i][0], 2 * i + 1, None, right[i][1])


def render(value: Any) -> Any:
    """As the oracle prints values: timestamps as epoch ms, decimals as strings."""
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, Decimal):
        return str(value)
    return value


def _join_output(case: dict[str, Any], changes: DataFrame, left: StructType,
                 right: StructType) -> DataFrame:  # fmt: skip
    join = case["join"]
    kind = join.get("kind", "INNER").lower()
    if join.get("type", "regular") != "regular":
        raise CaseError(f"join type {join.get('type')!r} is not supported yet")
    streams = case["streams"]
    spec = RegularJoinSpec(
        kind=kind,
        on=join["on"],
        left=SideSpec(tuple(left.names), tuple(streams[join["left"]].get("primary_key") or ())),
        right=SideSpec(tuple(right.names), tuple(streams[join["right"]].get("primary_key") or ())),
    )
    joined = regular_join(changes, spec, left, right)
    return project(joined, join.get("select")) if join.get("select") else joined


def run_case(spark: SparkSession, case: dict[str, Any], work: Path) -> list[tuple[str, dict]]:
    """The output changelog of one case: (op, {column: value}) in emission order."""
    if "join" not in case:
        raise CaseError("only structured `join` cases can be replayed, not `sql`")
    join, streams = case["join"], case["streams"]
    left_schema = stream_schema(streams[join["left"]])
    right_schema = stream_schema(streams[join["right"]])
    schema = changelog_schema(left_schema, right_schema)
    rows = interleave(
        stream_rows(streams[join["left"]], left_schema),
        stream_rows(streams[join["right"]], right_schema),
    )
    spark.createDataFrame(list(rows), schema).coalesce(1).write.parquet(str(work / "input"))
    changes = spark.readStream.schema(schema).parquet(str(work / "input"))
    output = _join_output(case, changes, left_schema, right_schema)
    collected: list = []
    query = (
        output.writeStream.foreachBatch(lambda batch, _id: collected.extend(batch.collect()))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise CaseError(str(query.exception()).splitlines()[0])
    names = [n for n in output.columns if n != "op"]
    return [(row.op, {n: render(row[n]) for n in names}) for row in collected]


def write_case(
    out: TextIO, case_id: str, changes: list[tuple[str, dict]], materialize: bool
) -> None:
    """The oracle's lines: one per change, then (materialized) the final multiset."""
    final: Counter[str] = Counter()
    for seq, (op, row) in enumerate(changes):
        out.write(json.dumps({"case": case_id, "seq": seq, "op": op, "row": row}) + "\n")
        final[json.dumps(list(row.values()))] += 1 if op in ("+I", "+U") else -1
    if materialize:
        table = [[json.loads(k), c] for k, c in sorted(final.items()) if c != 0]
        out.write(json.dumps({"case": case_id, "final": table}) + "\n")


def replay(spark: SparkSession, paths: list[Path], out: TextIO, materialize: bool) -> int:
    """Run every case of every file; exit code 1 if any case failed."""
    failed = 0
    for path in paths:
        for case in load_cases(path):
            try:
                with tempfile.TemporaryDirectory(prefix="streamjoin-replay-") as work:
                    changes = run_case(spark, case, Path(work))
            except (CaseError, KeyError, ValueError) as err:
                failed += 1
                out.write(json.dumps({"case": case.get("id"), "error": str(err)}) + "\n")
                continue
            write_case(out, case.get("id"), changes, materialize)
            out.flush()
    return 1 if failed else 0
