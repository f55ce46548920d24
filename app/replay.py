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

import json
import re
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from sqlglot.errors import ParseError

from app.config.env import ChainedJoin, Config, InputConfig, JoinConfig, OutputConfig
from app.config.sql.ddl import SqlError, Table
from app.config.sql.query import MINI_BATCH_OPTION, MULTI_JOIN_OPTION, compile_query
from app.config.sql.windows import readable
from app.config.windows import windowing
from app.plan.planner import StateLayout, query_plan
from app.plan.projection import filtered, project
from app.run.builder import joined_changes
from app.run.inputs import decode_input, row_type, timed_changes
from ops.metrics import CountsByLabel
from serdes.kafka.decode import decoded_schema
from serdes.kafka.source import ARROW_SCHEMA
from serdes.records.encode import CAST_ERROR, FAILED_ROW
from serdes.records.schema import parse_schema
from state.changes import EPOCH, SIDES, RowKind, opens_update
from state.expr.condition import FLINK_LEXICON
from state.joins.specs import PROCTIME, STATE_BUCKETS

WATERMARK_ONLY = "wm"  # the op of rows that only move a watermark
FAR_PAST_MS = -(10**13)
FAR_FUTURE_MS = 2 * 10**14  # year 8307: Spark timestamps end with year 9999
END_DELAY_MS = 10**13
CHANGELOG_FORMATS = {"insert": "json", "upsert": "upsert", "all": "debezium-json"}
# The Kafka records of both inputs in one file per micro-batch: which input, and whether the
# row is only a watermark mark (it bypasses decoding: it has no columns but its time).
STAGED_SCHEMA = pa.schema([("side", pa.int8()), ("mark", pa.bool_()), *ARROW_SCHEMA])
RECORDS_SCHEMA = from_arrow_schema(STAGED_SCHEMA)


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
    if mode not in CHANGELOG_FORMATS:
        raise CaseError(f"stream {name!r}: unknown changelog mode {mode!r}")
    return InputConfig(
        side=side,
        topic=name,
        format=CHANGELOG_FORMATS[mode],
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


def _as_output_topic(projected: DataFrame) -> DataFrame:
    """The rows the output topic gets: without those a CAST failed on (the service sends them
    to the dead-letter topic; Flink's job fails), nor the failure's columns."""
    if CAST_ERROR not in projected.columns:
        return projected
    return projected.where(F.col(CAST_ERROR).isNull()).drop(CAST_ERROR, FAILED_ROW)


def render(value: Any) -> Any:
    """As the oracle prints values: timestamps as epoch ms, dates ISO, decimals as Flink's CAST
    to STRING writes them (`0.0000000000000`, not Python's `0E-13`)."""
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, date):  # no JSON type: the replay stopped on it
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    return value


# The joins a case may run (a lookup join's table is a database's)
SUPPORTED_TYPES = ("regular", "interval", "temporal", "temporal-function", "window")


def _join(join: dict[str, Any], select: str | None = None, where: str | None = None) -> JoinConfig:
    """A case's join (a window join's windows as `JOIN_WINDOW` takes them)."""
    window = windowing(join["window"]) if "window" in join else None
    return JoinConfig(
        join.get("type", "regular"),
        join.get("kind", "INNER").lower(),
        join.get("on"),
        select,
        0,
        where=where,
        window=window,
    )


def case_config(case: dict[str, Any]) -> Config:
    """The configuration `streamjoin run` would run the case's joins with: its streams as the
    inputs (`case_inputs`), its joins in order, Flink's multi-way join where the case's Flink
    options ask for it; the output an unused retract topic (replay collects the changes)."""
    join, sources = case["join"], case_inputs(case)
    chain = tuple(
        ChainedJoin(source, _join(chained), left_time=chained.get("left_time") or PROCTIME)
        for chained, source in zip(join.get("chain", ()), sources[2:], strict=True)
    )
    conf = case.get("options", {}).get("flink_conf", {})
    multi_way = str(conf.get(MULTI_JOIN_OPTION, "")).lower() == "true"
    for stage, left_time, right in [
        (join, sources[0].time, sources[1]),
        *(
            (c, c.get("left_time"), s)
            for c, s in zip(join.get("chain", ()), sources[2:], strict=True)
        ),
    ]:
        kind = stage.get("type", "regular")
        if kind not in SUPPORTED_TYPES:
            raise CaseError(f"join type {kind!r} is not supported yet")
        if kind != "regular" and PROCTIME in (left_time or PROCTIME, right.time):
            raise CaseError(f"an event-time {kind} join needs a rowtime on both streams")
    output = OutputConfig("replay", "", "retract", "json", (), "at-least-once", "", "")
    return Config(
        "",
        sources[0],
        sources[1],
        _join(join, join.get("select"), join.get("where")),
        output,
        "",
        "",
        None,
        "earliest",
        None,
        0,
        0,
        chain=chain,
        multi_way=f"{MULTI_JOIN_OPTION} (the case's options)" if multi_way else None,
        mini_batch=str(conf.get(MINI_BATCH_OPTION, "")).lower() == "true",
    )


def case_inputs(case: dict[str, Any]) -> list[InputConfig]:
    """The inputs of a case's joins (its structured `join`), in the order they are joined."""
    join, streams = case["join"], case["streams"]
    names = (join["left"], join["right"], *(c["right"] for c in join.get("chain", ())))
    labels = [*SIDES, *(f"input{n}" for n in range(3, len(names) + 1))]
    return [
        stream_input(label, name, streams[name]) for label, name in zip(labels, names, strict=True)
    ]


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
        *[
            values.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
            for f in decoded_schema(row_type(source))
        ]
    )


def _changes(raw: DataFrame, sources: list[InputConfig], tally: Any) -> list[DataFrame]:
    """Each input decoded, under its watermark, as `streamjoin run` does with a new
    checkpoint."""
    sides = []
    for index, source in enumerate(sources):
        records = raw.where(F.col("side") == index)
        decoded = decode_input(
            records.where(~F.col("mark")).drop("side", "mark"), None, source, tally
        ).unionByName(_marks(records, source))
        # one predicate that refers to the event time: Spark keeps it above the watermark
        sides.append(
            timed_changes(decoded, source).where(
                (F.col("op") != WATERMARK_ONLY) | F.col("ts").isNull()
            )
        )
    return sides


def _staged(rows: list[RawRow], work: Path, number: int) -> None:
    """One batch's records as one parquet file of the input directory (renamed in whole),
    written by Arrow in this process: a Spark job per batch would cost more than the batch."""
    staging = work / "staging"
    staging.mkdir(exist_ok=True)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(STAGED_SCHEMA)
    table = pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, STAGED_SCHEMA, strict=True)],
        schema=STAGED_SCHEMA,
    )
    part = staging / f"{number:06d}.parquet"
    pq.write_table(table, part)
    part.rename(work / "input" / part.name)


def _cause(failure: str) -> str:
    """The innermost `SomeError: message` line of a failed query's report (a Python worker's
    traceback is inside it), else its first line."""
    causes = re.findall(r"^\s*(\w*(?:Error|Exception): .+)$", failure, re.MULTILINE)
    return causes[-1].strip() if causes else failure.splitlines()[0]


def sql_join(case: dict[str, Any]) -> dict[str, Any]:
    """The structured join of a case given as `sql` (the oracle's query over its streams),
    compiled as `STREAMJOIN_SQL`'s query is (`app.config.sql.query`): Flink and replay run one
    text."""
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
        queries, members, _names = compile_query(
            1, sqlglot.parse_one(readable(1, case["sql"]), read=FLINK_LEXICON), tables, None
        )
    except (SqlError, ParseError) as err:
        raise CaseError(f"sql: {err}") from None
    first = queries[0]
    chain = [
        {
            "type": q.type,
            "kind": q.kind.upper(),
            "right": table.name,
            "on": q.on,
            "left_time": q.left_time,
        }
        for q, table in zip(queries[1:], members[2:], strict=True)
    ]
    return (
        {
            "type": first.type,
            "kind": first.kind.upper(),
            "left": first.left,
            "right": first.right,
            "on": first.on,
            "select": queries[-1].select,
            "chain": chain,
        }
        | ({"window": first.window} if first.window else {})
        | ({"where": queries[-1].where} if queries[-1].where else {})
    )


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
    _staged(fed[0], work, 0)
    raw = spark.readStream.schema(RECORDS_SCHEMA).option("maxFilesPerTrigger", 1)
    dead = spark.sparkContext.accumulator({}, CountsByLabel())
    changes = _changes(raw.parquet(str(work / "input")), sources, dead)
    by_side = {source.side: side for source, side in zip(sources, changes, strict=True)}
    plan = query_plan(case_config(case), StateLayout(STATE_BUCKETS))
    joined = joined_changes(plan, lambda source: by_side[source.side], None)
    select, where = plan.last.join.select, plan.last.join.where
    if where:
        joined = filtered(joined, where)
    output = _as_output_topic(project(joined, select)) if select else joined.drop("seq")
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
            _staged(rows, work, number)
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


def _outcome(spark: SparkSession, case: dict[str, Any]) -> list[tuple[str, dict]] | str:
    """A case's output changelog, or why it could not run."""
    try:
        # Spark's state maintenance, a thread of its own, may still write a snapshot of the
        # stopped query's stores into its checkpoint while the folder is being removed: the
        # case's outcome stands, and what that write leaves is left to the system's cleanup.
        with tempfile.TemporaryDirectory(
            prefix="streamjoin-replay-", ignore_cleanup_errors=True
        ) as work:
            return run_case(spark, case, Path(work))
    except (CaseError, KeyError, ValueError, AnalysisException) as err:
        return str(err)


def replay(
    spark: SparkSession, paths: list[Path], out: TextIO, materialize: bool, parallel: int = 1
) -> int:
    """Run every case of every file, `parallel` cases at once (each is a query of its own, whose
    start and micro-batches leave the cores idle for parts of their time), writing their lines
    in the files' order; exit code 1 if any case failed."""
    cases = [case for path in paths for case in load_cases(path)]
    failed = 0
    with ThreadPoolExecutor(max(parallel, 1)) as pool:
        for case, outcome in zip(cases, pool.map(lambda c: _outcome(spark, c), cases), strict=True):
            if isinstance(outcome, str):
                failed += 1
                out.write(json.dumps({"case": case.get("id"), "error": outcome}) + "\n")
                continue
            write_case(out, case.get("id"), outcome, materialize)
            out.flush()
    return 1 if failed else 0
