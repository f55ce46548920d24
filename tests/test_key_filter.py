"""A bucket's filter of the names its entries were written under: it never misses one, and
answers "absent" for nearly every name never written, so loading a table costs one state call
a row, not two."""

from __future__ import annotations

from state.spark.layouts import KeyedEntries
from state.store.encoding import dump, dump_key
from state.store.key_filter import FIRST_CAPACITY, MAX_KEYS, KeyFilter
from state.store.keyed_state import StoredKeys, as_is, never
from tests.test_keyed_state import CountingStore


def test_the_filter_never_misses_a_name_and_rarely_claims_one_never_written() -> None:
    known = KeyFilter()
    written = [dump_key((f"p{i}",)) for i in range(100_000)]
    assert all(known.add(name) for name in written)
    again = KeyFilter.from_plain(known.to_plain())  # as the bucket's value holds it
    assert all(again.might_hold(name) for name in written)
    false_positives = sum(again.might_hold(dump_key((f"q{i}",))) for i in range(20_000))
    assert false_positives < 0.02 * 20_000
    assert len(known.to_plain()) == 7  # grown in layers, each twice the last


def test_names_taken_together_set_and_test_the_bits_one_at_a_time_would() -> None:
    """A batch's names go through the filter together (numpy); a bucket written that way is
    read one name at a time by another visit, and the other way round."""
    written = [dump_key((f"p{i}",)) for i in range(40_000)]
    one_by_one, together = KeyFilter(), KeyFilter()
    assert all(one_by_one.add(name) for name in written)
    for start in range(0, len(written), 777):  # batches across the layers' boundaries
        assert together.add_all(written[start : start + 777])
    assert together.to_plain() == one_by_one.to_plain()
    asked = written[::7] + [dump_key((f"q{i}",)) for i in range(5_000)]
    assert together.might_hold_each(asked) == [one_by_one.might_hold(n) for n in asked]
    assert all(together.might_hold_each(written))
    full = KeyFilter()
    assert not full.add_all([str(i).encode() for i in range(MAX_KEYS + 1)])


def test_a_full_filter_says_so_and_a_small_bucket_keeps_a_small_one() -> None:
    small = KeyFilter()
    small.add(b"k")
    assert sum(len(bits) for _c, _n, bits in small.to_plain()) == FIRST_CAPACITY * 12 // 8
    full = KeyFilter()
    assert all(full.add(str(i).encode()) for i in range(MAX_KEYS))
    assert not full.add(b"one more")


def test_keys_a_bucket_never_held_cost_no_read_and_written_ones_are_found() -> None:
    store = CountingStore()
    loading = StoredKeys(store, {}, as_is, as_is, never, known=KeyFilter())
    loading.prefetch((f"p{i}",) for i in range(10_000))
    for i in range(10_000):
        loading[(f"p{i}",)] = i
    loading.flush()
    assert store.calls() == (0, 10_000, 0)

    probing = StoredKeys(store, {}, as_is, as_is, never, loading.ledger, known=loading.known)
    probing.prefetch([*((f"p{i}",) for i in range(500)), *((f"new{i}",) for i in range(5_000))])
    found = [probing.get(("p7",)), probing.get(("new7",)), probing.get(("other",))]
    assert found == [7, None, None]
    gets, _puts, _removes = store.calls()
    assert 500 <= gets < 500 + 0.02 * 5_001  # the held keys, and a few false positives


class _Value:
    def __init__(self) -> None:
        self.value: tuple | None = None

    def get(self) -> tuple | None:
        return self.value

    def update(self, value: tuple) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class _Map:
    """A `MapState` of one bucket, answering one entry per call."""

    def __init__(self) -> None:
        self.entries: dict[tuple, tuple] = {}
        self.gets = 0

    def getValue(self, key: tuple) -> tuple | None:  # pyspark's name
        self.gets += 1
        return self.entries.get(key)

    def updateValue(self, key: tuple, value: tuple) -> None:
        self.entries[key] = value

    def iterator(self) -> list[tuple[tuple, tuple]]:
        return list(self.entries.items())


class _Handle:
    """The two state variables `KeyedEntries` asks a processor's handle for."""

    def __init__(self) -> None:
        self.own, self.keys = _Value(), _Map()

    def getValueState(self, *_args: object) -> _Value:
        return self.own

    def getMapState(self, *_args: object) -> _Map:
        return self.keys


def _load(entries: KeyedEntries, keys: list[str]) -> None:
    bucket, before = entries.read()
    bucket.keys.prefetch((k,) for k in keys)
    for k in keys:
        bucket.keys[(k,)] = k
    entries.flush(bucket)
    entries.write(bucket, before)


def test_a_bucket_starts_its_filter_empty_and_keeps_it_across_batches() -> None:
    handle = _Handle()
    entries = KeyedEntries(handle, as_is, as_is, never, lambda _s: (1, 0))  # type: ignore[arg-type]
    _load(entries, [f"p{i}" for i in range(1000)])
    _load(entries, [f"q{i}" for i in range(1000)])
    assert handle.keys.gets < 20  # the second batch's new keys, bar false positives
    bucket, _ = entries.read()
    assert [bucket.keys.get(("p5",)), bucket.keys.get(("q5",))] == ["p5", "q5"]


def test_a_bucket_written_before_filters_or_under_a_ttl_reads_every_key() -> None:
    """A bucket's value from before filters (four fields) may hold entries no filter saw; under
    a TTL entries go unseen. Both keep asking the store."""
    old = _Handle()
    old.keys.entries[(dump_key(("p1",)),)] = (dump((None, "p1")),)
    old.own.value = (dump((None, [], {}, [(None, [1, 1, 0])])),)
    entries = KeyedEntries(old, as_is, as_is, never, lambda _s: (1, 0))  # type: ignore[arg-type]
    bucket, _ = entries.read()
    assert bucket.keys.known is None and bucket.keys.get(("p1",)) == "p1"

    timed = _Handle()
    ttl = KeyedEntries(timed, as_is, as_is, never, lambda _s: (1, 0), 60_000)  # type: ignore[arg-type]
    _load(ttl, ["p1", "p2"])  # into an empty bucket: one pass over its entries
    _load(ttl, ["p3"])
    assert timed.keys.gets == 1
