"""A quarter of a million rows per side, one key with a tenth of them, through the service: it
completes, every order comes out, and memory stays bounded (see `tests/skewed_load.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka_io import create_topics, output_topics, unique
from tests.skewed_load import KINDS, run_load

pytestmark = pytest.mark.spark

ROWS_PER_SIDE = 250_000
# Measured ~4 GiB in all at a million rows per side (JVM ~1.7, Python workers ~2.4): the bound
# leaves room.
PEAK_RSS_BOUND = 8 * 2**30


def test_a_quarter_million_skewed_rows_per_side_complete_with_bounded_memory(
    kafka: str, tmp_path: Path
) -> None:
    orders, shipments, out = unique("orders"), unique("shipments"), unique("shipped")
    create_topics(kafka, [orders, shipments], partitions=4)
    output_topics(kafka, out, partitions=4)
    result = run_load(kafka, tmp_path, orders, shipments, out, ROWS_PER_SIDE, 100_000)
    assert result.exit_code == 0, result.log[-3000:]
    peaks = (f"{kind} {result.peak_rss.get(kind, 0) / 2**20:,.0f} MiB" for kind in KINDS)
    print(f"{2 * ROWS_PER_SIDE:,} rows in {result.seconds:.0f}s; peak RSS {', '.join(peaks)}")
    assert result.orders_out == ROWS_PER_SIDE  # a LEFT join: every order, joined or padded
    assert result.rows_out >= ROWS_PER_SIDE
    assert 0 < result.peak_rss["all"] < PEAK_RSS_BOUND
