"""Flink's time-interval join semantics, in plain Python (no Spark)."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from state.changes import Change
from state.joins.interval_join import (
    MAX_TIME,
    Bucket,
    IntervalJoin,
    KeyState,
    bucket_from_plain,
    bucket_to_plain,
    cached_rows,
)
from state.joins.specs import IntervalJoinSpec, SideSpec
from state.store.encoding import StateFormatError, dump, dump_packed, load
from tests.frames import join_frame

HOUR = 3_600_000


def matches(left, right) -> bool:
    return True  # rows of one key always match: no residual here


def pair(left: tuple | None, right: tuple | None) -> Change:
    """An interval join's output change: always an insert."""
    return Change("+I", left, right)


def join(kind: str, lower: int = -4 * HOUR, upper: int = 0) -> IntervalJoin:
    return IntervalJoin(kind, lower, upper, matches)


def test_rows_within_the_bounds_join_whichever_side_comes_first() -> None:
    op, bucket = join("inner"), Bucket()
    assert op.process(bucket, "o1", 0, ("o1",), 3 * HOUR, 0) == []
    assert op.process(bucket, "o1", 1, ("s1",), 5 * HOUR, 0) == [pair(("o1",), ("s1",))]
    assert op.process(bucket, "o1", 1, ("s2",), 8 * HOUR, 0) == []  # 5 h after: outside
    assert op.process(bucket, "o1", 0, ("o2",), 6 * HOUR, 0) == [pair(("o2",), ("s2",))]


def test_rows_at_the_epoch_join_in_a_new_bucket_as_in_a_subtask_that_has_seen_rows() -> None:
    """Shipments within 10 s after their order, both at 1970-01-01 00:00:00 before any
    watermark (operator time 0): Flink's expiration times turn negative at its subtask's first
    row, so the shipment meets the order cached for it; a bucket's own start there too."""
    op, bucket = join("inner", lower=-10_000, upper=0), Bucket()
    assert op.process(bucket, "k", 0, ("o1",), 0, 0) == []
    assert op.process(bucket, "k", 1, ("s1",), 0, 0) == [pair(("o1",), ("s1",))]
    assert op.process(bucket, "k", 1, ("s0",), -1, 0) == []  # before its order: outside


def test_an_outer_row_that_never_matched_is_padded_when_its_timer_fires() -> None:
    op, bucket = join("full"), Bucket()
    op.process(bucket, "k", 0, ("o1",), HOUR, 0)
    op.process(bucket, "k", 0, ("o2",), 2 * HOUR, 0)
    op.process(bucket, "k", 1, ("s1",), 3 * HOUR, 0)  # joins both
    op.process(bucket, "k", 1, ("s9",), 20 * HOUR, 0)  # joins none
    assert op.fire_due(bucket, 10 * HOUR) == []  # joined rows leave without padding
    assert Counter(op.fire_due(bucket, MAX_TIME)) == Counter({pair(None, ("s9",)): 1})
    assert bucket.keys == {}


def test_early_fire_pads_an_unmatched_order_after_the_delay_and_corrects_it_on_a_match() -> None:
    """Flink's `EARLY_FIRE('delay' = '10m')` (FLIP-497) on orders LEFT JOIN shipments within 4 h
    after: o1 is padded 10 min after its time, not 4 h after, and its shipment then turns the
    padded row into the joined one (-U/+U); o2, shipped before its early fire, is joined only;
    o3, never shipped, is padded once. Each is padded at most once, early or at its end."""
    op = IntervalJoin("left", -4 * HOUR, 0, matches, early_fire_ms=600_000)
    bucket = Bucket()
    assert op.process(bucket, "o1", 0, ("o1",), HOUR, 0) == []
    assert op.process(bucket, "o2", 0, ("o2",), HOUR, 0) == []
    assert op.process(bucket, "o3", 0, ("o3",), HOUR, 0) == []
    assert op.process(bucket, "o2", 1, ("s2",), HOUR + 60_000, 0) == [pair(("o2",), ("s2",))]
    assert op.fire_due(bucket, HOUR + 599_999) == []
    fired = op.fire_due(bucket, HOUR + 600_000)
    assert Counter(fired) == Counter([pair(("o1",), None), pair(("o3",), None)])
    assert op.process(bucket, "o1", 1, ("s1",), 2 * HOUR, HOUR + 600_000) == [
        Change("-U", ("o1",), None),
        Change("+U", ("o1",), ("s1",)),
    ]
    assert op.fire_due(bucket, MAX_TIME) == []  # o3 was padded already
    assert bucket.keys == {}


def test_early_fire_leaves_an_inner_join_append_only() -> None:
    op = IntervalJoin("inner", -4 * HOUR, 0, matches, early_fire_ms=600_000)
    bucket = Bucket()
    assert op.process(bucket, "o1", 0, ("o1",), HOUR, 0) == []
    assert op.fire_due(bucket, HOUR + 600_000) == []
    assert op.process(bucket, "o1", 1, ("s1",), 2 * HOUR, 0) == [pair(("o1",), ("s1",))]


def test_a_late_row_meets_what_is_still_cached_and_is_padded_at_once_if_unmatched() -> None:
    op, bucket = join("left"), Bucket()
    op.process(bucket, "k", 1, ("s1",), 10 * HOUR, 0)
    # the watermark is at 11 h: a left row of 7 h is late but s1 (cached) is in its bounds
    assert op.process(bucket, "k", 0, ("o1",), 7 * HOUR, 11 * HOUR) == [pair(("o1",), ("s1",))]
    # one of 1 h finds nothing in its bounds: not cached, padded right away
    assert op.process(bucket, "k", 0, ("o2",), HOUR, 11 * HOUR) == [pair(("o2",), None)]
    assert all(not s.left for s in bucket.keys.values())


def test_rows_the_watermark_passed_expire_while_a_new_row_iterates_the_cache() -> None:
    op, bucket = join("right"), Bucket()
    op.process(bucket, "k", 1, ("s1",), HOUR, 0)
    # right rows are needed until L.t = R.t; at watermark 9 h a left row expires s1, padded
    out = op.process(bucket, "k", 0, ("o1",), 9 * HOUR, 9 * HOUR - 1)
    assert out == [pair(None, ("s1",))]


def test_a_cached_row_leaves_when_the_watermark_passes_its_cleanup_timer() -> None:
    op, bucket = join("left", -HOUR, HOUR), Bucket()
    op.process(bucket, "k", 1, ("r1",), 10 * HOUR, 0)
    assert bucket.keys["k"].left_timer == 11 * HOUR + 1  # R.t + upper + 1 ms
    assert op.fire_due(bucket, 11 * HOUR) == []
    assert op.fire_due(bucket, 11 * HOUR + 1) == []  # unmatched right rows of a LEFT join
    assert bucket.keys == {}


def test_cached_rows_are_bounded_by_the_interval_over_an_endless_stream() -> None:
    op, bucket = join("full", -10 * 60_000, 0), Bucket()
    sizes = []
    for i in range(2000):
        t = i * 60_000  # one row per minute per side, 200 intervals long
        op.fire_due(bucket, max(t - 60_000, 0))
        op.process(bucket, f"k{i % 7}", i % 2, (i,), t, max(t - 60_000, 0))
        sizes.append(cached_rows(bucket, left=True) + cached_rows(bucket, left=False))
    assert max(sizes[1000:]) <= max(sizes[:200]) + 2
    assert max(sizes) < 40


def reference(kind: str, lower: int, upper: int, left: list, right: list) -> Counter:
    """Every pair within the bounds; unmatched rows padded on outer sides."""
    out: Counter = Counter()
    for lt, lrow in left:
        hits = [rrow for rt, rrow in right if lower <= lt - rt <= upper]
        out.update(pair(lrow, r) for r in hits)
        if not hits and kind in ("left", "full"):
            out[pair(lrow, None)] += 1
    for rt, rrow in right:
        if kind in ("right", "full") and not any(lower <= lt - rt <= upper for lt, _ in left):
            out[pair(None, rrow)] += 1
    return out


@pytest.mark.parametrize("kind", ["inner", "left", "right", "full"])
@pytest.mark.parametrize(("lower", "upper"), [(-40, 0), (5, 30), (-30, -10), (0, 0), (10, -10)])
def test_without_watermark_until_the_end_the_result_is_every_pair_in_bounds(
    kind: str, lower: int, upper: int
) -> None:
    rng = random.Random(f"{kind}{lower}{upper}")
    for _ in range(20):
        left = [(rng.randrange(1, 200), ("L", i)) for i in range(rng.randrange(0, 15))]
        right = [(rng.randrange(1, 200), ("R", i)) for i in range(rng.randrange(0, 15))]
        op, bucket, out = join(kind, lower, upper), Bucket(), Counter()
        arrivals = [(0, t, r) for t, r in left] + [(1, t, r) for t, r in right]
        rng.shuffle(arrivals)
        for side, t, row in arrivals:
            out.update(op.process(bucket, "k", side, row, t, 0))
        out.update(op.fire_due(bucket, MAX_TIME))
        assert out == reference(kind, lower, upper, left, right)
        assert bucket.keys == {}


def stored(bucket: Bucket) -> Bucket:
    """The bucket as the next micro-batch reads it from the state store."""
    return bucket_from_plain(load(dump(bucket_to_plain(bucket))))


@pytest.mark.parametrize("kind", ["inner", "left", "right", "full"])
def test_a_bucket_stored_between_micro_batches_joins_as_one_never_stored(kind: str) -> None:
    """Keys come and go under a moving watermark, some rows late, an early fire on outer
    joins; the bucket stored and read back after every few rows emits change for change what
    one kept in memory emits, holds as many rows and wants the same next timer."""
    rng = random.Random(kind)
    early = 15 if kind != "inner" else None
    kept, read = Bucket(), Bucket()
    ops = [IntervalJoin(kind, -20, 10, matches, early_fire_ms=early) for _ in range(2)]
    watermark = 0
    for i in range(600):
        if i % 7 == 0:
            watermark += rng.randrange(0, 12)
            outs = [op.fire_due(b, watermark) for op, b in zip(ops, (kept, read), strict=True)]
            assert outs[0] == outs[1]
            read = stored(read)
        key, side = f"k{rng.randrange(12)}", rng.randrange(2)
        t = watermark + rng.randrange(-15, 40)  # some behind the watermark
        row = (side, i)
        outs = [
            op.process(b, key, side, row, t, watermark)
            for op, b in zip(ops, (kept, read), strict=True)
        ]
        assert outs[0] == outs[1]
        for left in (True, False):
            assert cached_rows(kept, left) == cached_rows(read, left)
        assert kept.next_timer() == read.next_timer()
    final = [op.fire_due(b, MAX_TIME) for op, b in zip(ops, (kept, stored(read)), strict=True)]
    assert final[0] == final[1]


def test_a_bucket_written_with_every_key_decoded_in_it_is_read_and_joins_on() -> None:
    """A bucket of the earlier plain form (four fields, each key's state in it) resumes."""
    op = join("inner")
    state = KeyState(left={3 * HOUR: [[("o1",), False]]}, right_timer=3 * HOUR + 1)
    earlier = ({"o1": (state.left, state.right, None, state.right_timer)}, 0, 0, None)
    bucket = bucket_from_plain(load(dump(earlier)))
    assert cached_rows(bucket, left=True) == 1 and bucket.next_timer() == 3 * HOUR + 1
    assert op.process(bucket, "o1", 1, ("s1",), 4 * HOUR, 0) == [pair(("o1",), ("s1",))]


def test_a_visit_decodes_only_the_keys_its_rows_and_due_timers_name() -> None:
    """A live bucket holds many keys waiting for their cleanup; a micro-batch that brings one
    key's row and fires none decodes that key alone."""
    op, bucket = join("inner", -HOUR, HOUR), Bucket()
    for k in range(100):
        op.process(bucket, f"k{k}", 0, (k,), 10 * HOUR + k, 0)
    read = stored(bucket)
    assert op.fire_due(read, 10 * HOUR) == []
    assert op.process(read, "k5", 1, ("s",), 10 * HOUR + 5, 10 * HOUR) == [pair((5,), ("s",))]
    assert list(read.keys.live) == ["k5"]
    assert cached_rows(read, left=True) == 100 and cached_rows(read, left=False) == 1


def test_a_large_bucket_is_stored_packed_and_reads_back_as_it_was_written() -> None:
    """A live bucket of many keys is stored packed, a fraction of its pickle's size, and joins
    on as written; one stored unpacked (as before packing) reads too; a small one is not
    packed."""
    op, bucket = join("inner", -HOUR, HOUR), Bucket()
    for k in range(300):
        op.process(bucket, f"k{k}", 0, (f"order {k}", k), 10 * HOUR + k, 0)
    plain = bucket_to_plain(bucket)
    packed, unpacked = dump_packed(plain), dump(plain)
    assert len(packed) * 3 < len(unpacked)
    for blob in (packed, unpacked):
        read = bucket_from_plain(load(blob))
        assert cached_rows(read, left=True) == 300 and read.next_timer() == bucket.next_timer()
        joined = op.process(read, "k7", 1, ("s",), 10 * HOUR + 7, 10 * HOUR)
        assert joined == [pair(("order 7", 7), ("s",))]
    assert dump_packed(("k1", 1)) == dump(("k1", 1))
    with pytest.raises(StateFormatError, match="does not unpack"):
        load(packed[: len(packed) // 2])


class LateRows(Counter):
    def add(self, counts: dict) -> None:
        self.update(counts)


def test_the_processor_counts_rows_behind_the_watermark_by_side_and_still_processes_them() -> None:
    spec = IntervalJoinSpec(
        "left",
        "L.id = R.id AND R.t BETWEEN L.t - INTERVAL '1' SECOND AND L.t",
        SideSpec(("id", "t")),
        SideSpec(("id", "t")),
        "t",
        "t",
    )
    late = LateRows()
    kinds = {"L_t": "integral", "R_t": "integral"}
    # In the service, Spark's late-row filter has no watermarked column to act on (the join
    # sees the event time as a plain number); the tester's filter is kept out the same way.
    tester = TwsTester(
        join_frame(spec, kinds, late),
        timeMode="EventTime",
        eventTimeExtractor=lambda _row: MAX_TIME,
    )
    tester.setWatermark(10_000)
    rows = [(1, 1, "a", 4_500), (0, 2, "a", 5_000), (0, 3, "b", 20_000)]  # side, seq, id, t
    frame = pd.DataFrame(
        [
            {
                "side": side,
                "op": "+I",
                "seq": seq,
                "ts": t,
                "k0": key,
                "L_id": key if side == 0 else None,
                "L_t": t if side == 0 else None,
                "R_id": key if side == 1 else None,
                "R_t": t if side == 1 else None,
            }
            for side, seq, key, t in rows
        ]
    )
    out = tester.testInPandas(0, frame)
    assert late == {("left",): 1, ("right",): 1}  # b at 20 s is not late
    # the late shipment is not cached (no order can still meet it), the late order finds
    # nothing and, as in Flink, is padded at once instead of waiting for a timer
    columns = ["L_id", "L_t", "R_id", "R_t"]
    assert list(zip(*(out[c] for c in columns), strict=True)) == [("a", 5_000, None, None)]
