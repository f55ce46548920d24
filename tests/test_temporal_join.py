"""Flink's temporal table joins, in plain Python (no Spark), on the seed's examples."""

from __future__ import annotations

import random

from state.joins.normalize import normalize
from state.joins.temporal_join import (
    EventTimeTemporalJoin,
    KeysInMemory,
    ProcessingTimeTemporalJoin,
    VersionedBucket,
)

HOUR, MINUTE = 3_600_000, 60_000


def triples(changes: list) -> list[tuple]:
    """Output changes as (kind, probe row, version row)."""
    return [(c.kind, c.left, c.right) for c in changes]


def at(hour: int, minute: int = 0) -> int:
    return hour * HOUR + minute * MINUTE


def matches(left, right) -> bool:
    return True


def test_processing_time_joins_the_latest_rate_known_when_the_order_comes() -> None:
    """The seed's LatestRates: the Euro moves from 114 to 116 at 10:52."""
    join, latest = ProcessingTimeTemporalJoin("inner", matches), KeysInMemory()
    join.version(latest, "Euro", "+I", ("Euro", 114))
    join.version(latest, "US Dollar", "+I", ("US Dollar", 102))
    yen = []
    for amount, currency, new_euro_rate in (
        (2, "Euro", None),
        (1, "US Dollar", None),
        (2, "Euro", 116),
    ):
        if new_euro_rate:  # 10:52: the rate changes, then the order comes
            join.version(latest, "Euro", "-U", ("Euro", 114))
            join.version(latest, "Euro", "+U", ("Euro", new_euro_rate))
        [(_op, _order, rate)] = triples(join.probe(latest, currency, (amount, currency)))
        yen.append(amount * rate[1])
    assert yen == [228, 102, 232]
    join.version(latest, "Euro", "-D", ("Euro", 116))
    assert triples(join.probe(latest, "Euro", (1, "Euro"))) == []
    assert triples(
        ProcessingTimeTemporalJoin("left", matches).probe(latest, "Euro", (1, "Euro"))
    ) == [("+I", (1, "Euro"), None)]


RATES_HISTORY = [  # the seed's RatesHistory: an append-only history, primary key currency
    (at(9), "US Dollar", 102),
    (at(9), "Euro", 114),
    (at(9), "Yen", 1),
    (at(10, 45), "Euro", 116),
    (at(11, 15), "Euro", 119),
    (at(11, 49), "Pounds", 108),
]
ORDERS = [
    (at(10, 15), 2, "Euro"),
    (at(10, 30), 1, "US Dollar"),
    (at(10, 32), 50, "Yen"),
    (at(10, 52), 3, "Euro"),
    (at(11, 4), 5, "US Dollar"),
]


def test_a_temporal_table_function_joins_the_rate_valid_at_the_orders_time() -> None:
    join, bucket = EventTimeTemporalJoin("inner", matches), VersionedBucket()
    for seq, (time, amount, currency) in enumerate(ORDERS):
        join.probe(bucket, currency, seq, time, (amount, currency))
    for time, currency, rate in RATES_HISTORY:  # rates arriving after the orders: no matter
        join.version(bucket, currency, "+I", time, (currency, rate))
    assert triples(join.fire_due(bucket, at(10))) == []  # no order is due before 10:15
    out = triples(join.fire_due(bucket, at(12)))
    yen = sorted(order[0] * rate[1] for _op, order, rate in out)
    assert yen == sorted([228, 102, 50, 348, 510])
    # each currency keeps only the last version at or before the watermark
    assert {k: len(s.versions) for k, s in bucket.keys.items()} == {
        "US Dollar": 1,
        "Euro": 1,
        "Yen": 1,
        "Pounds": 1,
    }


def test_a_deleted_version_means_no_match_and_results_wait_for_the_watermark() -> None:
    inner, left = EventTimeTemporalJoin("inner", matches), EventTimeTemporalJoin("left", matches)
    for join in (inner, left):
        bucket = VersionedBucket()
        join.version(bucket, "p1", "+I", at(0, 1), ("p1", "scooter"))
        join.version(bucket, "p1", "-D", at(18), ("p1", "scooter"))
        join.probe(bucket, "p1", 0, at(12), ("o3",))
        join.probe(bucket, "p1", 1, at(18), ("o5",))
        assert triples(join.fire_due(bucket, at(17))) == [("+I", ("o3",), ("p1", "scooter"))]
        expected = [] if join is inner else [("+I", ("o5",), None)]
        assert triples(join.fire_due(bucket, at(18))) == expected
        assert bucket.waiting == {}


def test_versions_of_a_slowly_changing_table_stay_bounded() -> None:
    join, bucket = EventTimeTemporalJoin("left", matches), VersionedBucket()
    sizes = []
    for minute in range(0, 20 * 60):
        now = at(0, minute)
        if minute % 10 == 0:
            join.version(bucket, f"p{minute % 3}", "+U", now, (minute,))
        join.probe(bucket, f"p{minute % 3}", minute, now, (minute,))
        join.fire_due(bucket, now - MINUTE)
        versions = sum(len(s.versions) for s in bucket.keys.values())
        sizes.append(versions + sum(len(rows) for rows in bucket.waiting.values()))
    assert max(sizes[600:]) <= max(sizes[:60]) + 1 and max(sizes) <= 10


def test_an_update_before_does_not_end_a_version() -> None:
    """Flink's `testEventTimeTemporalJoinChangelogUsingBeforeTime`: the table's time is a column,
    so the `-U` of an update carries the old row's time; the old version stays valid until the
    `+U` and an order between the two joins it."""
    join, bucket = EventTimeTemporalJoin("inner", matches), VersionedBucket()
    join.version(bucket, "Euro", "+I", at(0, 0) + 1000, ("Euro", 114))
    join.version(bucket, "Euro", "-U", at(0, 0) + 1000, ("Euro", 114))
    join.version(bucket, "Euro", "+U", at(24, 1), ("Euro", 118))
    join.probe(bucket, "Euro", 0, at(0, 1), ("o1",))
    join.probe(bucket, "Euro", 1, at(24, 4), ("o4",))
    assert triples(join.fire_due(bucket, at(48))) == [
        ("+I", ("o1",), ("Euro", 114)),
        ("+I", ("o4",), ("Euro", 118)),
    ]


def test_a_changelog_probe_joins_each_change_as_of_its_time_with_its_kind() -> None:
    """Flink's `TemporalRowTimeJoinOperator` sets the output's kind to the probe row's."""
    join, bucket = EventTimeTemporalJoin("left", matches), VersionedBucket()
    join.version(bucket, "USD", "+I", at(0), ("USD", 102))
    join.version(bucket, "USD", "+U", at(24), ("USD", 106))
    join.probe(bucket, "USD", 0, at(0, 2), ("o2", 1), "+I")
    join.probe(bucket, "USD", 1, at(24, 3), ("o2", 1), "-U")
    join.probe(bucket, "USD", 2, at(24, 3), ("o2", 18), "+U")
    join.probe(bucket, "EUR", 3, at(24, 4), ("o6",), "+I")
    join.probe(bucket, "EUR", 4, at(24, 4), ("o6",), "-D")
    assert triples(join.fire_due(bucket, at(48))) == [
        ("+I", ("o2", 1), ("USD", 102)),
        ("-U", ("o2", 1), ("USD", 106)),
        ("+U", ("o2", 18), ("USD", 106)),
        ("+I", ("o6",), None),
        ("-D", ("o6",), None),
    ]


def test_a_versioned_table_joins_as_it_does_behind_a_changelog_normalizer() -> None:
    """Upsert records (tombstones without a time) and Debezium ones (deletes with the old row's
    time, updates as -U/+U) feed the versioned table as they come: every order joins what it
    joins when Flink's `ChangelogNormalize` rebuilds the changelog first."""
    rng = random.Random(7)
    for _case in range(300):
        plain, behind = (
            EventTimeTemporalJoin("left", matches),
            EventTimeTemporalJoin("left", matches, normalized=True),
        )
        plain_bucket, behind_bucket, last = VersionedBucket(), VersionedBucket(), None
        out_plain, out_behind = [], []
        for step in range(40):
            time = rng.randrange(0, 30) * MINUTE
            row = ("p1", rng.randrange(3), time)
            roll = rng.random()
            if roll < 0.45:
                inputs = [("+U" if last else "+I", step, time, row)]
            elif roll < 0.6:
                inputs = [
                    ("-U", step, last[1] if last else time, last[0] if last else row),
                    ("+U", step, time, row),
                ]
            elif roll < 0.75:
                inputs = [("-D", step, None, ("p1", None, None))]  # an upsert tombstone
            elif roll < 0.85:
                inputs = [("-D", step, time, row)]  # a Debezium delete: its old row's time
            else:
                inputs = []
                for join, bucket in ((plain, plain_bucket), (behind, behind_bucket)):
                    join.probe(bucket, "p1", step, time, ("o", step))
            for op, _seq, ts, version in inputs:
                plain.version(plain_bucket, "p1", op, ts, version)
            emitted, last = normalize(last, inputs)
            for change in emitted:
                behind.version(behind_bucket, "p1", change.kind, change.ts, change.left)
            if step % 5 == 4:
                watermark = (step // 5) * 4 * MINUTE
                out_plain += triples(plain.fire_due(plain_bucket, watermark))
                out_behind += triples(behind.fire_due(behind_bucket, watermark))
        out_plain += triples(plain.fire_due(plain_bucket, 10**9))
        out_behind += triples(behind.fire_due(behind_bucket, 10**9))
        assert out_plain == out_behind
