"""The lookup join's variables (`JOIN_TYPE=lookup`): the table, and Flink's lookup options.

Each variable, what it expects, its default and the Flink option it stands for are in
`app.config.registry`; docs/joins.md lists them for users.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from state.joins.lookup_join import CacheSettings


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
    # a key the table lacks looked up again (Flink's LOOKUP hint, 'retry-predicate' = 'lookup_miss')
    miss_retries: int = 0
    miss_retry_delay_ms: int = 1000
    # the table's columns' PostgreSQL types, read from its catalog at start-up
    column_types: dict[str, str] = field(default_factory=dict)


class Reader(Protocol):
    """What `app.config.env`'s reader offers this module."""

    def get(self, name: str, default: str | None = None) -> Any: ...


def read_lookup(read: Reader) -> LookupConfig:
    """The lookup variables."""

    def seconds(name: str) -> float | None:
        ms = read.get(name)
        return None if ms is None else ms / 1000

    def flag(name: str) -> bool:
        return read.get(name) == "true"

    cache = CacheSettings(
        kind=read.get("LOOKUP_CACHE").upper(),
        max_rows=read.get("LOOKUP_PARTIAL_CACHE_MAX_ROWS"),
        expire_after_write_s=seconds("LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE"),
        expire_after_access_s=seconds("LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_ACCESS"),
        cache_missing_key=flag("LOOKUP_PARTIAL_CACHE_CACHE_MISSING_KEY"),
        reload_interval_s=seconds("LOOKUP_FULL_CACHE_RELOAD_INTERVAL") or 3600.0,
    )
    return LookupConfig(
        url=read.get("LOOKUP_URL") or "",
        password=read.get("LOOKUP_PASSWORD"),
        table=read.get("LOOKUP_TABLE") or "",
        cache=cache,
        max_retries=read.get("LOOKUP_MAX_RETRIES") or 0,
        asynchronous=flag("LOOKUP_ASYNC"),
        timeout_ms=read.get("LOOKUP_TIMEOUT") or 10_000,
        max_concurrent=read.get("LOOKUP_MAX_CONCURRENT") or 8,
        shuffle=flag("LOOKUP_SHUFFLE"),
        on_error=read.get("LOOKUP_ON_ERROR"),
        miss_retries=read.get("LOOKUP_MISS_RETRIES") or 0,
        miss_retry_delay_ms=read.get("LOOKUP_MISS_RETRY_DELAY"),
    )
