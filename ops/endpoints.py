"""The service's HTTP endpoints, on METRICS_PORT: `/metrics`, `/healthz` and `/readyz`.

`/readyz` answers 200 only while the query is active, has no exception and made progress
recently (waiting for data is progress; a micro-batch running longer than READINESS_TIMEOUT is
not). `/healthz`, Kubernetes' liveness, answers the same except while the query starts (a
start-up probe waits for that): a query that died or stalls answers 503 with the reason, and
only a failing liveness probe makes Kubernetes restart the pod, which resumes from the
checkpoint. A failing readiness probe alone restarts nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


NOT_STARTED = "the query has not started"


class Readiness:
    """Whether the query is fit to serve: set by the driver's poll loop, read by `/readyz` and
    (but for its start) by `/healthz`."""

    def __init__(self, stall_timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_timeout_s = stall_timeout_s
        self.clock = clock
        self._problem: str | None = NOT_STARTED
        self._last_progress = clock()

    def started(self) -> None:
        self._problem = None
        self._last_progress = self.clock()

    def progressed(self) -> None:
        self._last_progress = self.clock()

    def failed(self, reason: str) -> None:
        self._problem = reason

    def problem(self) -> str | None:
        """Why the service is not ready, or None."""
        if self._problem is not None:
            return self._problem
        stalled = self.clock() - self._last_progress
        if stalled > self.stall_timeout_s:
            return f"no progress for {stalled:.0f}s (READINESS_TIMEOUT {self.stall_timeout_s:.0f}s)"
        return None

    def dead(self) -> str | None:
        """Why the service should be restarted (the query died or stalls), or None; a query
        still starting is not dead."""
        problem = self.problem()
        return None if problem == NOT_STARTED else problem


def serve(registry: CollectorRegistry, readiness: Readiness, port: int) -> int:
    """Serve the endpoints in a daemon thread; return the port (a free one when `port` is 0)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                dead = readiness.dead()
                if dead is None:
                    self._answer(200, b"ok\n")
                else:
                    self._answer(503, f"not alive: {dead}\n".encode())
            elif path == "/readyz":
                problem = readiness.problem()
                if problem is None:
                    self._answer(200, b"ready\n")
                else:
                    self._answer(503, f"not ready: {problem}\n".encode())
            else:
                self._answer(404, b"not found\n")

        def _answer(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds are not worth a log line each."""

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="endpoints", daemon=True).start()
    bound = server.server_address[1]
    log.info("metrics served at http://0.0.0.0:%d/metrics (and /healthz, /readyz)", bound)
    return bound
