"""How a stateful operator keeps its buckets in Spark's state store: whole, or one entry per key.

A bucket is the grouping key of `transformWithStateInPandas` (a hash of the operator's keys);
its layout decides the state calls a visit costs. `WholeBuckets` reads and writes one value per
bucket, for state that time bounds and a batch mostly touches (the interval join);
`KeyedEntries` one `MapState` entry per key the batch touches (`state.store.keyed_state`), for
state much larger than what a batch touches (see `docs/design.md`, "Whole buckets or one entry
per key").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from pyspark.sql.streaming.stateful_processor import MapState, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

from state.spark.deferred import writes_deferred
from state.spark.pipelined import wire
from state.store.encoding import dump, dump_packed, load, load_entry
from state.store.key_filter import KeyFilter
from state.store.keyed_state import EntryStore, KeyedBucket, StoredKeys, Waiting
from state.store.parked import park
from state.store.warm import Copies, ReadCounts, WarmEntries, WarmVisit, new_token

BUCKET_STATE = StructType([StructField("bucket", BinaryType())])
ENTRY_KEY = StructType([StructField("key", BinaryType())])
# A page's name among a bucket's warm copies, beside its keys' (a key's name starts with the
# state format's byte, never with this one).
PAGES_PREFIX = b"p"


def entry_state(value: bytes, now: int) -> Any | None:
    """A `KeyedEntries` entry's plain state, None once its time has come (Spark may not have
    dropped it yet; the next visit would not see it)."""
    expires, plain, _body = load_entry(value)
    return plain if expires is None or expires > now else None


def waiting_rows(value: bytes) -> Waiting:
    """The rows that wait for time in a `KeyedEntries` bucket's own value."""
    return load(value)[2]


class BucketLayout(Protocol):
    """How a processor keeps its buckets: `read` at a bucket's visit (the bucket and the bytes
    it was read from), `flush` its keys, then `write` what the bucket holds besides them.
    `keep_warm`: keep what buckets read and write in `copies` between visits, within `budget`
    bytes (`state.store.warm`), under `owner`, a name of the operator unique to the query, the
    entries read counted in `counts`."""

    def keep_warm(self, copies: Copies, counts: ReadCounts, owner: str, budget: int) -> None: ...

    def read(self, now: int, key: Any) -> tuple[Any, bytes | None]: ...

    def flush(self, bucket: Any) -> None: ...

    def write(self, bucket: Any, before: bytes | None) -> None: ...


class WholeBuckets:
    """One value per bucket, read and written whole: for state that time bounds and a batch
    mostly touches (the interval join), one call per bucket beats one per key. The value is
    packed once large (`dump_packed`): it crosses to the state server and into RocksDB whole at
    every visit."""

    def __init__(
        self,
        handle: StatefulProcessorHandle,
        new: Callable[[], Any],
        to_plain: Callable[[Any], Any],
        from_plain: Callable[[Any], Any],
    ) -> None:
        self.state = writes_deferred(handle.getValueState("bucket", BUCKET_STATE))
        self.new, self.to_plain, self.from_plain = new, to_plain, from_plain

    def keep_warm(self, copies: Copies, counts: ReadCounts, owner: str, budget: int) -> None:
        """Nothing to keep: a whole bucket is one call already, and one a time bounds."""

    def read(self, now: int = 0, key: Any = None) -> tuple[Any, bytes | None]:
        stored = self.state.get()
        if stored is None:
            return self.new(), None
        return self.from_plain(load(stored[0])), stored[0]

    def flush(self, bucket: Any) -> None:
        """Nothing to do before `write`: the keys are in the bucket's value."""

    def write(self, bucket: Any, before: bytes | None) -> None:
        if not bucket.keys:
            if before is not None:
                self.state.clear()
            return
        blob = dump_packed(self.to_plain(bucket))
        if blob != before:
            self.state.update((blob,))


class MapEntries:
    """A bucket's `MapState` as the `EntryStore` of `state.store.keyed_state`: many entries
    read or written in one round trip where pyspark's client allows (`state.spark.pipelined`),
    one call each otherwise."""

    def __init__(self, state: MapState) -> None:
        self.state = state
        self.wire = wire(state)

    def get(self, key: bytes) -> bytes | None:
        found = self.state.getValue((key,))
        return None if found is None else found[0]

    def recall(self, keys: list[bytes]) -> dict[bytes, bytes | None]:
        """Nothing is known without a call."""
        return {}

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for (key,), (value,) in self.state.iterator():
            yield key, value

    def put(self, key: bytes, value: bytes) -> None:
        self.state.updateValue((key,), (value,))

    def remove(self, key: bytes) -> None:
        self.state.removeKey((key,))

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        if self.wire is None:
            return [self.get(key) for key in keys]
        return self.wire.get_values(keys)

    def write_many(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None:
        if self.wire is None:
            for key, value in puts:
                self.put(key, value)
            for key in removes:
                self.remove(key)
        else:
            self.wire.write_values(puts, removes)


class KeyedEntries:
    """Each key of a bucket its own `MapState` entry (`state.store.keyed_state`): a batch reads and
    writes the keys it touches. The bucket's own value holds its engine timer, the keys that
    wait for time, the rows that wait in it, the ledger of its entries and the filter of the
    names they were written under (`state.store.key_filter`), and is written only when those
    change. Many rows left waiting by a visit are parked in an entry of their own
    (`state.store.parked`), not kept in that value.

    The filter starts with an empty bucket, and only without a TTL: an entry Spark drops unseen
    would stay in it as a name that finds nothing, and a bucket whose keys come and go under a
    TTL would fill it with such names. A bucket written before filters existed keeps none."""

    def __init__(
        self,
        handle: StatefulProcessorHandle,
        to_plain: Callable[[Any], Any],
        from_plain: Callable[[Any], Any],
        timer_of: Callable[[Any], int | None],
        size_of: Callable[[Any], tuple[int, int]],
        ttl_ms: int | None = None,
        pages: bool = False,
    ) -> None:
        """`ttl_ms`: Spark drops an entry not written for that long (processing time), from
        its own index of expiry times: no timer, no scan of the keys. `pages`: the keys keep
        rows in entries of a `MapState` of their own besides (`state.joins.pages`), kept warm
        with the keys'."""
        self.own = writes_deferred(handle.getValueState("bucket", BUCKET_STATE))
        self.entries = MapEntries(handle.getMapState("keys", ENTRY_KEY, BUCKET_STATE, ttl_ms))
        self.pages = (
            MapEntries(handle.getMapState("pages", ENTRY_KEY, BUCKET_STATE, ttl_ms))
            if pages
            else None
        )
        self.to_plain, self.from_plain, self.timer_of = to_plain, from_plain, timer_of
        self.size_of = size_of
        self.ttl_ms = ttl_ms
        self.copies: Copies | None = None

    def keep_warm(self, copies: Copies, counts: ReadCounts, owner: str, budget: int) -> None:
        self.copies, self.counts, self.owner, self.budget = copies, counts, owner, budget

    def read(self, now: int = 0, key: Any = None) -> tuple[KeyedBucket, bytes | None]:
        """The bucket `key` as of `now`, the processing time that ages its entries under a TTL."""
        stored = self.own.get()
        # a bucket's value from before filters (4 fields) has no filter, and may hold entries;
        # one from before warm copies (5 fields) no token; one from before parked rows (6) none
        spark_timer, timers, waiting, ledger, *rest = (
            (None, [], {}, [], None, None, []) if stored is None else load(stored[0])
        )
        filtered = rest[0] if rest else None
        token = rest[1] if len(rest) > 1 else None
        parked = [tuple(entry) for entry in rest[2]] if len(rest) > 2 else []
        known = None
        if filtered is not None:
            known = KeyFilter.from_plain(filtered)
        elif self.ttl_ms is None and not any(counts[0] for _expiry, counts in ledger):
            known = KeyFilter()  # no entries: every one from now on is in the filter
        entries: EntryStore = self.entries
        pages: EntryStore | None = self.pages
        # a copy ages by the visit's clock under a TTL: an operator without one keeps none
        if self.copies is not None and (self.ttl_ms is None or now > 0):
            owner = (self.owner, str(key))  # the key as text: a plain message to the keeper
            visit = WarmVisit(self.copies, owner, token, self.counts, now, self.ttl_ms)
            entries = WarmEntries(self.entries, visit)
            if self.pages is not None:
                pages = WarmEntries(self.pages, visit, PAGES_PREFIX)
        keys = StoredKeys(
            entries,
            dict(timers),
            self.to_plain,
            self.from_plain,
            self.timer_of,
            {e: list(c) for e, c in ledger},
            self.size_of,
            self.ttl_ms,
            now,
            known,
            scannable=not parked,
        )
        bucket = KeyedBucket(keys, waiting, spark_timer, token, parked, pages=pages)
        return bucket, None if stored is None else stored[0]

    def flush(self, bucket: KeyedBucket) -> None:
        """The keys' entries, and the rows left waiting parked in one of their own
        (`state.store.parked`) if they are many and no TTL could drop it unseen."""
        parking = None if self.ttl_ms is not None else park(bucket.waiting)
        puts = []
        if parking is not None:
            entry, blob = parking
            bucket.parked.append(entry)
            bucket.waiting = {}
            puts.append((entry[0], blob))
        bucket.keys.flush(puts, bucket.unparked)
        bucket.unparked = []

    def write(self, bucket: KeyedBucket, before: bytes | None) -> None:
        """The bucket's own value, with a fresh token if its entries were written (and so its
        warm copy current at that token, `state.store.warm`)."""
        keys = bucket.keys
        entries = keys.store
        copy = entries.visit if isinstance(entries, WarmEntries) else None
        if (
            bucket.spark_timer is None
            and not keys.timers
            and not bucket.waiting
            and not bucket.parked
            and not keys.ledger
        ):
            if before is not None:
                self.own.clear()
            if copy is not None:
                copy.settle(None, self.budget)
            return
        token = new_token() if copy is not None and copy.written else bucket.token
        known = None if keys.known is None else keys.known.to_plain()
        blob = dump(
            (
                bucket.spark_timer,
                list(keys.timers.items()),
                bucket.waiting,
                list(keys.ledger.items()),
                known,
                token,
                bucket.parked,
            )
        )
        if blob != before:
            self.own.update((blob,))
        if copy is not None:
            copy.settle(token, self.budget)
