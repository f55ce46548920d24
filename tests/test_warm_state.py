"""State kept in a worker between micro-batches is used only while it is the committed state:
the same answers as reading every key from the store, whichever worker ran the bucket last,
after a failed task, under a TTL; within its byte budget."""

from __future__ import annotations

import copy
from typing import Any

from pyspark.sql.streaming.tws_tester import TwsTester, _InMemoryStatefulProcessorHandle

from state.spark.frame import WarmState
from state.spark.layouts import KeyedEntries
from state.store.keyed_state import as_is, never, unsized
from state.store.warm import ENTRY_OVERHEAD, WarmStore
from tests.frames import join_frame
from tests.test_regular_processor import KINDS, SPEC, changes, joined

BUCKET = (0,)


class SharedStore:
    """Spark's state store as the workers share it: one handle's state, committed or rolled
    back as a task's is."""

    def __init__(self) -> None:
        self.handle = _InMemoryStatefulProcessorHandle()
        self.handle.setGroupingKey(BUCKET)
        self.committed: Any = None

    def worker(self, copies: WarmStore, ttl_ms: int | None = None) -> KeyedEntries:
        """A worker's view of the bucket: its own copies, the shared store."""
        entries = KeyedEntries(self.handle, as_is, as_is, never, unsized, ttl_ms)
        entries.keep_warm(copies, "join")
        return entries

    def commit(self) -> None:
        self.committed = copy.deepcopy(
            (
                {n: s.state for n, s in self.handle.value_states.items()},
                {n: s.state for n, s in self.handle.map_states.items()},
            )
        )

    def roll_back(self) -> None:
        values, maps = copy.deepcopy(self.committed)
        for name, state in values.items():
            self.handle.value_states[name].state = state
        for name, state in maps.items():
            self.handle.map_states[name].state = state


def visit(worker: KeyedEntries, writes: dict[str, Any], now: int = 0) -> dict[str, Any]:
    """One micro-batch's visit of the bucket: the keys of `writes` read (what it saw is
    returned), then written (None removes)."""
    bucket, before = worker.read(now, BUCKET)
    bucket.keys.prefetch(list(writes))
    seen = {key: bucket.keys.get(key) for key in writes}
    for key, value in writes.items():
        if value is None:
            bucket.keys.pop(key)
        else:
            bucket.keys[key] = value
    worker.flush(bucket)
    worker.write(bucket, before)
    return seen


def test_a_worker_that_ran_a_bucket_last_reads_none_of_its_keys_from_the_store_again() -> None:
    store, copies = SharedStore(), WarmStore(2**20)
    worker = store.worker(copies)
    assert visit(worker, {"p1": 10, "p2": 20}) == {"p1": None, "p2": None}
    copies.counts()
    assert visit(worker, {"p1": 11, "p2": 21, "p3": 30}) == {"p1": 10, "p2": 20, "p3": None}
    assert copies.counts() == (2, 0)  # p3, never written, the bucket's filter answers


def test_a_bucket_another_worker_wrote_since_is_read_from_the_store() -> None:
    store = SharedStore()
    one, other = store.worker(WarmStore(2**20)), store.worker(WarmStore(2**20))
    visit(one, {"p1": 10})
    visit(other, {"p1": 11})
    assert visit(one, {"p1": 12}) == {"p1": 11}
    assert visit(other, {"p1": 13}) == {"p1": 12}


def test_a_copy_stays_current_while_the_other_worker_only_reads() -> None:
    store, mine = SharedStore(), WarmStore(2**20)
    one, other = store.worker(mine), store.worker(WarmStore(2**20))
    visit(one, {"p1": 10})
    bucket, before = other.read(0, BUCKET)  # a visit that changes nothing: no token written
    assert bucket.keys.get("p1") == 10
    other.flush(bucket)
    other.write(bucket, before)
    mine.counts()
    assert visit(one, {"p1": 11}) == {"p1": 10}
    assert mine.counts() == (1, 0)


def test_a_failed_task_s_writes_are_never_read_from_its_copy() -> None:
    store, copies = SharedStore(), WarmStore(2**20)
    worker = store.worker(copies)
    visit(worker, {"p1": 10})
    store.commit()
    visit(worker, {"p1": 99, "p2": 99})  # the task fails after this visit: Spark rolls back
    store.roll_back()
    assert visit(worker, {"p1": 11, "p2": 21}) == {"p1": 10, "p2": None}


def test_a_visit_cut_short_leaves_its_copy_unused() -> None:
    store, copies = SharedStore(), WarmStore(2**20)
    worker = store.worker(copies)
    visit(worker, {"p1": 10})
    store.commit()
    bucket, _before = worker.read(0, BUCKET)
    bucket.keys["p1"] = 99
    worker.flush(bucket)  # written, then the task dies before the bucket's own value
    store.roll_back()
    assert visit(worker, {"p1": 11}) == {"p1": 10}


def test_under_a_ttl_a_copy_is_used_only_well_before_spark_could_drop_its_entry() -> None:
    store, copies = SharedStore(), WarmStore(2**20)
    worker = store.worker(copies, ttl_ms=10_000)
    visit(worker, {"p1": 10}, now=1_000)
    copies.counts()
    assert visit(worker, {"p2": 20}, now=2_000) == {"p2": None}  # p1 streamed past: a read
    assert visit(worker, {"p1": 10}, now=5_000) == {"p1": 10}
    assert copies.counts() == (1, 1)
    assert visit(worker, {"p1": 10}, now=10_500) == {"p1": 10}  # within the margin: read again
    assert copies.counts() == (0, 1)
    # an entry read from the store under a TTL is not kept: when it was written is not known
    other = store.worker(WarmStore(2**20), ttl_ms=10_000)
    visit(other, {"p2": 21}, now=11_000)
    assert visit(worker, {"p2": 22}, now=11_500) == {"p2": 21}


def test_copies_beyond_the_budget_go_least_recently_visited_first() -> None:
    copies = WarmStore(2 * (ENTRY_OVERHEAD + 50))  # two buckets of one small entry each
    stores = [SharedStore() for _ in range(3)]
    workers = [s.worker(copies) for s in stores]
    for number, store in enumerate(stores):
        store.handle.setGroupingKey((number,))
    for number, worker in enumerate(workers):
        bucket, before = worker.read(0, (number,))
        bucket.keys["p1"] = number
        worker.flush(bucket)
        worker.write(bucket, before)
    assert [owner[1] for owner in copies.buckets] == [(1,), (2,)]


class Counted:
    def __init__(self) -> None:
        self.counts: dict[tuple[str], int] = {}

    def add(self, counts: dict[tuple[str], int]) -> None:
        for label, count in counts.items():
            self.counts[label] = self.counts.get(label, 0) + count


def test_the_join_answers_the_same_with_warm_state_and_counts_its_reads() -> None:
    batches = [
        changes((1, "+I", 1, ("p1", 10)), (0, "+I", 2, ("o1", "p1", 1))),
        changes((1, "-U", 3, ("p1", 10)), (1, "+U", 4, ("p1", 12)), (0, "+I", 5, ("o2", "p2", 1))),
        changes((0, "-D", 6, ("o1", "p1", 1)), (1, "+I", 7, ("p2", 5))),
    ]
    reads = Counted()
    cold = TwsTester(join_frame(SPEC, KINDS))
    warm_frame = join_frame(SPEC, KINDS)
    warm_frame.warm = WarmState(2**20, reads)
    warm = TwsTester(warm_frame)  # init after `warm` is set, as on a worker
    for batch in batches:
        expected = joined(cold.testInPandas(0, batch))
        assert joined(warm.testInPandas(0, batch.copy())) == expected
    warm_frame.close()
    # p1 in the second and third batches, p2 in the third; p2 in the second the bucket's
    # filter answers (never written)
    assert reads.counts == {("hit",): 3, ("miss",): 0}
