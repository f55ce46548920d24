"""The lookup join (`JOIN_TYPE=lookup`): the table's columns from its catalog, the plan's
checks, and the Spark wiring, thin around `state.joins.lookup_join` and `serdes.postgres.client`.

The left input is decoded as every input is, then (`LOOKUP_SHUFFLE`, on by default) partitioned
by the join key, so each key's lookups land in one task and its worker's cache (Flink's
lookup-shuffle hint does the same). Each task joins an Arrow batch at a time: the batch's
distinct keys are answered from the worker's cache, the rest fetched in as few queries as
`serdes.postgres.client` makes them, then every row is joined
(`state.joins.lookup_join.LookupJoin`).
The output's left columns are taken from the input batch by index, in Arrow, never turned into
Python objects, and the table's columns are built from the distinct rows matched: several times
cheaper than turning every pair into a Python tuple and back into Arrow columns
(`docs/performance.md`).
The caches and the connection pool live per Python worker process, which Spark reuses across
tasks and micro-batches (`spark.python.worker.reuse`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Accumulator, TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import LongType, StringType, StructField, StructType

from app.config.env import Config, ConfigError, InputConfig, traced
from app.config.lookup_table import LookupConfig
from app.plan.table_lookup import shuffled, table_lookup
from ops.worker.collector import settle_worker
from serdes.kafka.dead_letters import DeadLetterTopic
from serdes.kafka.decode import Tally
from serdes.kafka.produce import OutputRecord
from serdes.postgres.client import (
    LookupFailed,
    PostgresTable,
    TableLookup,
    TableUnavailable,
    flink_type,
    table_columns,
)
from serdes.records.schema import parse_schema
from serdes.records.values import DecodeError
from state.columns import OP, SEQ, side_column
from state.joins.lookup_join import (
    Cache,
    FullCache,
    Key,
    LookupJoinSpec,
    NoCache,
    PartialCache,
    Row,
    key_columns,
)


def with_table(config: Config) -> Config:
    """The configuration with each lookup join's table columns as its right side:
    `RIGHT_SCHEMA`'s (each checked against the table), or every column of the table. Raises
    ConfigError naming LOOKUP_URL / LOOKUP_TABLE / RIGHT_SCHEMA (as the SQL's line, for a
    later join's table)."""
    if config.lookup is not None:
        right, lookup = _typed(config.right, config.lookup)
        config = replace(config, right=right, lookup=lookup)
    chain = []
    for chained in config.chain:
        if chained.lookup is not None:
            try:
                table, lookup = _typed(chained.input, chained.lookup)
            except ConfigError as error:
                raise traced(error, chained.origin) from None
            chained = replace(chained, input=table, lookup=lookup)
        chain.append(chained)
    return replace(config, chain=tuple(chain))


def _typed(table: InputConfig, lookup: LookupConfig) -> tuple[InputConfig, LookupConfig]:
    """A lookup join's table with its columns, and its lookup with their PostgreSQL types."""
    try:
        columns = dict(
            table_columns(lookup.url, lookup.password, lookup.table, lookup.timeout_ms / 1000)
        )
    except TableUnavailable as error:
        variable = "LOOKUP_TABLE" if str(error).startswith("no table") else "LOOKUP_URL"
        raise ConfigError(
            variable, "a PostgreSQL table the service can query", seen=str(error)
        ) from None
    declared = table.schema
    if declared is None:
        unsupported = [f"{n} {t}" for n, t in columns.items() if flink_type(t) is None]
        if unsupported:
            raise ConfigError(
                "RIGHT_SCHEMA",
                "the columns to read, as the table has columns of "
                "types the service does not map (" + ", ".join(unsupported) + ")",
            )
        text = ", ".join(f"{n} {flink_type(t)}" for n, t in columns.items())
        declared = parse_schema(text)
    missing = [c.name for c in declared if c.name not in columns]
    if missing:
        raise ConfigError(
            "RIGHT_SCHEMA",
            f"columns of {lookup.table} (" + ", ".join(columns) + ")",
            ", ".join(missing),
        )
    unfit = [
        f"{c.name} {c.declared} for its {columns[c.name]}"
        for c in declared
        if (mapped := flink_type(columns[c.name])) is not None
        and not _holds(c.spark_type, parse_schema(f"c {mapped}")[0].spark_type)
    ]
    if unfit:
        raise ConfigError(
            "RIGHT_SCHEMA",
            "types the table's columns can be read into (the same, or wider)",
            seen=", ".join(unfit),
        )
    types = {c.name: columns[c.name] for c in declared}
    return replace(table, schema=declared), replace(lookup, column_types=types)


_WIDENING = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _holds(declared: T.DataType, table: T.DataType) -> bool:
    """Whether a column declared `declared` holds the values of a table column read as `table`:
    the same type (a DECIMAL of any precision and scale: its values are fitted), or a wider
    whole number or floating point. Anything else failed the lookup's task at its first row."""
    if type(declared) is type(table):
        return True
    if isinstance(declared, _WIDENING) and isinstance(table, _WIDENING):
        return _WIDENING.index(type(declared)) >= _WIDENING.index(type(table))
    return isinstance(declared, T.DoubleType) and isinstance(table, T.FloatType)


# One table and cache per worker process and lookup, kept across its tasks.
_TABLES: dict[TableLookup, tuple[PostgresTable, Cache]] = {}


def _table_and_cache(config_cache, lookup: TableLookup) -> tuple[PostgresTable, Cache]:
    if lookup not in _TABLES:
        table = PostgresTable(lookup)
        cache: Cache
        if config_cache.kind == "PARTIAL":
            cache = PartialCache(config_cache)
        elif config_cache.kind == "FULL":
            cache = FullCache(config_cache, table.load_all)
        else:
            cache = NoCache()
        _TABLES[lookup] = (table, cache)
    return _TABLES[lookup]


def looked_up(
    changes: DataFrame,
    config: Config,
    spec: LookupJoinSpec,
    events: Accumulator[dict],
    latency: Accumulator[dict],
    letters: DeadLetterTopic | None = None,
    tally: Tally | None = None,
    changes_out: Accumulator[dict] | None = None,
) -> DataFrame:
    """The left changes (`op`, `seq`, `ts`, `row`) joined with the table: `op`, `seq`, `L_*`,
    `R_*`, each output row with its left change's kind and `seq`, as Flink's lookup join keeps
    the kind (over a changelog, a retraction is looked up anew, as Flink does by default).

    With `letters` (`LOOKUP_ON_ERROR=dead-letter`), the changes also carry their Kafka records
    (`key`, `value`, `topic`, `partition`, `offset`, `headers`), and a row whose lookup failed
    goes there as its record did, with the error and its coordinates (counted in `tally` as
    reason `lookup-failed`), instead of failing the micro-batch. `changes_out` counts the
    output by kind."""
    from ops.metrics import latency_counts

    lookup, settings = table_lookup(config, spec), config.lookup.cache  # type: ignore[union-attr]
    left_type = StructType([StructField(c.name, c.spark_type) for c in config.left.schema or ()])
    right_type = StructType([StructField(c.name, c.spark_type) for c in config.right.schema or ()])
    out_type = StructType(
        [StructField(OP, StringType(), False), StructField(SEQ, LongType(), False)]
        + [StructField(side_column(0, f.name), f.dataType) for f in left_type]
        + [StructField(side_column(1, f.name), f.dataType) for f in right_type]
    )
    arrow = pa.schema(
        [pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC")) for f in out_type]
    )
    join = spec.operator()
    right_fields = list(arrow)[2 + len(left_type) :]
    retry_attempts = config.lookup.miss_retries  # type: ignore[union-attr]
    retry_delay_s = config.lookup.miss_retry_delay_ms / 1000  # type: ignore[union-attr]

    def left_rows(batch: pa.RecordBatch) -> list[Row] | None:
        """The batch's left rows as tuples, where the join reads them whole."""
        if not join.needs_rows:
            return None
        return [tuple(r[f] for f in spec.left.fields) for r in batch.column("row").to_pylist()]

    def keys_of(batch: pa.RecordBatch, lefts: list[Row] | None) -> list[Key | None]:
        if join.computed:
            return join.computed_keys(lefts or [])
        return join.keys([batch.column("row").field(a).to_pylist() for a in join.key_fields])

    def joined_batch(
        batch: pa.RecordBatch,
        keys: list[Key | None],
        found: dict[Key, list[Row]],
        lefts: list[Row] | None,
    ) -> pa.RecordBatch:
        """The output of a batch: the left columns taken from the input by the matches'
        indices (never turned into Python objects), the table's columns built from the
        distinct rows matched, then taken likewise (a padded row: a null index)."""
        rows: pa.StructArray = batch.column("row")
        indices, rights = join.matches(keys, found, lefts)
        position_of: dict[int, int] = {}  # a matched table row's position, by its id
        matched: list[Row] = []
        positions: list[int | None] = []
        for right in rights:
            if right is None:
                positions.append(None)
                continue
            at = position_of.setdefault(id(right), len(matched))
            if at == len(matched):
                matched.append(right)
            positions.append(at)
        taken, chosen = pa.array(indices, pa.int64()), pa.array(positions, pa.int64())
        columns = [batch.column(OP).take(taken), batch.column(SEQ).take(taken)]
        columns += [column.take(taken) for column in rows.flatten()]
        columns += [
            pa.array([r[i] for r in matched], f.type).take(chosen)
            for i, f in enumerate(right_fields)
        ]
        return pa.RecordBatch.from_arrays(columns, schema=arrow)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        settle_worker()
        table, cache = _table_and_cache(settings, lookup)
        counts: dict[tuple[str], int] = {}
        kinds: dict[tuple[str], int] = {}  # the output's, for `changes_out`
        undone: list[OutputRecord] = []
        table.stats.latencies_s = []
        for batch in batches:
            lefts = left_rows(batch)  # read once, for the keys and the condition after
            keys = keys_of(batch, lefts)
            distinct = list(dict.fromkeys(k for k in keys if k is not None))
            found: dict[Key, list[Row]] = {}
            missing: list[Key] = []
            try:
                for key in distinct:
                    rows = cache.get(key)  # a FULL cache (re)loads the table here
                    (missing.append(key) if rows is None else found.__setitem__(key, rows))
                fetched = table.fetch(missing)
                retried = _misses_retried(table, fetched, retry_attempts, retry_delay_s)
                counts[("miss-retry",)] = counts.get(("miss-retry",), 0) + retried
            except LookupFailed as error:
                if letters is None:
                    raise
                failed = set(distinct) - found.keys()
                batch, keys = _dead_lettered(batch, keys, failed, error, letters, undone)
                lefts = left_rows(batch)
                fetched = {}
            counts[("key",)] = counts.get(("key",), 0) + len(distinct)
            counts[("hit",)] = counts.get(("hit",), 0) + len(found)
            counts[("miss",)] = counts.get(("miss",), 0) + len(distinct) - len(found)
            for key, rows in fetched.items():
                cache.put(key, rows)
            found.update(fetched)
            out = joined_batch(batch, keys, found, lefts)
            if changes_out is not None:
                for counted in pc.value_counts(out.column(OP)).to_pylist():
                    kind = (counted["values"],)
                    kinds[kind] = kinds.get(kind, 0) + counted["counts"]
            yield out
        if changes_out is not None and kinds:
            changes_out.add(kinds)
        stats = table.stats
        counts |= {("query",): stats.queries, ("retry",): stats.retries, ("error",): stats.errors}
        stats.queries = stats.retries = stats.errors = 0
        events.add({k: v for k, v in counts.items() if v})
        latency.add(latency_counts(stats.latencies_s or []))
        if letters is not None and undone:
            written = letters.write(TaskContext.get().partitionId(), undone)
            if written and tally is not None:  # an earlier attempt of the batch counted them
                tally.add({("left", "lookup-failed"): written})

    if shuffled(config) and spec.keys:  # by the columns the keys are computed from
        read = dict.fromkeys(c.name for value, _ in spec.keys for c in key_columns(value))
        changes = changes.repartition(*[F.col("row")[name] for name in read])
    return changes.mapInArrow(run, out_type)


def _misses_retried(
    table: PostgresTable, fetched: dict[Key, list[Row]], attempts: int, delay_s: float
) -> int:
    """Flink's `LOOKUP` hint with `'retry-predicate' = 'lookup_miss'` and `'fixed_delay'`: the
    keys the table lacked (a customer row not written yet) looked up again after `delay_s`, up
    to `attempts` more times, all of a batch's at once, so the batch waits at most `attempts` x
    `delay_s` however many keys missed; `fetched` updated in place; the lookups retried."""
    retried = 0
    for _ in range(attempts):
        missed = [key for key, rows in fetched.items() if not rows]
        if not missed:
            break
        time.sleep(delay_s)
        fetched.update(table.fetch(missed))
        retried += len(missed)
    return retried


def _dead_lettered(
    batch: pa.RecordBatch,
    keys: list[Key | None],
    failed: set[Key],
    error: LookupFailed,
    letters: DeadLetterTopic,
    undone: list[OutputRecord],
) -> tuple[pa.RecordBatch, list[Key | None]]:
    """`batch` without its rows whose key is in `failed`, and their keys; those rows' records
    added to `undone` as dead letters."""
    reason = DecodeError("lookup-failed", str(error))
    kept = [key not in failed for key in keys]
    mask = pa.array(kept, pa.bool_())
    failing = batch.filter(pc.invert(mask))
    records = failing.select(["key", "value", "topic", "partition", "offset", "headers"])
    undone.extend(letters.letter(reason, record) for record in records.to_pylist())
    return batch.filter(mask), [key for key, keep in zip(keys, kept, strict=True) if keep]
