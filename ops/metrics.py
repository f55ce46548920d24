"""Prometheus metrics of the service, served at `/metrics` on METRICS_PORT.

Counts that arise inside Spark tasks (on executors, in Python workers) reach the driver as
Spark accumulators; the driver adds each accumulator's growth to its Prometheus counter
whenever it polls the query.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, start_http_server
from pyspark import Accumulator, AccumulatorParam, SparkContext

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


class CountsByLabel(AccumulatorParam):
    """Accumulates `{label tuple: count}` dictionaries."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, first: dict, second: dict) -> dict:
        for label, count in second.items():
            first[label] = first.get(label, 0) + count
        return first


class LabelledAccumulatedCounter:
    """A labelled Prometheus counter fed by a Spark accumulator of `{labels: count}`."""

    def __init__(self, counter: Counter, context: SparkContext) -> None:
        self.counter = counter
        self.accumulator: Accumulator[dict] = context.accumulator({}, CountsByLabel())
        self._seen: dict[tuple[str, ...], int] = {}

    def update(self) -> None:
        for labels, value in dict(self.accumulator.value).items():
            grown = value - self._seen.get(labels, 0)
            if grown > 0:
                self.counter.labels(*labels).inc(grown)
            self._seen[labels] = value


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
        self.dead_letters = LabelledAccumulatedCounter(
            Counter(
                "streamjoin_dead_letters",
                "Input records that could not be decoded, sent to the dead-letter topic",
                ["input", "reason"],
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
        self.dead_letters.update()
