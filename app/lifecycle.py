"""Running a streaming query until it ends or is asked to stop, and stopping it gracefully.

Kubernetes sends SIGTERM before it kills a pod. Stopping the query while a micro-batch is
running would abandon that batch (it is re-run after restart, so nothing is lost, but its work
is wasted and its output written twice), so the stop waits for the running batch to finish.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

POLL_S = 0.5


def install_stop_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("%s received: stopping after the running batch", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def stop_between_batches(query: StreamingQuery, grace_s: float) -> None:
    """Stop `query` once no trigger is running, or after `grace_s` seconds regardless."""
    deadline = time.monotonic() + grace_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def supervise(
    query: StreamingQuery,
    stop: threading.Event,
    on_poll: Callable[[], None] = lambda: None,
    grace_s: float = 300.0,
) -> int:
    """Wait for the query to end or for `stop`, calling `on_poll` as it runs; return the exit
    code."""
    while query.isActive and not stop.is_set():
        query.awaitTermination(POLL_S)
        on_poll()
    if stop.is_set() and query.isActive:
        stop_between_batches(query, grace_s)
    failure = query.exception()
    if failure is not None:
        log.error("query failed: %s", str(failure).splitlines()[0])
        return 1
    log.info("query stopped")
    return 0
