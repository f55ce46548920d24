"""A bench run drawn beside its figures: output rows over time per system, micro-batch
durations, state rows; so a run can be seen (a stall, a batch that grows with the state), not
only read as one rate.

`BENCH_PLOTS` names the folder the PNG goes to (default: the current one); each script prints
the file it wrote.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from prometheus_client.parser import text_string_to_metric_families

from app.run.lifecycle import POLL_S


@dataclass
class Timeline:
    """One system's run, a point per micro-batch: when it ended (seconds from the run's start),
    the output rows so far, how long it took, and the rows its state held after it (Spark's
    count of state store rows for a query in the bench's session, `streamjoin_state_rows` for
    a service)."""

    seconds: list[float] = field(default_factory=list)
    output_rows: list[int] = field(default_factory=list)
    batch_seconds: list[float] = field(default_factory=list)
    state_rows: list[int] = field(default_factory=list)

    def add(self, seconds: float, output_rows: int, batch_seconds: float, state_rows: int) -> None:
        self.seconds.append(seconds)
        self.output_rows.append(output_rows)
        self.batch_seconds.append(batch_seconds)
        self.state_rows.append(state_rows)


def from_progress(progress: list[Any], output_rows: dict[int, int], start: float) -> Timeline:
    """A query's timeline from its progress reports (`StreamingQuery.recentProgress`) and the
    output rows of each batch (by batch id); `start`: the run's start, epoch seconds."""
    timeline = Timeline()
    total = 0
    for report in sorted(progress, key=lambda p: p.batchId):
        duration = report.durationMs.get("triggerExecution", 0) / 1000
        began = datetime.fromisoformat(report.timestamp.replace("Z", "+00:00")).timestamp()
        total += output_rows.get(report.batchId, 0)
        state = sum(op.numRowsTotal for op in report.stateOperators)
        timeline.add(began + duration - start, total, duration, state)
    return timeline


def _totals(page: str) -> dict[str, float]:
    """A /metrics page's series summed over their labels, by sample name."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


class ServiceTimeline:
    """A running `streamjoin run` seen through its own /metrics (`endpoint`: where they are
    served, None until they are), a point per micro-batch it reports: changes emitted so far,
    the batch's duration, the rows its state holds (`streamjoin_state_rows`). A service that
    forwards without a join counts no changes: `output` names the series its output is."""

    def __init__(
        self, endpoint: Callable[[], str | None], output: str = "streamjoin_changes_total"
    ) -> None:
        self.endpoint, self.output = endpoint, output
        self.timeline = Timeline()
        self.batches, self.batch_seconds = 0.0, 0.0

    def sample(self, seconds: float) -> None:
        """One scrape, `seconds` from the run's start; a point if batches ended since the last."""
        served = self.endpoint()
        if served is None:
            return
        try:
            with urllib.request.urlopen(f"{served}/metrics", timeout=5) as answer:
                totals = _totals(answer.read().decode())
        except OSError:  # not serving yet, or gone
            return
        batches = totals.get("streamjoin_batch_duration_seconds_count", 0.0)
        spent = totals.get("streamjoin_batch_duration_seconds_sum", 0.0)
        if batches <= self.batches:
            return
        mean = (spent - self.batch_seconds) / (batches - self.batches)
        self.batches, self.batch_seconds = batches, spent
        # a stopping service may no longer report its state: its last figure stands
        held = self.timeline.state_rows[-1] if self.timeline.state_rows else 0
        self.timeline.add(
            seconds,
            int(totals.get(self.output, 0)),
            mean,
            int(totals.get("streamjoin_state_rows", held)),
        )

    def follow(self, done: threading.Event, every_s: float = 0.5) -> None:
        """Sample until `done`, then once more after the service's own poll (it reports a
        batch up to half a second after its output is committed)."""
        start = time.monotonic()
        while not done.wait(every_s):
            self.sample(time.monotonic() - start)
        time.sleep(POLL_S + every_s)
        self.sample(time.monotonic() - start)


@contextmanager
def followed(
    endpoint: Callable[[], str | None], output: str = "streamjoin_changes_total"
) -> Iterator[ServiceTimeline]:
    """A service's timeline, sampled in a thread of its own while the block runs."""
    watched, done = ServiceTimeline(endpoint, output), threading.Event()
    thread = threading.Thread(target=watched.follow, args=(done,), daemon=True)
    thread.start()
    try:
        yield watched
    finally:
        done.set()
        thread.join()


def draw(path: Path, title: str, runs: dict[str, Timeline]) -> Path:
    """The runs on three panels sharing the time axis; written to `path`."""
    figure, (output, batches, state) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    figure.suptitle(title)
    for name, run in runs.items():
        output.step(run.seconds, run.output_rows, where="post", label=name)
        batches.plot(run.seconds, run.batch_seconds, marker="o", markersize=3, label=name)
        state.step(run.seconds, run.state_rows, where="post", label=name)
    output.set_ylabel("output rows")
    batches.set_ylabel("micro-batch (s)")
    state.set_ylabel("state rows")
    state.set_xlabel("seconds from start")
    for axes in (output, batches, state):
        axes.grid(alpha=0.3)
    output.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def plot_path(script: str) -> Path:
    """Where a script's plot goes: `BENCH_PLOTS` (or here), named by script and time."""
    folder = Path(os.environ.get("BENCH_PLOTS", "."))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}.png"
