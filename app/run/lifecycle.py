"""Running a streaming query until it ends or is asked to stop, and stopping it gracefully.

Kubernetes sends SIGTERM before it kills a pod. Stopping the query while a micro-batch with
input is running would abandon that batch (it is re-run after restart, so nothing is lost, but
its output would be written twice). So the stop first drains: a marker file tells the Kafka
sources to offer no more records and to hold the next trigger (`serdes.kafka.drain`), then the
query is stopped once the batch that was running has completed, before another is planned.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from serdes.kafka.drain import holding, release

log = logging.getLogger(__name__)

POLL_S = 0.5
# How long after a query's stop began the sources holding its trigger are released: the stop
# interrupts the query's thread first, which ends its wait for the source's answer at once (Spark
# reads it through an interruptible channel), so it leaves the trigger with no batch planned;
# released, the source's process stops holding for nothing
RELEASE_AFTER_S = 0.1


def install_stop_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("%s received: stopping after the running batch", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def _at_rest(query: StreamingQuery, drain_marker: Path) -> bool:
    """No batch runs, nor can start: no trigger is active, or a drained source holds it before
    anything of its batch was planned (`serdes.kafka.drain`)."""
    return not query.status["isTriggerActive"] or holding(drain_marker)


def stop_draining(
    query: StreamingQuery,
    drain_marker: Path,
    grace_s: float,
    on_stop: Callable[[], None] = lambda: None,
) -> None:
    """Drain the sources, then stop `query` between two batches, calling `on_stop` just before;
    after `grace_s` seconds, stop regardless.

    Between two batches: a batch the stop interrupts stays planned in the checkpoint, and is
    run again at the next start. That costs nothing, unless the next start repartitions the
    state, which must run it first (`app.run.rescale`). The sources are released once the stop
    has begun (it interrupts the query's thread, which then leaves the trigger it held)."""
    drain_marker.touch()
    deadline = time.monotonic() + grace_s
    while query.isActive and not _at_rest(query, drain_marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    on_stop()
    releasing = threading.Timer(RELEASE_AFTER_S, release, (drain_marker,))
    releasing.start()
    try:
        query.stop()
    finally:
        releasing.cancel()
        release(drain_marker)


def ran_dry(query: StreamingQuery, first_planned: int) -> bool:
    """Whether the last batch was planned by this run, from batch `first_planned` on, with no
    new offsets: its sources had nothing left.

    A batch before it was planned by an earlier run and is only run again: the one a drained
    stop left planned read nothing, since its sources were already drained, while records
    may have come since. Counting it stopped a restart while it planned its first batch of
    its own, some inputs read and others not."""
    progress = query.lastProgress
    return (
        bool(progress)
        and progress["batchId"] >= first_planned
        and all(source["startOffset"] == source["endOffset"] for source in progress["sources"])
    )


def supervise(
    query: StreamingQuery,
    stop: threading.Event,
    drain_marker: Path,
    on_poll: Callable[[], None] = lambda: None,
    grace_s: float = 300.0,
    on_stop: Callable[[], None] = lambda: None,
    until_dry_from: int | None = None,
) -> int:
    """Wait for the query to end or for `stop`, calling `on_poll` as it runs, `on_stop` once it
    is drained, just before stopping it, and `on_poll` once more for what the last batch left;
    return the exit code.

    `until_dry_from` (available-now on the wall clock, see `app.run.pipeline.start`): stop
    once a batch from this one on had nothing new to read (`ran_dry`). Spark's available-now
    ends by itself only if no operator runs on the wall clock: under a state TTL or a
    processing-time join it plans a batch at every trigger, for ever (each reads nothing,
    planned to let timers fire), and the service never stopped."""
    while query.isActive and not stop.is_set():
        query.awaitTermination(POLL_S)
        on_poll()
        if until_dry_from is not None and ran_dry(query, until_dry_from):
            stop.set()
    if stop.is_set() and query.isActive:
        stop_draining(query, drain_marker, grace_s, on_stop)
    on_poll()
    failure = query.exception()
    if failure is not None:
        log.error("query failed: %s", str(failure).splitlines()[0])
        return 1
    log.info("query stopped")
    return 0


def stop_session(spark: SparkSession, exit_code: int, timeout_s: float = 30.0) -> int:
    """Stop Spark, but never let a hanging shutdown keep the process alive.

    Everything the query committed is in the checkpoint by now; a SparkContext that does not
    stop in time (seen rarely at shutdown) must not turn a clean stop into a killed pod.
    """
    stopper = threading.Thread(target=spark.stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(timeout_s)
    if stopper.is_alive():
        log.warning("Spark did not stop within %.0fs; exiting anyway", timeout_s)
        logging.shutdown()
        os._exit(exit_code)
    return exit_code
