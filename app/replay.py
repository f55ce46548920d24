"""`streamjoin replay`: run the Flink oracle's join cases through this service's Spark pipeline.

The case format is the one of `shared/oracle/oracle.py` (streams with fields, rows with op and
optional event time `ts`, primary keys, rowtime, changelog mode; a structured `join`). Each
stream becomes the Kafka records `streamjoin run` would read for it: an insert-only stream JSON
rows (`json`), an upsert stream key and value or a tombstone (`upsert`), any other changelog
Debezium change events (`debezium-json`, an adjacent `-U` `+U` as one update). The records are
written to files, read back as a stream and go through the service's own decoding, watermarks,
changelog normalization and join processors, so what replay proves holds for `streamjoin run`.
The output is printed in the oracle's JSON-lines format, to be compared with the oracle's
`compare.py`.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import sqlglot
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import BooleanType, ByteType, StructField, StructType
from sqlglot.errors import ParseError

from app.config.env import InputConfig, JoinConfig
from app.plan.planner import JoinSpec, normalized
from app.run.joins import as_left_input, bucketed_join, multi_way_input, multi_way_join
from app.run.pipeline import (
    decode_input,
    join_input,
    normalize_changes,
    row_type,
    timed_changes,
)
from app.run.projection import project
from app.sql.ddl import SqlError, Table
from app.sql.query import MULTI_JOIN_OPTION, compile_query
from ops.metrics import CountsByLabel
from serdes.kafka.source import ARROW_SCHEMA
from serdes.records.decode import decoded_schema
from serdes.records.schema import parse_schema
from serdes.records.values import EPOCH
from state.changes import RowKind, opens_update
from state.expr.condition import FLINK_LEXICON
from state.joins.specs import (
    PROCTIME,
    STATE_BUCKETS,
    IntervalJoinSpec,
    MultiJoinSpec,
    RegularJoinSpec,
    SideSpec,
    TemporalJoinSpec,
)
from state.spark.columns import chained_column

WATERMARK_ONLY = "wm"  # the op of rows that only move a watermark
FAR_PAST_MS = -(10**13)
FAR_FUTURE_MS = 2 * 10**14  # year 8307: Spark timestamps end with year 9999
END_DELAY_MS = 10**13
SIDES = ("left", "right")
FORMATS = {"insert": "json", "upsert": "upsert", "all": "debezium-json"}
# The Kafka records of both inputs in one file per micro-batch: which input, and whether the
# row is only a watermark mark (it bypasses decoding: it has no columns but its time).
RECORDS_SCHEMA = StructType(
    [
        StructField("side", ByteType()),
        StructField("mark", BooleanType()),
        *from_arrow_schema(ARROW_SCHEMA).fields,
    ]
)


class CaseError(ValueError):
    """A case this service cannot run; reported as the case's `error` line."""


def load_cases(path: Path) -> list[dict[str, Any]]:
    """A file holds one case, a list of cases, or `{"cases": [...]}`."""
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        return data.get("cases", [data])
    return data


def _watermark_delay(stream: dict[str, Any]) -> int:
    """Flink's `"end"` watermark never moves before the input ends: an endless delay here."""
    mark = stream.get("watermark", "end")
    return END_DELAY_MS if mark == "end" else int(mark.get("delay_ms", 0))


def changelog_mode(stream: dict[str, Any]) -> str:
    """As the oracle decides: `insert` if every row is `+I`, else `all`, unless the case says."""
    if stream.get("changelog"):
        return stream["changelog"]
    return (
        "insert"
        if all(r.get("op", RowKind.INSERT) == RowKind.INSERT for r in stream["rows"])
        else "all"
    )


def stream_input(side: str, name: str, stream: dict[str, Any]) -> InputConfig:
    """The input `streamjoin run` would be configured with for this stream: its fields, then
    its rowtime column (TIMESTAMP(3), from each row's `ts`), as its event time."""
    columns = [f'"{field}" {sql_type}' for field, sql_type in stream["fields"]]
    if stream.get("rowtime"):
        columns.append(f'"{stream["rowtime"]}" TIMESTAMP(3)')
    mode = changelog_mode(stream)
    if mode not in FORMATS:
        raise CaseError(f"stream {name!r}: unknown changelog mode {mode!r}")
    return InputConfig(
        side=side,
        topic=name,
        format=FORMATS[mode],
        schema=tuple(parse_schema(", ".join(columns))),
        primary_key=tuple(stream.get("primary_key") or ()),
        time=stream.get("rowtime") or "proctime",
        watermark_delay_ms=_watermark_delay(stream),
    )


def _rows(stream: dict[str, Any]) -> list[tuple[str, int | None, dict[str, Any]]]:
    """(op, event time ms, {column: JSON value}) of every row, the rowtime column included."""
    names = [name for name, _ in stream["fields"]]
    rows = []
    for record in stream["rows"]:
        raw = record["v"]
        row = dict(raw) if isinstance(raw, dict) else dict(zip(names, raw, strict=True))
        if stream.get("rowtime"):
            row[stream["rowtime"]] = record["ts"]
        rows.append((record.get("op", RowKind.INSERT), record.get("ts"), row))
    return rows


Record = tuple[bytes | None, bytes | None, int | None]  # key, value, timestamp ms


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _debezium(op: str, before: dict | None, after: dict | None, ts: int | None) -> bytes:
    return _json({"before": before, "after": after, "op": op, "source": {"ts_ms": ts}})


def stream_records(stream: dict[str, Any], source: InputConfig) -> list[Record]:
    """The stream's rows as the Kafka records of its input format."""
    rows = _rows(stream)
    if source.format == "json":
        return [(None, _json(row), ts) for _op, ts, row in rows]
    if source.format == "upsert":
        records = []
        for op, ts, row in rows:
            if op == RowKind.UPDATE_BEFORE:
                raise CaseError("an upsert stream has no update-before (-U) rows")
            key = _json({c: row.get(c) for c in source.primary_key})
            records.append((key, None if op == RowKind.DELETE else _json(row), ts))
        return records
    records, i = [], 0
    while i < len(rows):
        op, ts, row = rows[i]
        if opens_update(rows, i):
            _, ts, after = rows[i + 1]
            records.append((None, _debezium("u", row, after, ts), ts))
            i += 2
            continue
        event = {RowKind.INSERT: ("c", None, row), RowKind.UPDATE_AFTER: ("u", None, row)}.get(
            op, ("d", row, None)
        )
        records.append((None, _debezium(*event, ts), ts))
        i += 1
    return records


RawRow = tuple[int, bool, bytes | None, bytes | None, str, int, int, datetime, None]


def _raw(side: int, mark: bool, record: Record, topic: str, offset: int) -> RawRow:
    key, value, ts = record
    timestamp = EPOCH + timedelta(milliseconds=ts or 0)
    return (side, mark, key, value, topic, 0, offset, timestamp, None)


def interleave(inputs: list[list[Record]], topics: tuple[str, ...]) -> list[RawRow]:
    """The inputs' records as one feed, taking from each input in turn, each in its own order;
    the offsets are the positions in the feed, so the changes' `seq` keep this order."""
    feed: list[RawRow] = []
    for i in range(max(map(len, inputs))):
        for side, records in enumerate(inputs):
            if i < len(records):
                feed.append(_raw(side, False, records[i], topics[side], len(feed)))
    return feed


def render(value: Any) -> Any:
    """As the oracle prints values: timestamps as epoch ms, decimals as strings."""
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, Decimal):
        return str(value)
    return value


def _join_output(case: dict[str, Any], sides: list[DataFrame],
                 sources: list[InputConfig]) -> DataFrame:  # fmt: skip
    """The case's joins over its inputs' changes (`_changes`), normalized where a join needs
    it, chained as `streamjoin run` chains them; the select list over the last."""
    join = case["join"]
    types = [row_type(s) for s in sources]
    first = JoinConfig(join.get("type", "regular"), join.get("kind", "INNER").lower(),
                       join.get("on"), None, 0)  # fmt: skip
    multi = multi_way(case)
    if multi is not None:
        inputs = []
        for index, (changes, source) in enumerate(zip(sides, sources, strict=True)):
            if normalized(source, first):
                changes = normalize_changes(changes, source, STATE_BUCKETS)
            inputs.append(multi_way_input(changes, index, multi, types[index],
                                          *_multi_way_sides(types)))  # fmt: skip
        joined = multi_way_join(
            functools.reduce(DataFrame.unionByName, inputs),
            multi,
            tuple(s.side for s in sources),
            *_multi_way_sides(types),
        )
        return project(joined, join["select"]) if join.get("select") else joined
    inputs = [join_input(changes, source, *types[:2], first, STATE_BUCKETS)
              for changes, source in zip(sides[:2], sources[:2], strict=True)]  # fmt: skip
    joined = _first_join(case, inputs[0].unionByName(inputs[1]), *types[:2])
    for number, (chained, source) in enumerate(zip(join.get("chain", ()), sources[2:],
                                                   strict=True), start=2):  # fmt: skip
        right_type = row_type(source)
        left_time = chained.get("left_time")
        left, left_type = as_left_input(joined, number, right_type, left_time)
        stage = JoinConfig(chained.get("type", "regular"), chained["kind"].lower(),
                           chained["on"], None, 0)  # fmt: skip
        right = join_input(sides[number], source, left_type, right_type, stage, STATE_BUCKETS)
        spec = _spec(stage, SideSpec(tuple(left_type.names), ()),
                     SideSpec(tuple(right_type.names), source.primary_key), left_time,
                     source.time)  # fmt: skip
        joined = bucketed_join(left.unionByName(right), spec, left_type, right_type,
                               sequenced=True, number=number)  # fmt: skip
    select = join.get("select")
    return project(joined, select) if select else joined.drop("seq")


def case_inputs(case: dict[str, Any]) -> list[InputConfig]:
    """The inputs of a case's joins (its structured `join`), in the order they are joined."""
    join, streams = case["join"], case["streams"]
    names = (join["left"], join["right"], *(c["right"] for c in join.get("chain", ())))
    labels = [*SIDES, *(f"input{n}" for n in range(3, len(names) + 1))]
    return [stream_input(label, name, streams[name])
            for label, name in zip(labels, names, strict=True)]  # fmt: skip


def multi_way(case: dict[str, Any]) -> MultiJoinSpec | None:
    """A chain of regular joins as one multi-way operator, where the case's Flink options ask
    for it (`table.optimizer.multi-join.enabled`) and Flink would build one."""
    join, sources = case["join"], case_inputs(case)
    conf = case.get("options", {}).get("flink_conf", {})
    if str(conf.get(MULTI_JOIN_OPTION, "")).lower() != "true" or not join.get("chain"):
        return None
    if any(j.get("type", "regular") != "regular" for j in (join, *join["chain"])):
        return None
    specs = [RegularJoinSpec(join.get("kind", "INNER").lower(), join["on"],
                             *(SideSpec(tuple(row_type(s).names), s.primary_key)
                               for s in sources[:2]))]  # fmt: skip
    for number, (chained, source) in enumerate(zip(join["chain"], sources[2:], strict=True), 2):
        left = [chained_column(i, name) for i, s in enumerate(sources[:number])
                for name in row_type(s).names]  # fmt: skip
        right = SideSpec(tuple(row_type(source).names), source.primary_key)
        specs.append(RegularJoinSpec(chained["kind"].lower(), chained["on"],
                                     SideSpec(tuple(left)), right))  # fmt: skip
    return MultiJoinSpec.of_chain(specs)


def _multi_way_sides(types: list[StructType]) -> tuple[StructType, StructType]:
    """The multi-way join's left (every input's columns but the last's, as the chain's last
    join takes them) and right (the last input's)."""
    left = StructType([StructField(chained_column(i, f.name), f.dataType)
                       for i, row in enumerate(types[:-1]) for f in row])  # fmt: skip
    return left, types[-1]


def _first_join(case: dict[str, Any], changes: DataFrame, left: StructType,
                right: StructType) -> DataFrame:  # fmt: skip
    """The case's first join, each change with its `seq` where another join follows."""
    join, streams = case["join"], case["streams"]
    sequenced = bool(join.get("chain"))
    kind = join.get("kind", "INNER").lower()
    sides = (
        SideSpec(tuple(left.names), tuple(streams[join["left"]].get("primary_key") or ())),
        SideSpec(tuple(right.names), tuple(streams[join["right"]].get("primary_key") or ())),
    )
    stage = JoinConfig(join.get("type", "regular"), kind, join["on"], None, 0)
    times = [streams[join[side]].get("rowtime") for side in ("left", "right")]
    spec = _spec(stage, *sides, *times)
    return bucketed_join(changes, spec, left, right, sequenced=sequenced)


def _spec(join: JoinConfig, left: SideSpec, right: SideSpec, left_time: str | None,
          right_time: str | None) -> JoinSpec:  # fmt: skip
    """A case's join of two, its inputs' rowtimes (None: none) as `left_time`/`right_time`."""
    if join.type == "regular":
        return RegularJoinSpec(join.kind, join.on or "", left, right)
    if join.type not in ("interval", "temporal", "temporal-function"):
        raise CaseError(f"join type {join.type!r} is not supported yet")
    if not left_time or not right_time or right_time == PROCTIME:
        raise CaseError(f"an event-time {join.type} join needs a rowtime on both streams")
    if join.type == "interval":
        return IntervalJoinSpec(join.kind, join.on or "", left, right, left_time, right_time)
    return TemporalJoinSpec(join.kind, join.on or "", left, right, left_time)  # versions


def batches(case: dict[str, Any], feed: list[RawRow], topics: tuple[str, ...]) -> list[list]:
    """The micro-batches the input is fed in.

    A regular join takes everything at once. The time-based joins see the watermark move as
    Flink's would: in `"end"` mode not before a last batch that moves both inputs' watermarks
    past every row (then one more batch, where the timers fire); with a `delay_ms`, row by row,
    each row seeing the watermark of the rows before it. A first pair of rows far in the past
    makes both inputs known to Spark, whose watermark otherwise follows the only input seen
    while Flink's waits for both. A case's `options.replay_batch_rows` (this service's own
    option) feeds that many rows per batch instead of one.
    """
    join = case["join"]
    if all(j.get("type", "regular") == "regular" for j in (join, *join.get("chain", ()))):
        return [feed]

    def marks(ts: int) -> list[RawRow]:
        return [_raw(side, True, (None, None, ts), topic, -1) for side, topic in enumerate(topics)]

    streams = case["streams"]
    row_by_row = any(_watermark_delay(streams[name]) != END_DELAY_MS for name in topics)
    size = case.get("options", {}).get("replay_batch_rows", 1) if row_by_row else len(feed)
    data = [feed[i : i + size] for i in range(0, len(feed), size)] or [[]]
    return [marks(FAR_PAST_MS) + data[0], *data[1:], marks(FAR_FUTURE_MS), marks(FAR_PAST_MS)]


def _marks(raw: DataFrame, source: InputConfig) -> DataFrame:
    """An input's watermark marks as decoded rows: nothing but an event time."""
    values = {"op": F.lit(WATERMARK_ONLY), "seq": F.lit(-1), "event_time": F.col("timestamp")}
    values |= {c: F.col(c) for c in ("timestamp", "topic", "partition", "offset")}
    return raw.where(F.col("mark")).select(
        *[values.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
          for f in decoded_schema(row_type(source))]
    )  # fmt: skip


def _changes(raw: DataFrame, sources: list[InputConfig], tally: Any) -> list[DataFrame]:
    """Each input decoded, under its watermark, as `streamjoin run` does with a new
    checkpoint."""
    sides = []
    for index, source in enumerate(sources):
        records = raw.where(F.col("side") == index)
        decoded = decode_input(records.where(~F.col("mark")).drop("side", "mark"), None, source,
                               tally).unionByName(_marks(records, source))  # fmt: skip
        # one predicate that refers to the event time: Spark keeps it above the watermark
        sides.append(timed_changes(decoded, source).where(
            (F.col("op") != WATERMARK_ONLY) | F.col("ts").isNull()
        ))  # fmt: skip
    return sides


def _staged(spark: SparkSession, rows: list[RawRow], work: Path, number: int) -> None:
    """One batch's records as one parquet file of the input directory (renamed in whole)."""
    staging = work / "staging" / str(number)
    spark.createDataFrame(rows, RECORDS_SCHEMA).coalesce(1).write.parquet(str(staging))
    (part,) = staging.glob("part-*.parquet")
    part.rename(work / "input" / f"{number:06d}.parquet")


def _cause(failure: str) -> str:
    """The innermost `SomeError: message` line of a failed query's report (a Python worker's
    traceback is inside it), else its first line."""
    causes = re.findall(r"^\s*(\w*(?:Error|Exception): .+)$", failure, re.MULTILINE)
    return causes[-1].strip() if causes else failure.splitlines()[0]


def sql_join(case: dict[str, Any]) -> dict[str, Any]:
    """The structured join of a case given as `sql` (the oracle's query over its streams),
    compiled as `STREAMJOIN_SQL`'s query is (`app.sql.query`): Flink and replay run one text."""
    if "sql" not in case:
        raise CaseError("a case needs a `join` or a `sql`")
    tables = {}
    for name, stream in case["streams"].items():
        table = Table(name, 1, primary_key=tuple(stream.get("primary_key") or ()))
        for field, sql_type in stream["fields"]:
            declared = re.sub(r"\s+NOT\s+NULL\s*$", "", sql_type, flags=re.I)
            table.physical.append((field, declared))
            table.declared.append(field)
            if declared != sql_type:
                table.not_null.add(field)
        if stream.get("rowtime"):
            table.physical.append((stream["rowtime"], "TIMESTAMP_LTZ(3)"))
            table.declared.append(stream["rowtime"])
            table.watermark = (stream["rowtime"], 0)
        tables[name] = table
    try:
        queries, members = compile_query(1, sqlglot.parse_one(case["sql"], read=FLINK_LEXICON),
                                         tables, None)  # fmt: skip
    except (SqlError, ParseError) as err:
        raise CaseError(f"sql: {err}") from None
    first = queries[0]
    chain = [{"type": q.type, "kind": q.kind.upper(), "right": table.name, "on": q.on,
              "left_time": q.left_time}
             for q, table in zip(queries[1:], members[2:], strict=True)]  # fmt: skip
    return {
        "type": first.type,
        "kind": first.kind.upper(),
        "left": first.left,
        "right": first.right,
        "on": first.on,
        "select": queries[-1].select,
        "chain": chain,
    }


def run_case(
    spark: SparkSession, case: dict[str, Any], work: Path, progress: list[dict] | None = None
) -> list[tuple[str, dict]]:
    """The output changelog of one case: (op, {column: value}) in emission order.

    `progress`, if given, receives the query's progress after every batch fed. A record that
    could not be decoded fails the case, naming why.
    """
    case = {**case, "join": case["join"] if "join" in case else sql_join(case)}
    streams = case["streams"]
    sources = case_inputs(case)
    names = tuple(source.topic for source in sources)
    feed = interleave(
        [stream_records(streams[n], s) for n, s in zip(names, sources, strict=True)], names
    )
    (work / "input").mkdir()
    fed = batches(case, feed, names)
    _staged(spark, fed[0], work, 0)
    raw = spark.readStream.schema(RECORDS_SCHEMA).option("maxFilesPerTrigger", 1)
    dead = spark.sparkContext.accumulator({}, CountsByLabel())
    changes = _changes(raw.parquet(str(work / "input")), sources, dead)
    output = _join_output(case, changes, sources)
    collected: list = []
    query = (
        output.writeStream.foreachBatch(lambda batch, _id: collected.extend(batch.collect()))
        .option("checkpointLocation", str(work / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        for number, rows in enumerate(fed[1:], start=1):
            if progress is not None:
                progress.append(query.lastProgress)
            _staged(spark, rows, work, number)
            query.processAllAvailable()
    except StreamingQueryException as err:
        raise CaseError(_cause(str(err))) from None
    finally:
        query.stop()
    if dead.value:
        found = ", ".join(f"{side} {reason}: {n}" for (side, reason), n in dead.value.items())
        raise CaseError(f"records that could not be decoded ({found})")
    columns = [n for n in output.columns if n != "op"]
    return [(row.op, {n: render(row[n]) for n in columns}) for row in collected]


def write_case(
    out: TextIO, case_id: str, changes: list[tuple[str, dict]], materialize: bool
) -> None:
    """The oracle's lines: one per change, then (materialized) the final multiset."""
    final: Counter[str] = Counter()
    for seq, (op, row) in enumerate(changes):
        out.write(json.dumps({"case": case_id, "seq": seq, "op": op, "row": row}) + "\n")
        final[json.dumps(list(row.values()))] += 1 if op in RowKind.ACCUMULATE else -1
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
