"""Prometheus metrics of the service, served at `/metrics` on METRICS_PORT.

Counts that arise inside Spark tasks (on executors, in Python workers) reach the driver as
Spark accumulators; the driver adds each accumulator's growth to its Prometheus counter
whenever it polls the query.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, start_http_server
from pyspark import Accumulator, SparkContext

log = logging.getLogger(__name__)


class AccumulatedCounter:
    """A Prometheus counter fed by a Spark accumulator that tasks add to."""

    def __init__(self, counter: Counter, context: SparkContext) -> None:
        self.counter = counter
        self.accumulator: Accumulator[int] = context.accumulator(0)
        self._seen = 0

    def update(self) -> None:
        value = self.accumulator.value
        if value > self._seen:
            self.counter.inc(value - self._seen)
        self._seen = value


class ServiceMetrics:
    def __init__(self, context: SparkContext) -> None:
        self.registry = CollectorRegistry()
        self.expired_rows = AccumulatedCounter(
            Counter(
                "streamjoin_state_expired_rows",
                "Join state rows dropped by idle state retention (STATE_TTL)",
                registry=self.registry,
            ),
            context,
        )

    def serve(self, port: int) -> int:
        """Serve `/metrics`; return the port (a free one when `port` is 0)."""
        server, _thread = start_http_server(port, registry=self.registry)
        bound = server.server_address[1]
        log.info("metrics served at http://0.0.0.0:%d/metrics", bound)
        return bound

    def update(self) -> None:
        self.expired_rows.update()
