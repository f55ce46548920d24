"""The bench scripts' plots: a query's progress or a service's /metrics become one point per
micro-batch, drawn to a PNG."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from bench.plot import ServiceTimeline, Timeline, draw, from_progress


def progress(batch: int, timestamp: str, millis: int, state_rows: list[int]) -> SimpleNamespace:
    operators = [SimpleNamespace(numRowsTotal=n) for n in state_rows]
    durations = {"triggerExecution": millis}
    return SimpleNamespace(
        batchId=batch, timestamp=timestamp, durationMs=durations, stateOperators=operators
    )


def test_a_querys_progress_is_a_point_per_batch_with_its_output_so_far() -> None:
    start = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    reports = [
        progress(1, "2023-11-14T22:13:23.000Z", 500, [10, 5]),
        progress(0, "2023-11-14T22:13:21.500Z", 1000, [4]),
    ]
    timeline = from_progress(reports, {0: 7, 1: 3}, start)
    assert timeline.seconds == [2.5, 3.5]
    assert timeline.output_rows == [7, 10]
    assert timeline.batch_seconds == [1.0, 0.5]
    assert timeline.state_rows == [4, 15]


class _Metrics(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(type(self).page)

    def log_message(self, *_args: object) -> None:
        """Silent."""


def test_a_services_metrics_are_a_point_per_batches_reported() -> None:
    registry = CollectorRegistry()
    batches = Histogram("streamjoin_batch_duration_seconds", "", registry=registry)
    changes = Counter("streamjoin_changes", "", ["kind"], registry=registry)
    held = Gauge("streamjoin_state_rows", "", ["operator", "side"], registry=registry)
    server = HTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sampler = ServiceTimeline(lambda: f"http://127.0.0.1:{server.server_port}")
    try:
        for durations, inserts, rows, at in (
            ([2.0], 5, 3, 1.0),
            ([], 0, 3, 1.5),
            ([1.0, 3.0], 4, 9, 2.0),
        ):
            for seconds in durations:
                batches.observe(seconds)
            changes.labels("+I").inc(inserts)
            held.labels("join", "left").set(rows)
            held.labels("join", "right").set(1)
            _Metrics.page = generate_latest(registry)
            sampler.sample(at)
    finally:
        server.shutdown()
    assert sampler.timeline.seconds == [1.0, 2.0]  # no batch ended by 1.5
    assert sampler.timeline.output_rows == [5, 9]
    assert sampler.timeline.batch_seconds == [2.0, 2.0]  # the mean of the two since
    assert sampler.timeline.state_rows == [4, 10]


def test_runs_are_drawn_to_a_png(tmp_path: Path) -> None:
    run = Timeline()
    run.add(1.0, 10, 1.0, 5)
    run.add(2.0, 30, 0.5, 8)
    written = draw(tmp_path / "run.png", "a run", {"streamjoin": run, "native": Timeline()})
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
