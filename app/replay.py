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
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, StructField, StructType, TimestampType

from app.join_plan import bucketed_join, changelog_schema, regular_join
from app.projection import project
from serdes.schema import parse_schema
from state.interval_processor import IntervalJoinSpec
from state.regular_processor import RegularJoinSpec, SideSpec
from state.temporal_processor import TemporalJoinSpec

WATERMARK_ONLY = "wm"  # the op of rows that only move a watermark
FAR_PAST_MS = -(10**13)
FAR_FUTURE_MS = 2 * 10**14  # year 8307: Spark timestamps end with year 9999
END_DELAY_MS = 10**13


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


def stream_rows(
    stream: dict[str, Any], schema: StructType
) -> list[tuple[str, int | None, tuple[Any, ...]]]:
    """(op, event time ms, row) for every input row, typed as the schema says."""
    names = [name for name, _ in stream["fields"]]
    rows = []
    for record in stream["rows"]:
        raw = record["v"]
        values = [raw.get(n) for n in names] if isinstance(raw, dict) else list(raw)
        if stream.get("rowtime"):
            values.append(datetime.fromtimestamp(record["ts"] / 1000, tz=timezone.utc))
        typed = tuple(_typed(v, f) for v, f in zip(values, schema.fields, strict=True))
        rows.append((record.get("op", "+I"), record.get("ts"), typed))
    return rows


Change = tuple[int, str, int, int | None, Any, Any]  # side, op, seq, ts, left, right


def interleave(left: list, right: list) -> list[Change]:
    """Both inputs as one changelog, alternating sides, each side in its own order."""
    changes: list[Change] = []
    for i in range(max(len(left), len(right))):
        if i < len(left):
            op, ts, row = left[i]
            changes.append((0, op, 2 * i, ts, row, None))
        if i < len(right):
            op, ts, row = right[i]
            changes.append((1, op, 2 * i + 1, ts, None, row))
    return changes


def render(value: Any) -> Any:
    """As the oracle prints values: timestamps as epoch ms, decimals as strings."""
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, Decimal):
        return str(value)
    return value


def _join_output(case: dict[str, Any], changes: DataFrame, left: StructType,
                 right: StructType) -> DataFrame:  # fmt: skip
    join, streams = case["join"], case["streams"]
    kind = join.get("kind", "INNER").lower()
    sides = (
        SideSpec(tuple(left.names), tuple(streams[join["left"]].get("primary_key") or ())),
        SideSpec(tuple(right.names), tuple(streams[join["right"]].get("primary_key") or ())),
    )
    join_type = join.get("type", "regular")
    if join_type == "regular":
        joined = regular_join(changes, RegularJoinSpec(kind, join["on"], *sides), left, right)
    elif join_type == "interval":
        times = [streams[join[side]].get("rowtime") for side in ("left", "right")]
        if not all(times):
            raise CaseError("an interval join needs a rowtime on both streams")
        spec = IntervalJoinSpec(kind, join["on"], *sides, *times)
        joined = bucketed_join(changes, spec, left, right)
    elif join_type == "temporal":
        probe_time = streams[join["left"]].get("rowtime")
        if not probe_time or not streams[join["right"]].get("rowtime"):
            raise CaseError("an event-time temporal join needs a rowtime on both streams")
        temporal = TemporalJoinSpec(kind, join["on"], *sides, probe_time)
        joined = bucketed_join(changes, temporal, left, right)
    else:
        raise CaseError(f"join type {join_type!r} is not supported yet")
    return project(joined, join.get("select")) if join.get("select") else joined


def _watermark_delay(stream: dict[str, Any]) -> int:
    """Flink's `"end"` watermark never moves before the input ends: an endless delay here."""
    mark = stream.get("watermark", "end")
    return END_DELAY_MS if mark == "end" else int(mark.get("delay_ms", 0))


def batches(case: dict[str, Any], changes: list[Change]) -> list[list[Change]]:
    """The micro-batches the input is fed in.

    A regular join takes everything at once. The time-based joins see the watermark move as
    Flink's would: in `"end"` mode not before a last batch that moves both inputs' watermarks
    past every row (then one more batch, where the timers fire); with a `delay_ms`, row by row,
    each row seeing the watermark of the rows before it. A first pair of rows far in the past
    makes both inputs known to Spark, whose watermark otherwise follows the only input seen
    while Flink's waits for both. A case's `options.replay_batch_rows` (this service's own
    option) feeds that many rows per batch instead of one.
    """
    if case["join"].get("type", "regular") == "regular":
        return [changes]

    def marks(ts: int) -> list[Change]:
        return [(side, WATERMARK_ONLY, -1, ts, None, None) for side in (0, 1)]

    streams = case["streams"]
    row_by_row = any(
        _watermark_delay(streams[case["join"][side]]) != END_DELAY_MS for side in ("left", "right")
    )
    size = case.get("options", {}).get("replay_batch_rows", 1) if row_by_row else len(changes)
    data = [changes[i : i + size] for i in range(0, len(changes), size)] or [[]]
    return [marks(FAR_PAST_MS) + data[0], *data[1:], marks(FAR_FUTURE_MS), marks(FAR_PAST_MS)]


def _with_watermarks(changes: DataFrame, case: dict[str, Any]) -> DataFrame:
    """Each input's own watermark; Spark's global one is their minimum, as Flink's."""
    if case["join"].get("type", "regular") == "regular":
        return changes
    sides = []
    for side, name in enumerate(("left", "right")):
        delay = _watermark_delay(case["streams"][case["join"][name]])
        timed = changes.where(F.col("side") == side).withColumn(
            "event_time", F.timestamp_millis("ts")
        )
        sides.append(
            timed.withWatermark("event_time", f"{delay} milliseconds")
            # one predicate that refers to event_time: Spark keeps it above the watermark
            .where((F.col("op") != WATERMARK_ONLY) | F.col("event_time").isNull())
            .drop("event_time")
        )
    return sides[0].unionByName(sides[1])


def _staged(spark: SparkSession, rows: list[Change], schema: StructType, work: Path,
            number: int) -> None:  # fmt: skip
    """One batch's rows as one parquet file of the input directory (renamed in whole)."""
    staging = work / "staging" / str(number)
    spark.createDataFrame(rows, schema).coalesce(1).write.parquet(str(staging))
    (part,) = staging.glob("part-*.parquet")
    part.rename(work / "input" / f"{number:06d}.parquet")


def run_case(
    spark: SparkSession, case: dict[str, Any], work: Path, progress: list[dict] | None = None
) -> list[tuple[str, dict]]:
    """The output changelog of one case: (op, {column: value}) in emission order.

    `progress`, if given, receives the query's progress after every batch fed.
    """
    if "join" not in case:
        raise CaseError("only structured `join` cases can be replayed, not `sql`")
    join, streams = case["join"], case["streams"]
    left_schema = stream_schema(streams[join["left"]])
    right_schema = stream_schema(streams[join["right"]])
    schema = changelog_schema(left_schema, right_schema)
    changes = interleave(
        stream_rows(streams[join["left"]], left_schema),
        stream_rows(streams[join["right"]], right_schema),
    )
    (work / "input").mkdir()
    feed = batches(case, changes)
    _staged(spark, feed[0], schema, work, 0)
    source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
    output = _join_output(
        case, _with_watermarks(source.parquet(str(work / "input")), case), left_schema,
        right_schema,
    )  # fmt: skip
    collected: list = []
    query = (
        output.writeStream.foreachBatch(lambda batch, _id: collected.extend(batch.collect()))
        .option("checkpointLocation", str(work / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        for number, rows in enumerate(feed[1:], start=1):
            if progress is not None:
                progress.append(query.lastProgress)
            _staged(spark, rows, schema, work, number)
            query.processAllAvailable()
    except StreamingQueryException as err:
        raise CaseError(str(err).splitlines()[0]) from None
    finally:
        query.stop()
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
            except (CaseError, KeyError, ValueError, AnalysisException) as err:
                failed += 1
                out.write(json.dumps({"case": case.get("id"), "error": str(err)}) + "\n")
                continue
            write_case(out, case.get("id"), changes, materialize)
            out.flush()
    return 1 if failed else 0
