"""The value each key bucket is grouped by: ids that Spark's hash partitioning spreads evenly.

Every stateful operator groups its rows by a bucket of their keys (`state.spark.frame`), and
Spark places a group in state partition `pmod(murmur3(value, 42), partitions)`. Grouped by the
bucket's index itself (0, 1, …), the buckets fall unevenly: 32 buckets on 2 partitions split
12 and 20, 64 on 4 partitions 14, 14, 15 and 21. A micro-batch's stateful stage lasts as long
as its busiest task, so the busiest partition's share, not the average, sets its time.

So bucket `b` is grouped by the smallest id (from 0 up, none taken twice) whose Spark hash is
`b` modulo the buckets: every number of partitions that divides the buckets then holds the same
number of buckets, at the first start and after a rescale to another divisor
(`app.run.rescale`). A checkpoint made before keeps grouping by the index
(`app.run.checkpoint.spreads_buckets`).
"""

from __future__ import annotations

from functools import cache

_MASK = 0xFFFFFFFF
SEED = 42  # Spark's `HashPartitioning` and `hash()` seed


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix(h1: int, word: int) -> int:
    k1 = _rotl((word * 0xCC9E2D51) & _MASK, 15) * 0x1B873593 & _MASK
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def spark_hash_long(value: int) -> int:
    """Spark's `Murmur3_x86_32.hashLong(value, 42)`: `hash()` of a BIGINT, signed."""
    value &= (1 << 64) - 1
    h = _mix(_mix(SEED, value & _MASK), value >> 32) ^ 8
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & _MASK
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h >> 31 else h


@cache
def spread_ids(buckets: int) -> tuple[int, ...]:
    """The id of each of `buckets` buckets: `spark_hash_long(ids[b]) % buckets == b`."""
    ids: list[int | None] = [None] * buckets
    missing, candidate = buckets, 0
    while missing:
        bucket = spark_hash_long(candidate) % buckets  # Python's %: Spark's pmod
        if ids[bucket] is None:
            ids[bucket] = candidate
            missing -= 1
        candidate += 1
    return tuple(i for i in ids if i is not None)
