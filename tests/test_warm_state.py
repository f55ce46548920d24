"""State kept beside the store between micro-batches is used only while it is the committed
state: the same answers as reading every key from the store, whichever worker ran the bucket
last, after a failed task, under a TTL; within its byte budget. In a worker's own memory and in
the keeper its executor's workers share."""

from __future__ import annotations

import contextlib
import copy
import itertools
import random
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.tws_tester import TwsTester, _InMemoryStatefulProcessorHandle

from state.joins import pages
from state.joins.specs import RegularJoinSpec, SideSpec, TemporalJoinSpec
from state.spark.frame import WarmState
from state.spark.layouts import KeyedEntries
from state.store.keeper import Keeper, KeeperCopies, start
from state.store.keyed_state import as_is, never, unsized
from state.store.warm import ENTRY_OVERHEAD, Copies, ReadCounts, WarmStore
from tests.frames import RandomChanges, join_frame
from tests.test_regular_processor import KINDS, SPEC, changes, joined, stored_keys
from tests.test_temporal_processor import SPEC as RATES
from tests.test_temporal_processor import changes as rate_changes
from tests.test_temporal_processor import yen

BUCKET = (0,)
_STORES = itertools.count()


class SharedStore:
    """Spark's state store as the workers share it: one handle's state, committed or rolled
    back as a task's is."""

    def __init__(self) -> None:
        # its own owner: a keeper outlives a test, and an earlier test's last settle may reach
        # it after this one's first, as one from another executor's task would
        self.owner = f"join-{next(_STORES)}"
        self.handle = _InMemoryStatefulProcessorHandle()
        self.handle.setGroupingKey(BUCKET)
        self.committed: Any = None

    def worker(
        self,
        copies: Copies,
        counts: ReadCounts | None = None,
        ttl_ms: int | None = None,
        budget: int = 2**20,
    ) -> KeyedEntries:
        """A worker's view of the bucket: the shared store, through `copies`."""
        entries = KeyedEntries(self.handle, as_is, as_is, never, unsized, ttl_ms)
        entries.keep_warm(copies, counts or ReadCounts(), self.owner, budget)
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


@pytest.fixture(scope="module")
def keeper() -> str:
    """A keeper process, as a worker daemon starts one; it ends with this test process."""
    return start()


@pytest.fixture(params=["in the worker", "in the keeper"])
def copies(request: pytest.FixtureRequest) -> Copies:
    if request.param == "in the worker":
        return WarmStore()
    return KeeperCopies(request.getfixturevalue("keeper"))


def test_a_bucket_s_next_visit_reads_none_of_its_keys_from_the_store_again(
    copies: Copies,
) -> None:
    store, counts = SharedStore(), ReadCounts()
    worker = store.worker(copies, counts)
    assert visit(worker, {"p1": 10, "p2": 20}) == {"p1": None, "p2": None}
    counts.take()
    assert visit(worker, {"p1": 11, "p2": 21, "p3": 30}) == {"p1": 10, "p2": 20, "p3": None}
    assert counts.take() == (2, 0)  # p3, never written, the bucket's filter answers


def test_workers_sharing_the_keeper_find_each_other_s_copies(keeper: str) -> None:
    store, counts = SharedStore(), ReadCounts()
    one, other = KeeperCopies(keeper), KeeperCopies(keeper)
    visit(store.worker(one), {"p1": 10})
    one.recall(("join", "-"), None, [])  # its settle reached the keeper before this answer
    assert visit(store.worker(other, counts), {"p1": 11}) == {"p1": 10}
    assert counts.take() == (1, 0)


def test_a_settle_does_not_wait_for_the_keeper_to_read_it(tmp_path: Path) -> None:
    """A visit's settle (every entry it wrote: more than a socket holds) is handed over, not
    sent while the visit waits: the keeper, busy elsewhere, reads it later, whole. What a
    keeper that reads nothing would leave queued in the worker is bounded: past the bound a
    settle is dropped, and its bucket's copy is not found."""
    path = str(tmp_path / "socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()  # a keeper that accepts no connection yet, reads nothing
        copies = KeeperCopies(path, queued_limit=15_000_000)
        kept = {f"p{i}".encode(): (bytes(1000), 7) for i in range(10_000)}  # 10 MB
        settling = threading.Thread(
            target=lambda: [
                copies.settle((f"join-{i}", 0), None, b"t", kept, 2**30) for i in (1, 2)
            ]
        )
        settling.start()
        settling.join(timeout=30)
        assert not settling.is_alive()
        conn, _ = listener.accept()  # the keeper gets to it: the first settle arrives, whole
        threading.Thread(target=Keeper().serve, args=(conn,), daemon=True).start()
        assert copies.recall(("join-1", 0), b"t", list(kept)) == kept
        assert copies.recall(("join-2", 0), b"t", list(kept)) == {}


def test_a_bucket_written_where_its_copy_was_not_kept_is_read_from_the_store(
    copies: Copies,
) -> None:
    store = SharedStore()
    one, elsewhere = store.worker(copies), store.worker(WarmStore())
    visit(one, {"p1": 10})
    visit(elsewhere, {"p1": 11})
    assert visit(one, {"p1": 12}) == {"p1": 11}
    assert visit(elsewhere, {"p1": 13}) == {"p1": 12}


def test_a_copy_stays_current_while_visits_elsewhere_only_read(copies: Copies) -> None:
    store, counts = SharedStore(), ReadCounts()
    one, elsewhere = store.worker(copies, counts), store.worker(WarmStore())
    visit(one, {"p1": 10})
    bucket, before = elsewhere.read(0, BUCKET)  # a visit that changes nothing: no new token
    assert bucket.keys.get("p1") == 10
    elsewhere.flush(bucket)
    elsewhere.write(bucket, before)
    counts.take()
    assert visit(one, {"p1": 11}) == {"p1": 10}
    assert counts.take() == (1, 0)


def test_a_failed_task_s_writes_are_never_read_from_the_copies(copies: Copies) -> None:
    store = SharedStore()
    worker = store.worker(copies)
    visit(worker, {"p1": 10})
    store.commit()
    visit(worker, {"p1": 99, "p2": 99})  # the task fails after this visit: Spark rolls back
    store.roll_back()
    assert visit(worker, {"p1": 11, "p2": 21}) == {"p1": 10, "p2": None}


def test_a_visit_cut_short_leaves_the_copies_as_they_were(copies: Copies) -> None:
    store = SharedStore()
    worker = store.worker(copies)
    visit(worker, {"p1": 10})
    store.commit()
    bucket, _before = worker.read(0, BUCKET)
    bucket.keys["p1"] = 99
    worker.flush(bucket)  # written, then the task dies before the bucket's own value
    store.roll_back()
    assert visit(worker, {"p1": 11}) == {"p1": 10}


def test_under_a_ttl_a_copy_is_used_only_well_before_spark_could_drop_its_entry(
    copies: Copies,
) -> None:
    store, counts = SharedStore(), ReadCounts()
    worker = store.worker(copies, counts, ttl_ms=10_000)
    visit(worker, {"p1": 10}, now=1_000)
    counts.take()
    assert visit(worker, {"p2": 20}, now=2_000) == {"p2": None}  # p1 streamed past: a read
    assert visit(worker, {"p1": 10}, now=5_000) == {"p1": 10}
    assert counts.take() == (1, 1)
    assert visit(worker, {"p1": 10}, now=10_500) == {"p1": 10}  # within the margin: read again
    assert counts.take() == (0, 1)
    # an entry read from the store under a TTL is not kept: when it was written is not known
    elsewhere = store.worker(WarmStore(), ttl_ms=10_000)
    visit(elsewhere, {"p2": 21}, now=11_000)
    visit(worker, {"p2": 22}, now=11_500)
    counts.take()
    assert visit(worker, {"p2": 23}, now=12_000) == {"p2": 22}  # written: kept
    assert counts.take() == (1, 0)


def test_copies_beyond_the_budget_go_least_recently_settled_first() -> None:
    copies = WarmStore()
    stores = [SharedStore() for _ in range(3)]
    for number, store in enumerate(stores):
        store.handle.setGroupingKey((number,))
        worker = store.worker(copies, budget=2 * (ENTRY_OVERHEAD + 50))  # two small buckets
        bucket, before = worker.read(0, (number,))
        bucket.keys["p1"] = number
        worker.flush(bucket)
        worker.write(bucket, before)
    assert [owner[1] for owner in copies.buckets] == ["(1,)", "(2,)"]


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


def test_a_timer_s_visit_reads_what_the_bucket_s_rows_visits_kept() -> None:
    """Spark hands a bucket's rows with its key as a tuple and its timers with the key as a
    `Row`: an event-time join's orders that come out at a timer join the rate a visit of the
    bucket's rows kept, without reading it from the store again."""
    spec = TemporalJoinSpec(RATES.kind, RATES.on, RATES.left, RATES.right, "order_time")
    reads = Counted()
    frame = join_frame(spec, {"L_amount": "integral", "R_rate": "integral"})
    frame.warm = WarmState(2**20, reads)
    tester = TwsTester(frame, timeMode="EventTime", eventTimeExtractor=lambda _row: float("inf"))
    by_key = frame.handleExpiredTimer
    frame.handleExpiredTimer = lambda key, *rest: by_key(Row(bucket=key[0]), *rest)  # Spark's
    tester.testInPandas(0, rate_changes((1, "+I", 1, ("Euro", 114))).assign(ts=0))
    assert tester.testInPandas(0, rate_changes((0, "+I", 10, (3, "Euro"))).assign(ts=500)).empty
    assert yen(tester.setWatermark(600)) == [342]
    frame.close()
    assert reads.counts == {("hit",): 1, ("miss",): 0}


def _workers(spec: RegularJoinSpec, count: int) -> tuple[TwsTester, list[TwsTester]]:
    """A join without copies, and `count` workers of one join with copies that share one
    store, as Spark's workers share its state store (and this process's copies, as a keeper)."""
    cold = TwsTester(join_frame(spec, KINDS), timeMode="ProcessingTime")
    frames = [join_frame(spec, KINDS) for _ in range(count)]
    workers = []
    for frame in frames:
        frame.owner = frames[0].owner  # one operator of one query
        frame.warm = WarmState(2**20)
        workers.append(TwsTester(frame, timeMode="ProcessingTime"))
    for worker in workers[1:]:
        worker.handle = workers[0].handle
        worker.processor.init(worker.handle)
    return cold, workers


def _joined(frame: Any) -> list[tuple]:
    """The joined rows of a visit's output (none: no columns at all)."""
    return joined(frame) if len(frame.columns) else []


def _snapshot(handle: _InMemoryStatefulProcessorHandle) -> Any:
    return copy.deepcopy(
        (
            {n: s.state for n, s in handle.value_states.items()},
            {n: s.state for n, s in handle.map_states.items()},
        )
    )


def _restore(handle: _InMemoryStatefulProcessorHandle, saved: Any) -> None:
    values, maps = copy.deepcopy(saved)
    for name, state in values.items():
        handle.value_states[name].state = state
    for name, state in maps.items():
        handle.map_states[name].state = state


@contextlib.contextmanager
def tiny_pages(paged: bool) -> Iterator[None]:
    """A side's rows in pages from its third row on, a page of one row or more (`paged`)."""
    sizes = pages.INLINE_ROWS, pages.PAGE_ROWS
    if paged:
        pages.INLINE_ROWS, pages.PAGE_ROWS = 2, 1
    try:
        yield
    finally:
        pages.INLINE_ROWS, pages.PAGE_ROWS = sizes


@pytest.mark.parametrize("paged", [False, True], ids=["inline", "paged"])
@pytest.mark.parametrize("seed", range(6))
def test_random_changes_run_by_random_workers_with_failed_attempts_join_as_without_copies(
    seed: int, paged: bool
) -> None:
    """`paged`: the workers keep a key's rows in pages (read with the copies, moved in and out
    of pages as keys grow and shrink), the join they are checked against inline."""
    rng = random.Random(seed)
    spec = RegularJoinSpec(
        "left",
        "L.product_id = R.product_id",
        SideSpec(("order_id", "product_id", "qty"), ("order_id",)),
        SideSpec(("product_id", "price"), ("product_id",)),
        state_ttl_ms=rng.choice([0, 5_000]),
    )
    cold, workers = _workers(spec, 3)
    source = RandomChanges(rng, 12, 2 if paged else 4)  # paged: keys grow and shrink past pages
    for batch in range(40):
        now = 1_000 * (batch + 1)
        rows = source.batch(rng.randrange(1, 6))
        input_rows = changes(*rows)
        cold.setProcessingTime(now)
        expected = _joined(cold.testInPandas(0, input_rows))
        for worker in workers:
            worker._currentProcessingTimeMs = now
        with tiny_pages(paged):
            if rng.random() < 0.3:  # an attempt that fails after its visit: rolled back
                saved = _snapshot(workers[0].handle)
                rng.choice(workers).testInPandas(0, input_rows.copy())
                _restore(workers[0].handle, saved)
            got = _joined(rng.choice(workers).testInPandas(0, input_rows.copy()))
        if paged:  # a paged side's rows come page by page, as Flink's MapState's in key order
            got, expected = sorted(got, key=repr), sorted(expected, key=repr)
        assert got == expected, f"batch {batch}"
    assert sum(worker.processor.reads.hits for worker in workers) > 0
    if paged:
        assert workers[0].handle.map_states["pages"].state, "no key's rows were ever paged"


def test_a_key_s_pages_resized_in_a_visit_hold_what_the_visit_left_not_the_copies() -> None:
    """Three orders of one product in pages, kept warm; a visit deletes one and adds 47, so
    the rows move to more pages; the product then joins the 49 orders left, not the deleted
    one the copies' pages still held."""
    reads = Counted()
    frame = join_frame(SPEC, KINDS)
    frame.warm = WarmState(2**20, reads)
    tester = TwsTester(frame)
    with tiny_pages(True):
        tester.testInPandas(0, changes(*[(0, "+I", i, (f"o{i}", "p1", 1)) for i in range(3)]))
        added = [(0, "+I", i, (f"o{i}", "p1", 1)) for i in range(3, 50)]
        tester.testInPandas(0, changes((0, "-D", 10, ("o0", "p1", 1)), *added))
        (left, _right) = stored_keys(tester, 0)[("p1",)]
        assert left[2][:2] == (pages.pages_for(49), 49) and pages.pages_for(49) > pages.pages_for(3)
        out = tester.testInPandas(0, changes((1, "+I", 20, ("p1", 10))))
    frame.close()
    assert sorted(row[1] for row in joined(out) if row[0] == "+I") == sorted(
        f"o{i}" for i in range(1, 50)
    )
    assert reads.counts[("hit",)] > 0
