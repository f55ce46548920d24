"""A skewed load through `streamjoin run`: memory stays bounded, peak RSS is reported.

Usage: python bench/load.py [ROWS_PER_SIDE] [RECORDS_PER_TRIGGER]   (KAFKA_BOOTSTRAP_SERVERS or
embedded Tansu). The load is described in `tests/skewed_load.py`; the test suite runs it too.
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import numbers, service_topics
from bench.plot import ServiceTimeline, draw, plot_path
from tests.service import Service
from tests.skewed_load import HOT_SHARE, KINDS, run_load


def main() -> None:
    per_side, per_trigger = numbers(1_000_000, 100_000)
    watched: list[ServiceTimeline] = []

    def follow(service: Service, done: threading.Event) -> None:
        """The service's timeline until it is done."""
        watched.append(ServiceTimeline(service.endpoint))
        watched[0].follow(done)

    with ExitStack() as stack:
        result = run_load(*service_topics(stack), per_side, per_trigger, follow)
    assert result.exit_code == 0, result.log[-3000:]
    print(
        f"joined {2 * per_side:,} rows ({per_side * HOT_SHARE:,.0f} per side on one key) in "
        f"{result.seconds:.0f}s, start-up included: {2 * per_side / result.seconds:,.0f} rows/s;"
        f" {result.rows_out:,} output rows, {result.orders_out:,} distinct orders"
    )
    for kind in KINDS:
        print(f"  peak RSS {kind:16s} {result.peak_rss.get(kind, 0) / 2**20:8,.0f} MiB")
    title = f"skewed interval join through Kafka, {per_side:,} rows per side"
    print(f"plot: {draw(plot_path('load'), title, {'streamjoin run': watched[0].timeline})}")


if __name__ == "__main__":
    main()
