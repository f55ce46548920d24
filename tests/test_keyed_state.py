"""Join state kept one entry per key pays for the keys a micro-batch touches, and is stored as
versioned plain data that outlives the code's classes."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from state.changes import Change
from state.joins.temporal_join import (
    EventTimeTemporalJoin,
    ProcessingTimeTemporalJoin,
    key_from_plain,
    key_timer,
    key_to_plain,
)
from state.store.encoding import FORMAT, StateFormatError, dump, dump_key, load
from state.store.keyed_state import KeyedBucket, StoredKeys, as_is, due_keys, never, unsized


class CountingStore:
    """An `EntryStore` that counts its calls, as Spark's MapState would pay them."""

    def __init__(self) -> None:
        self.entries: dict[bytes, bytes] = {}
        self.gets = self.puts = self.removes = self.scans = 0
        self.round_trips = 0  # calls of many entries at once

    def get(self, key: bytes) -> bytes | None:
        self.gets += 1
        return self.entries.get(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        self.scans += 1
        yield from list(self.entries.items())

    def recall(self, keys: list[bytes]) -> dict[bytes, bytes | None]:
        return {}

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self.round_trips += 1
        return [self.get(key) for key in keys]

    def put(self, key: bytes, value: bytes) -> None:
        self.puts += 1
        self.entries[key] = value

    def write_many(self, puts: list[tuple[bytes, bytes]], removes: list[bytes]) -> None:
        self.round_trips += 1
        for key, value in puts:
            self.put(key, value)
        for key in removes:
            self.remove(key)

    def remove(self, key: bytes) -> None:
        self.removes += 1
        del self.entries[key]

    def calls(self) -> tuple[int, int, int]:
        calls = (self.gets, self.puts, self.removes)
        self.gets = self.puts = self.removes = 0
        return calls


def test_the_keys_due_come_earliest_first_by_their_timer_or_their_earliest_waiting_row() -> None:
    # the joins emit a watermark's rows key by key in this order
    timers = {"a": 40, "b": 10, "c": 90}
    waiting = {
        "a": [(1, 30, ("a1",), "+I"), (2, 20, ("a2",), "+I")],  # waits from 20, before its timer
        "d": [(3, 15, ("d1",), "+I")],
        "e": [(4, 60, ("e1",), "+I")],
        "b": [(5, 50, ("b1",), "+I")],  # its timer is earlier
    }
    assert due_keys(timers, waiting, 50) == ["b", "d", "a"]
    assert due_keys(timers, waiting, 9) == []
    assert due_keys(timers, waiting, 100) == ["b", "d", "a", "e", "c"]


def test_a_batch_reads_and_writes_only_the_keys_it_touches() -> None:
    store, timers = CountingStore(), {}
    latest = StoredKeys(store, timers, as_is, as_is, never)
    for i in range(10_000):
        latest[(f"p{i}",)] = (f"p{i}", i)
    latest.flush()
    assert store.calls() == (10_000, 10_000, 0)

    latest[("p7",)] = ("p7", 70)  # an update
    assert latest.get(("p8",)) == ("p8", 8)  # a lookup
    latest.pop(("p9",))  # a delete
    latest[("p8",)] = ("p8", 8)  # unchanged: not rewritten
    latest.flush()
    assert store.calls() == (3, 1, 1)
    again = StoredKeys(store, timers, as_is, as_is, never)
    assert [again.get((k,)) for k in ("p7", "p8", "p9")] == [("p7", 70), ("p8", 8), None]


def test_a_batch_touching_many_of_a_buckets_keys_reads_them_in_one_pass() -> None:
    store = CountingStore()
    loading = StoredKeys(store, {}, as_is, as_is, never)
    loading.prefetch((f"p{i}",) for i in range(100))  # an empty bucket: one pass, no gets
    for i in range(100):
        loading[(f"p{i}",)] = i
    loading.flush()
    assert (store.scans, store.gets, loading.stored) == (1, 0, 100)

    store.scans = store.gets = 0
    dense = StoredKeys(store, {}, as_is, as_is, never, loading.ledger)
    dense.prefetch([*((f"p{i}",) for i in range(70)), ("x",)] * 2)  # 71 keys of 100
    assert [dense.get(k) for k in [("p1",), ("p3",), ("x",)]] == [1, 3, None]
    assert (store.scans, store.gets) == (1, 0)

    store.scans = store.round_trips = 0
    sparse = StoredKeys(store, {}, as_is, as_is, never, loading.ledger)
    sparse.prefetch([(f"p{i}",) for i in range(60)])  # 60 keys of 100: read at once
    assert (store.scans, store.gets, store.round_trips) == (0, 60, 1)
    assert [sparse.get(("p2",)), sparse.get(("p59",))] == [2, 59]
    sparse[("p2",)] = 20
    sparse.pop(("p3",))
    sparse.flush()  # one write for the batch
    assert (store.gets, store.puts, store.removes, store.round_trips) == (60, 101, 1, 2)


def test_under_a_ttl_what_the_store_holds_is_counted_until_spark_drops_it_unseen() -> None:
    """Spark drops an entry not written for the TTL without telling the processor: the
    bucket's ledger stops counting it then, with no read of the entries."""
    store = CountingStore()
    ttl = 60_000
    early = StoredKeys(store, {}, as_is, as_is, never, None, lambda rows: (len(rows), 0), ttl, 0)
    early[("p1",)] = ("o1", "o2")
    early.flush()
    later = StoredKeys(
        store, {}, as_is, as_is, never, early.ledger, lambda rows: (len(rows), 0), ttl, 30_000
    )
    later[("p2",)] = ("o3",)
    later.flush()
    assert (later.stored, later.held) == (2, (3, 0))
    store.calls()
    gone = StoredKeys(
        store, {}, as_is, as_is, never, later.ledger, lambda rows: (len(rows), 0), ttl, 62_000
    )
    assert (gone.stored, gone.held) == (1, (1, 0))  # p1's entry expired, unread
    assert gone.get(("p1",)) is None  # and is gone, even where the store still answers for it
    assert gone.get(("p2",)) == ("o3",)
    gone.flush()
    assert store.calls() == (2, 0, 0)


def test_under_a_ttl_a_key_handed_out_unchanged_is_not_rewritten_though_its_expiry_moved() -> None:
    """A key's entry is rewritten only when its state changed: not to move its expiry on (a
    row's retention is its own, `state.store.retention`). An entry written whole, as before
    states were nested, is read, and rewritten nested once it changes."""
    store, ttl = CountingStore(), 60_000
    first = StoredKeys(store, {}, as_is, as_is, never, None, unsized, ttl, 0)
    first[("p1",)] = ("o1",)
    first[("p2",)] = ("o2",)
    first.flush()
    store.entries[dump_key(("p3",))] = dump((ttl, ("o3",)))  # the layout before
    store.calls()
    later = StoredKeys(store, {}, as_is, as_is, never, first.ledger, unsized, ttl, 30_000)
    later.prefetch([("p1",), ("p2",), ("p3",)])
    later[("p1",)] = ("o1",)  # as it was
    later[("p2",)] = ("o2", "o4")
    assert later.get(("p3",)) == ("o3",)
    later.flush()
    assert store.calls()[1:] == (2, 0)  # p2 and p3 written (p3 nested now), p1 not
    last = StoredKeys(store, {}, as_is, as_is, never, later.ledger, unsized, ttl, 61_000)
    assert [last.get((k,)) for k in ("p1", "p2", "p3")] == [None, ("o2", "o4"), ("o3",)]


def test_a_key_finds_its_entry_whether_or_not_its_equal_values_are_one_object() -> None:
    """`JOIN_ON L.a = R.a AND L.b = R.b` with a = b: Arrow may hand both values as one string
    object in one batch and as two in the next; both must name the same entry."""
    store = CountingStore()
    one = "ab" + str(1)
    first = StoredKeys(store, {}, as_is, as_is, never)
    first[(one, one)] = ("o1",)
    first.flush()
    second = StoredKeys(store, {}, as_is, as_is, never)
    assert second.get(("ab" + str(1), "ab" + str(1))) == ("o1",)


def _loaded_table(
    products: int,
    store: CountingStore,
    timers: dict,
    to_plain: Callable[[Any], Any] = key_to_plain,
) -> tuple[EventTimeTemporalJoin, Callable[[dict], KeyedBucket]]:
    """A LEFT temporal join, and a bucket over `store` with rows `waiting`, after a table of
    `products` keys `p<i>` loaded at 1 s (price i) and p1 updated at 5 s (price 100)."""
    join = EventTimeTemporalJoin("left", lambda probe, version: True)

    def bucket(waiting: dict) -> KeyedBucket:
        return KeyedBucket(StoredKeys(store, timers, to_plain, key_from_plain, key_timer), waiting)

    loading = bucket({})
    for i in range(products):
        join.version(loading, (f"p{i}",), "+I", 1_000, (f"p{i}", i))
    join.version(loading, ("p1",), "+U", 5_000, ("p1", 100))
    loading.keys.flush()
    return join, bucket


def test_probe_rows_wait_without_reading_their_keys_and_a_loaded_table_waits_for_nothing() -> None:
    """A table loaded ahead of the watermark (one version per key) leaves no key waiting; an
    order reads its key's versions once, when the watermark passes it."""
    store, timers = CountingStore(), {}
    join, bucket = _loaded_table(1000, store, timers)
    assert timers == {("p1",): 5_000}  # two versions: the first is trimmed once 5 s pass
    assert store.calls() == (1000, 1000, 0)

    ordering = bucket({})
    join.probe(ordering, ("p2",), 0, 3_000, ("o1",))
    ordering.keys.flush()
    assert store.calls() == (0, 0, 0)
    assert ordering.next_timer() == 3_000

    firing = bucket(ordering.waiting)
    assert join.fire_due(firing, 4_000) == [Change("+I", ("o1",), ("p2", 2))]
    firing.keys.flush()
    assert (firing.waiting, firing.next_timer()) == ({}, 5_000)
    assert store.calls() == (1, 0, 0)  # p2 read; its one version unchanged


def test_orders_joined_as_of_versions_they_leave_as_they_were_encode_no_key_again() -> None:
    """Due orders read their keys' versions; a key the trim leaves as it was is neither written
    nor encoded again to find that out, while one the trim shortens is written back."""
    store, timers, encoded = CountingStore(), {}, []

    def counted(state: Any) -> tuple:
        encoded.append(state)
        return key_to_plain(state)

    join, bucket = _loaded_table(100, store, timers, counted)
    store.calls()
    encoded.clear()

    firing = bucket({(f"p{i}",): [(i, 6_000, (f"o{i}",), "+I")] for i in range(100)})
    out = join.fire_due(firing, 6_000)
    assert len(out) == 100 and Change("+I", ("o1",), ("p1", 100)) in out
    firing.keys.flush()
    assert [state.versions for state in encoded] == [{5_000: ("+U", ("p1", 100))}]
    assert store.calls() == (100, 1, 0)
    assert timers == {}


def test_lookups_of_the_latest_rows_encode_no_key_again() -> None:
    """A processing-time temporal join's orders read their product's latest row: the flush
    after them neither writes nor encodes a key; a new row of the table is written."""
    join = ProcessingTimeTemporalJoin("left", lambda probe, version: True)
    store, encoded = CountingStore(), []

    def counted(state: Any) -> Any:
        encoded.append(state)
        return state

    latest = StoredKeys(store, {}, as_is, as_is, never)
    for i in range(100):
        join.version(latest, (f"p{i}",), "+I", (f"p{i}", i))
    latest.flush()
    store.calls()
    looking = StoredKeys(store, {}, counted, as_is, never)
    out = [c for i in range(100) for c in join.probe(looking, (f"p{i}",), (f"o{i}",))]
    assert out[7] == Change("+I", ("o7",), ("p7", 7))
    join.version(looking, ("p1",), "+U", ("p1", 100))
    looking.flush()
    assert encoded == [("p1", 100)]
    assert store.calls() == (100, 1, 0)


def test_state_is_plain_data_behind_a_format_byte() -> None:
    utc = datetime(2026, 11, 23, 12, tzinfo=ZoneInfo("UTC"))  # as the Row API hands a timestamp
    value = {("k", 1): [(b"x", Decimal("1.5"), None, 2.0, utc)]}
    assert load(dump(value)) == value
    with pytest.raises(StateFormatError, match=f"format 128, this code reads format {FORMAT}"):
        load(pickle.dumps(value, protocol=5))  # what checkpoints held before
    with pytest.raises(StateFormatError, match="names a class"):
        load(dump(None)[:1] + pickle.dumps(CountingStore, protocol=5))
    with pytest.raises(StateFormatError, match="calls 'system'"):
        load(dump(None)[:1] + pickle.dumps(_Call(), protocol=5))


class _Call:
    """What a hostile state value would hold: a call of its choosing."""

    def __reduce__(self) -> tuple:
        return getattr, (ZoneInfo, "system")
