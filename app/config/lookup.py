"""The lookup join's variables (`JOIN_TYPE=lookup`): the table, and Flink's lookup options.

| variable | Flink's option | default |
|---|---|---|
| `LOOKUP_URL` | `url` (`postgresql://user@host:port/db`, no password) | required |
| `LOOKUP_PASSWORD` | `password` (a secret: from a Secret, never logged) | none |
| `LOOKUP_TABLE` | `table-name` | required |
| `LOOKUP_CACHE` | `lookup.cache` NONE / PARTIAL / FULL | NONE |
| `LOOKUP_PARTIAL_CACHE_MAX_ROWS` | `lookup.partial-cache.max-rows` | unbounded |
| `LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE` | `…expire-after-write` | never |
| `LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_ACCESS` | `…expire-after-access` | never |
| `LOOKUP_PARTIAL_CACHE_CACHE_MISSING_KEY` | `…cache-missing-key` | true |
| `LOOKUP_FULL_CACHE_RELOAD_INTERVAL` | `lookup.full-cache.periodic-reload.interval` | 1h |
| `LOOKUP_MAX_RETRIES` | `lookup.max-retries` | 3 |
| `LOOKUP_ASYNC` | `lookup.async` | true |
| `LOOKUP_TIMEOUT` | (per query) | 10s |
| `LOOKUP_MAX_CONCURRENT` | `table.exec.async-lookup.buffer-capacity`, as queries | 8 |
| `LOOKUP_SHUFFLE` | `table.optimizer.…lookup-shuffle` (partition by key) | true |
| `LOOKUP_ON_ERROR` | fail (Flink's behaviour) / dead-letter (the left record) | fail |
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from state.joins.lookup import CACHES, CacheSettings

LOOKUP = "lookup"
LOOKUP_VARIABLES = frozenset(
    f"LOOKUP_{name}" for name in (
        "URL", "PASSWORD", "TABLE", "CACHE", "PARTIAL_CACHE_MAX_ROWS",
        "PARTIAL_CACHE_EXPIRE_AFTER_WRITE", "PARTIAL_CACHE_EXPIRE_AFTER_ACCESS",
        "PARTIAL_CACHE_CACHE_MISSING_KEY", "FULL_CACHE_RELOAD_INTERVAL", "MAX_RETRIES",
        "ASYNC", "TIMEOUT", "MAX_CONCURRENT", "SHUFFLE", "ON_ERROR",
    )
)  # fmt: skip
_POSTGRES_URL = re.compile(r"^postgres(ql)?://[^\s/:@]+@[^\s/]+/[^\s/?]+$")
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$")
DURATION = "a duration with its unit, like 500ms, 5s, 2 minutes, 1h"


@dataclass(frozen=True)
class LookupConfig:
    url: str
    password: str | None = field(repr=False)
    table: str
    cache: CacheSettings
    max_retries: int
    asynchronous: bool
    timeout_ms: int
    max_concurrent: int
    shuffle: bool
    on_error: str = "fail"
    # the table's columns' PostgreSQL types, read from its catalog at start-up
    column_types: dict[str, str] = field(default_factory=dict)


class Reader(Protocol):
    """What `app.config.env`'s reader offers this module."""

    def required(self, name: str, expected: str) -> str: ...
    def raw(self, name: str, default: str | None = None) -> str | None: ...
    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str: ...
    def parsed(self, name: str, expected: str, parse, default, required: bool = False): ...


def _postgres_url(text: str) -> str:
    if not _POSTGRES_URL.match(text) or ":" in text.split("://", 1)[1].split("@", 1)[0]:
        raise ValueError(text)
    return text


def _table(text: str) -> str:
    if not _TABLE.match(text):
        raise ValueError(text)
    return text


def read_lookup(read: Reader, duration_ms, positive_int) -> LookupConfig:
    """The lookup variables; `duration_ms` and `positive_int` are `app.config.env`'s parsers."""

    def seconds(name: str, default: str | None) -> float | None:
        ms = read.parsed(name, DURATION, duration_ms, default)
        return None if ms is None else ms / 1000

    def flag(name: str, default: str) -> bool:
        return read.choice(name, ("true", "false"), default) == "true"

    cache = CacheSettings(
        kind=read.choice("LOOKUP_CACHE", tuple(c.lower() for c in CACHES), "none").upper(),
        max_rows=read.parsed("LOOKUP_PARTIAL_CACHE_MAX_ROWS", "a positive whole number",
                             positive_int, None),
        expire_after_write_s=seconds("LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE", None),
        expire_after_access_s=seconds("LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_ACCESS", None),
        cache_missing_key=flag("LOOKUP_PARTIAL_CACHE_CACHE_MISSING_KEY", "true"),
        reload_interval_s=seconds("LOOKUP_FULL_CACHE_RELOAD_INTERVAL", "1h") or 3600.0,
    )  # fmt: skip
    return LookupConfig(
        url=read.parsed(
            "LOOKUP_URL", "postgresql://user@host:port/database (the password goes in "
            "LOOKUP_PASSWORD)", _postgres_url, None, required=True,
        ) or "",
        password=read.raw("LOOKUP_PASSWORD"),
        table=read.parsed("LOOKUP_TABLE", "a table name, or schema.table", _table, None,
                          required=True) or "",
        cache=cache,
        max_retries=read.parsed("LOOKUP_MAX_RETRIES", "a whole number", _whole, "3") or 0,
        asynchronous=flag("LOOKUP_ASYNC", "true"),
        timeout_ms=read.parsed("LOOKUP_TIMEOUT", DURATION, duration_ms, "10s") or 10_000,
        max_concurrent=read.parsed("LOOKUP_MAX_CONCURRENT", "a positive whole number",
                                   positive_int, "8") or 8,
        shuffle=flag("LOOKUP_SHUFFLE", "true"),
        on_error=read.choice("LOOKUP_ON_ERROR", ("fail", "dead-letter"), "fail"),
    )  # fmt: skip


def _whole(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value
