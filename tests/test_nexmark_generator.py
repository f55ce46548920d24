"""The Nexmark generator of the bench (`bench/nexmark_generator.py`): the rules its events keep."""

from __future__ import annotations

from collections import Counter

from bench.nexmark_generator import NexmarkConfig, NexmarkGenerator

EVENTS = 5_000


def generated() -> list[dict]:
    return list(NexmarkGenerator(NexmarkConfig(), base_ms=0, seed=3).events(EVENTS))


def test_people_auctions_and_bids_come_1_3_46_with_ids_counting_up() -> None:
    events = generated()
    assert Counter(e["event_type"] for e in events) == {0: 100, 1: 300, 2: 4600}
    people = [e["person"]["id"] for e in events if e["person"]]
    auctions = [e["auction"]["id"] for e in events if e["auction"]]
    assert people == list(range(1000, 1100)) and auctions == list(range(1000, 1300))
    kinds = [e["event_type"] for e in events[:50]]
    assert kinds == [0, 1, 1, 1] + [2] * 46  # every block of 50 alike


def test_hot_sellers_auctions_and_bidders_are_the_latest_ids_rounded_to_a_hundred() -> None:
    events = generated()
    sellers = [e["auction"]["seller"] for e in events if e["auction"]]
    bids = [e["bid"] for e in events if e["bid"]]
    hot_sellers = sum(s % 100 == 0 for s in sellers) / len(sellers)
    hot_auctions = sum(b["auction"] % 100 == 0 for b in bids) / len(bids)
    hot_bidders = sum(b["bidder"] % 100 == 1 for b in bids) / len(bids)
    assert 0.7 < hot_sellers < 0.85 and 0.45 < hot_auctions < 0.6 and 0.7 < hot_bidders < 0.85
    assert all(1000 <= b["auction"] < 1310 for b in bids)  # in flight, a few ids ahead at most


def test_event_times_follow_the_rate_from_the_base_time_and_rows_keep_their_sizes() -> None:
    events = generated()
    times = [(e["person"] or e["auction"] or e["bid"])["dateTime"] for e in events]
    assert times[0] == "1970-01-01 00:00:00.000" and times[-1] == "1970-01-01 00:00:00.499"
    assert times == sorted(times)
    bids = [e["bid"] for e in events if e["bid"]]
    average = sum(len(b["extra"]) for b in bids) / len(bids)
    assert 60 < average < 76  # 100 bytes a bid, its fixed fields' 32 aside
    assert all(10 <= a["auction"]["category"] <= 14 for a in events if a["auction"])
