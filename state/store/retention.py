"""State retention (`STATE_TTL`, Flink's `table.exec.state.ttl`): per stored row, as in Flink.

Flink gives every state entry its own time to live, counted from its last write
(`StateTtlConfig.UpdateType.OnCreateAndWrite`) and hidden from reads once past it
(`NeverReturnExpired`): in a regular join each row of a key's map state expires on its own, so a
key that keeps getting rows still forgets the old ones, and the state holds about rate x TTL rows.
Every stateful stage of a job (changelog normalizer, join, upsert materializer) keeps the same
retention, so they forget a row at the same time.

Here each stored row carries the processing time of its last write, and a read hides it once it
is `ttl_ms` old (`alive`); a stage drops the expired rows of the keys a micro-batch touches. The
keys no micro-batch touches go with Spark's own TTL on their state entries (`store_ttl_ms`): an
entry is written whenever one of its rows is, so once Spark drops it every row in it had expired
already; Spark's TTL runs from its own index of expiry times, so no batch scans the state.
"""

from __future__ import annotations

from collections.abc import Sequence

# Spark's TTL on an entry runs this much past the rows' own: it only ever removes rows that
# `alive` hides already, whatever the exact comparison Spark makes at the boundary.
STORE_MARGIN_MS = 1000
# Earlier than any write's time (without retention writes are stamped 0): no row expires.
_BEFORE_ANY_WRITE = -(1 << 63)


class Retention:
    """How long a stored row lives after its last write (`ttl_ms`, 0 for ever), and the
    processing time of the micro-batch at hand (`now`), which stamps every write."""

    def __init__(self, ttl_ms: int = 0) -> None:
        self.ttl_ms = ttl_ms
        self.now = 0

    def at(self, now: int) -> int:
        """Take the processing time of the micro-batch at hand; return the time it stamps on
        writes (0 without retention: no time then, so state does not change with the clock)."""
        self.now = now if self.ttl_ms > 0 else 0
        return self.now

    def alive(self, written: int) -> bool:
        """Whether a row last written at `written` is still visible (Flink: expired once
        `written + ttl <= now`)."""
        return written > self.cutoff

    @property
    def cutoff(self) -> int:
        """The last write time of an expired row: a row lives while written after it, a
        comparison a loop over a key's rows makes without a call per row (`alive`)."""
        return self.now - self.ttl_ms if self.ttl_ms > 0 else _BEFORE_ANY_WRITE

    @property
    def store_ttl_ms(self) -> int | None:
        """Spark's TTL for the entries that hold the rows (None: no TTL)."""
        return self.ttl_ms + STORE_MARGIN_MS if self.ttl_ms > 0 else None


FOREVER = Retention()  # no retention: rows live until retracted


class InputRetentions:
    """Each input's `Retention` in one operator (Flink's `STATE_TTL` hint gives each input of a
    join its own), all taking the same micro-batch's processing time."""

    def __init__(self, ttls_ms: Sequence[int]) -> None:
        self.each = tuple(Retention(ttl_ms) for ttl_ms in ttls_ms)

    def at(self, now: int) -> None:
        for retention in self.each:
            retention.at(now)

    def __getitem__(self, side: int) -> Retention:
        return self.each[side]

    @property
    def store_ttl_ms(self) -> int | None:
        """Spark's TTL for entries holding rows of every input: the longest input's; None
        where an input keeps its rows for ever."""
        ttls = [retention.store_ttl_ms for retention in self.each]
        return None if None in ttls else max(ttls, default=None)
