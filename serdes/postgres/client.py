"""Lookups in a PostgreSQL table, from the Python workers of the lookup join.

Asynchronous (asyncpg, the binary protocol): the keys a task needs that its cache lacks go out
as few queries as possible, `key = ANY($1)` for one key column or a join with `unnest($1, $2…)`
for several, at most `batch_keys` keys per query, `max_concurrent` queries at once over a pool
of as many connections. Synchronous (`LOOKUP_ASYNC=false`, Flink's `lookup.async=false`): one
query per key, one at a time, as a JDBC lookup does. Every value is a parameter: names are
quoted identifiers read from the catalog, never text from a row.

A query that fails is retried `max_retries` times (after 0.1 s, 0.2 s, 0.4 s …) on a fresh
connection, so a database restart costs a pause; past that, or past `timeout_s`, the lookup
fails with `LookupFailed` and the task decides (fail the batch, or dead-letter its rows).
One pool and one event loop live per worker process, reused by every task it runs.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pyspark.sql import types as T

from serdes.records.values import converter
from state.joins.lookup_join import Key, PushedFilter, Row

RETRY_BASE_S = 0.1


class LookupFailed(RuntimeError):
    """The table could not answer within the retries and timeout."""


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_table(name: str) -> str:
    """`schema.table` or `table`, each part quoted."""
    return ".".join(quote(part) for part in name.split("."))


@dataclass(frozen=True)
class TableLookup:
    """What the workers need to query the table; picklable, no connection yet. `password`
    travels apart from `dsn` (which never holds it) and is never shown."""

    dsn: str
    table: str
    columns: tuple[str, ...]  # the right side's columns, in order
    key_columns: tuple[str, ...]  # the table's columns the equi-keys compare
    key_types: tuple[str, ...]  # their PostgreSQL types, for the arrays of keys
    pushed: tuple[PushedFilter, ...] = ()
    password: str | None = None
    timeout_s: float = 10.0
    max_retries: int = 3
    max_concurrent: int = 8
    batch_keys: int = 1000
    asynchronous: bool = True
    # the columns declared DECIMAL, as (position, precision, scale)
    decimals: tuple[tuple[int, int, int], ...] = ()

    def __repr__(self) -> str:  # keeps the password out of logs and plans
        return f"TableLookup(table={self.table!r}, keys={self.key_columns!r})"

    def _where(self, first: int) -> list[str]:
        clauses, mark = [], first
        for pushed in self.pushed:
            clauses.append(pushed.sql(mark, quote))
            mark += len(pushed.values)
        return clauses

    def parameters(self) -> list[Any]:
        return [value for pushed in self.pushed for value in pushed.values]

    def batch_query(self) -> str:
        """All rows for an array of keys (one array per key column)."""
        table, n = quote_table(self.table), len(self.key_columns)
        columns = ", ".join(f"t.{quote(c)}" for c in self.columns)
        if n == 1:
            where = [f"t.{quote(self.key_columns[0])} = ANY($1::{self.key_types[0]}[])"]
            where += self._where(2)
            return f"SELECT {columns} FROM {table} AS t WHERE {' AND '.join(where)}"
        arrays = ", ".join(f"${i + 1}::{kind}[]" for i, kind in enumerate(self.key_types))
        names = ", ".join(f"k{i}" for i in range(n))
        on = " AND ".join(f"t.{quote(c)} = k.k{i}" for i, c in enumerate(self.key_columns))
        where = self._where(n + 1)
        return f"SELECT {columns} FROM {table} AS t JOIN unnest({arrays}) AS k({names}) ON {on}" + (
            f" WHERE {' AND '.join(where)}" if where else ""
        )

    def key_query(self) -> str:
        """The rows of one key (the synchronous lookup)."""
        where = [f"{quote(c)} = ${i + 1}" for i, c in enumerate(self.key_columns)]
        where += self._where(len(self.key_columns) + 1)
        columns = ", ".join(quote(c) for c in self.columns)
        return f"SELECT {columns} FROM {quote_table(self.table)} WHERE {' AND '.join(where)}"

    def full_query(self) -> str:
        """Every row the lookup can see (the FULL cache)."""
        where = self._where(1)
        columns = ", ".join(quote(c) for c in self.columns)
        return f"SELECT {columns} FROM {quote_table(self.table)}" + (
            f" WHERE {' AND '.join(where)}" if where else ""
        )

    @cached_property
    def _key_positions(self) -> tuple[int, ...]:
        return tuple(self.columns.index(c) for c in self.key_columns)

    def key_of(self, row: Row) -> Key:
        positions = self._key_positions
        return (row[positions[0]],) if len(positions) == 1 else tuple(row[i] for i in positions)


@dataclass
class LookupStats:
    """What one task's lookups did, for the metrics."""

    queries: int = 0
    retries: int = 0
    errors: int = 0
    latencies_s: list[float] | None = None

    def __post_init__(self) -> None:
        self.latencies_s = []


class PostgresTable:
    """The table, queried from one worker process (see the module's docstring)."""

    def __init__(self, lookup: TableLookup) -> None:
        import asyncpg

        self.lookup = lookup
        self.asyncpg = asyncpg
        self.loop = asyncio.new_event_loop()
        self._pool: Any = None
        self.stats = LookupStats()
        # A numeric value fitted to its column's DECIMAL as Flink's JDBC source fits it (rounded
        # half up, NULL beyond the precision): the column's Arrow type refuses a value of more
        # digits, which failed the task (an unbounded `numeric` is read as DECIMAL(38,18)).
        self.fitted = [(i, converter(T.DecimalType(p, s))) for i, p, s in lookup.decimals]

    async def _connected(self) -> Any:
        if self._pool is None:
            size = self.lookup.max_concurrent if self.lookup.asynchronous else 1
            self._pool = await self.asyncpg.create_pool(
                self.lookup.dsn,
                password=self.lookup.password,
                min_size=1,
                max_size=size,
                command_timeout=self.lookup.timeout_s,
                timeout=self.lookup.timeout_s,
            )
        return self._pool

    async def _query(self, sql: str, *args: Any) -> list[Row]:
        """One query, retried on a fresh connection; `LookupFailed` once retries run out.

        A pooled connection that died while idle (the server restarted since this worker's
        last lookup) fails its first use: that query is re-sent at once on a fresh pool and
        not counted as an attempt, as a pool that tests a connection before lending it would
        have done. Without this, with `LOOKUP_MAX_RETRIES=0`, the first order after a restart
        failed in whichever worker had not looked anything up while the server was down.
        """
        attempt, stale_possible = 0, True
        while True:
            started, reused = time.monotonic(), self._pool is not None
            try:
                pool = await self._connected()
                async with pool.acquire() as connection:
                    records = await asyncio.wait_for(
                        connection.fetch(sql, *args), self.lookup.timeout_s
                    )
                self.stats.queries += 1
                self.stats.latencies_s.append(time.monotonic() - started)
                return [self._row(r) for r in records] if self.fitted else list(map(tuple, records))
            except (
                TimeoutError,
                OSError,
                self.asyncpg.PostgresError,
                self.asyncpg.InterfaceError,
            ) as error:
                if isinstance(error, self.asyncpg.PostgresError) and not _transient(error):
                    self.stats.errors += 1
                    raise LookupFailed(f"{type(error).__name__}: {error}") from None
                # the pool's other connections died with this one (a restarted server): the
                # next attempt, or the next batch's lookups, start on fresh connections
                await self._reset()
                if reused and stale_possible and not isinstance(error, asyncio.TimeoutError):
                    stale_possible = False
                    continue
                if attempt == self.lookup.max_retries:
                    self.stats.errors += 1
                    reason = "timed out" if isinstance(error, TimeoutError) else error
                    raise LookupFailed(
                        f"lookup in {self.lookup.table} failed after {attempt + 1} attempts: "
                        f"{reason}"
                    ) from None
                self.stats.retries += 1
                await asyncio.sleep(RETRY_BASE_S * 2**attempt)
                attempt += 1

    def _row(self, record: Any) -> Row:
        row = list(record)
        for i, fit in self.fitted:
            if row[i] is not None:
                row[i] = fit(row[i])
        return tuple(row)

    async def _reset(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.terminate()

    def _run(self, work: Callable[[], Awaitable[Any]]) -> Any:
        return self.loop.run_until_complete(work())

    def fetch(self, keys: list[Key]) -> dict[Key, list[Row]]:
        """The rows of each key (an empty list for a key the table lacks)."""
        found: dict[Key, list[Row]] = {key: [] for key in keys}
        if not keys:
            return found
        lookup = self.lookup

        async def synchronous() -> None:
            sql = lookup.key_query()
            extra = [v for p in lookup.pushed for v in p.values]
            for key in keys:
                found[key] = await self._query(sql, *key, *extra)

        async def batched() -> None:
            sql, extra = lookup.batch_query(), lookup.parameters()
            limit = asyncio.Semaphore(lookup.max_concurrent)

            async def one(chunk: list[Key]) -> None:
                arrays = [list(column) for column in zip(*chunk, strict=True)]
                async with limit:
                    rows = await self._query(sql, *arrays, *extra)
                for row in rows:
                    found.setdefault(lookup.key_of(row), []).append(row)

            size = lookup.batch_keys
            await asyncio.gather(*(one(keys[i : i + size]) for i in range(0, len(keys), size)))

        self._run(batched if lookup.asynchronous else synchronous)
        return found

    def load_all(self) -> dict[Key, list[Row]]:
        """Every row, by key (the FULL cache's load)."""
        rows = self._run(lambda: self._query(self.lookup.full_query(), *self.lookup.parameters()))
        table: dict[Key, list[Row]] = {}
        for row in rows:
            table.setdefault(self.lookup.key_of(row), []).append(row)
        return table


def _transient(error: Exception) -> bool:
    """Connection losses and server shutdowns (SQLSTATE classes 08 and 57P) are worth a retry;
    a wrong query is not."""
    state = getattr(error, "sqlstate", "") or ""
    return state.startswith(("08", "57P", "53"))


# PostgreSQL's types (as `format_type` names them) and the Flink types the right side declares.
_FLINK_TYPES = {
    "smallint": "SMALLINT",
    "integer": "INT",
    "bigint": "BIGINT",
    "real": "FLOAT",
    "double precision": "DOUBLE",
    "boolean": "BOOLEAN",
    "text": "STRING",
    "date": "DATE",
    "bytea": "BYTES",
    "timestamp without time zone": "TIMESTAMP(6)",
    "timestamp with time zone": "TIMESTAMP_LTZ(6)",
    "numeric": "DECIMAL(38,18)",
}
_PARAMETRIZED = (
    (re.compile(r"^numeric\((\d+),(\d+)\)$"), lambda m: f"DECIMAL({m[1]},{m[2]})"),
    (re.compile(r"^(character varying|character)(\(\d+\))?$"), lambda m: "STRING"),
    (re.compile(r"^timestamp\(\d\) without time zone$"), lambda m: "TIMESTAMP(6)"),
    (re.compile(r"^timestamp\(\d\) with time zone$"), lambda m: "TIMESTAMP_LTZ(6)"),
)


def flink_type(postgres_type: str) -> str | None:
    """The Flink type a column of `postgres_type` is read as; None: not supported."""
    if postgres_type in _FLINK_TYPES:
        return _FLINK_TYPES[postgres_type]
    for pattern, name in _PARAMETRIZED:
        match = pattern.match(postgres_type)
        if match:
            return name(match)
    return None


class TableUnavailable(RuntimeError):
    """The database cannot be reached, or has no such table."""


def table_columns(
    dsn: str, password: str | None, table: str, timeout_s: float
) -> list[tuple[str, str]]:
    """The table's columns and their PostgreSQL types, in order (from the driver, at start-up)."""
    import asyncpg

    async def read() -> list[tuple[str, str]]:
        connection = await asyncpg.connect(dsn, password=password, timeout=timeout_s)
        try:
            rows = await connection.fetch(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum",
                table,
            )
        finally:
            await connection.close()
        if not rows:
            raise TableUnavailable(f"no table {table!r} in the database")
        return [(r[0], r[1]) for r in rows]

    try:
        return asyncio.run(read())
    except TableUnavailable:
        raise
    except (TimeoutError, OSError, asyncpg.PostgresError) as error:
        reason = "timed out" if isinstance(error, TimeoutError) else error
        raise TableUnavailable(f"cannot query the database: {reason}") from None
