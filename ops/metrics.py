"""Prometheus metrics of the service, served at `/metrics` on METRICS_PORT.

Counts that arise inside Spark tasks (on executors, in Python workers) reach the driver as
Spark accumulators; the driver adds each accumulator's growth to its Prometheus counter
whenever it polls the query and whenever `/metrics` is read, and folds in the query's new
progress reports when it polls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from pyspark import Accumulator, AccumulatorParam, SparkContext
from pyspark.sql.streaming import StreamingQuery

from ops.endpoints import Readiness, serve
from ops.progress import ProgressMetrics


class CountsByLabel(AccumulatorParam):
    """Accumulates `{label tuple: count}` dictionaries."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, first: dict, second: dict) -> dict:
        for label, count in second.items():
            first[label] = first.get(label, 0) + count
        return first


class RefreshedRegistry(CollectorRegistry):
    """A registry that brings the accumulated counts up to date before each read, so a scrape
    shows every count a finished task reported, not those of the driver's last poll (a count
    would otherwise lag a histogram read from its accumulator directly)."""

    def __init__(self) -> None:
        super().__init__()
        self.refresh: Callable[[], None] = lambda: None

    def collect(self) -> Iterator[Metric]:
        self.refresh()
        yield from super().collect()


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


class LargestByLabel(AccumulatorParam):
    """Accumulates `{label tuple: number}` dictionaries, keeping each label's largest."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, first: dict, second: dict) -> dict:
        for label, number in second.items():
            if label not in first or first[label] < number:
                first[label] = number
        return first


class LargestEventTimes:
    """`streamjoin_event_time_max_seconds{side}`: the largest event time each input has
    shown, fed by the accumulator its reading tasks add `{(side,): epoch ms}` to
    (`serdes.kafka.decode`)."""

    def __init__(self, registry: CollectorRegistry, context: SparkContext) -> None:
        self.gauge = Gauge(
            "streamjoin_event_time_max_seconds",
            "Largest event time an input has shown, epoch seconds",
            ["side"],
            registry=registry,
        )
        self.accumulator: Accumulator[dict] = context.accumulator({}, LargestByLabel())

    def update(self) -> None:
        for labels, ms in dict(self.accumulator.value).items():
            self.gauge.labels(*labels).set(ms / 1000)


class LatestReports(AccumulatorParam):
    """Accumulates `{key: (when, value)}`, keeping each key's latest report."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, first: dict, second: dict) -> dict:
        for key, report in second.items():
            if key not in first or first[key][0] <= report[0]:
                first[key] = report
        return first


class HeldRowsGauge:
    """`streamjoin_state_rows{operator,side}`: what the joins' and normalizers' state holds, the
    sum of each bucket's latest report (`state.spark.frame.HeldRows`). Buckets report
    when visited; the service keeps the reports in the checkpoint and starts from them
    (`app.run.checkpoint.HeldRowsRecord`). Each report counts rows by when a state TTL drops
    them, so rows Spark has dropped since their bucket's last visit are no longer counted."""

    def __init__(self, registry: CollectorRegistry, context: SparkContext) -> None:
        self.gauge = Gauge(
            "streamjoin_state_rows",
            "Rows a join's state holds per input side (versions of a versioned table, probe "
            "rows waiting for the watermark), keys a normalizer holds, and rows an upsert "
            "materializer keeps (side output)",
            ["operator", "side"],
            registry=registry,
        )
        self.accumulator: Accumulator[dict] = context.accumulator({}, LatestReports())

    def update(self) -> None:
        now_ms = time.time() * 1000
        totals: dict[tuple[str, str], int] = {}
        for (operator, side, _bucket), (_when, counts) in dict(self.accumulator.value).items():
            held = sum(n for expires, n in counts if expires is None or expires > now_ms)
            totals[operator, side] = totals.get((operator, side), 0) + held
        for (operator, side), total in totals.items():
            self.gauge.labels(operator, side).set(total)


class TaskFailures:
    """`streamjoin_spark_task_failures`: task attempts that failed, each run again by Spark up to
    `spark.task.maxFailures` (a broker in trouble, a Python worker lost, an executor gone):
    the failed tasks of every executor Spark's status store knows, gone ones included."""

    def __init__(self, registry: CollectorRegistry, context: SparkContext) -> None:
        self.counter = Counter(
            "streamjoin_spark_task_failures",
            "Spark task attempts that failed (and were run again, up to spark.task.maxFailures "
            "attempts a task, before the query fails)",
            registry=registry,
        )
        self._store = context._jsc.sc().statusStore()
        self._seen = self._failed()

    def _failed(self) -> int:
        executors = self._store.executorList(False).iterator()  # activeOnly=False: gone ones too
        failed = 0
        while executors.hasNext():
            failed += executors.next().failedTasks()
        return failed

    def update(self) -> None:
        failed = self._failed()
        if failed > self._seen:
            self.counter.inc(failed - self._seen)
            self._seen = failed


LOOKUP_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def latency_counts(latencies_s: list[float]) -> dict[tuple[str], float]:
    """What a task adds to the latency accumulator: queries per bucket (the first bound each
    fits under, "+Inf" past the last), their count and their sum."""
    counts: dict[tuple[str], float] = {}
    for seconds in latencies_s:
        bound = next((str(b) for b in LOOKUP_SECONDS_BUCKETS if seconds <= b), "+Inf")
        counts[(bound,)] = counts.get((bound,), 0) + 1
    if latencies_s:
        counts[("count",)] = len(latencies_s)
        counts[("sum",)] = sum(latencies_s)
    return counts


class LookupMetrics:
    """The lookup join's `streamjoin_lookup_events_total{event}` (keys, cache hits and misses,
    queries, retries, errors) and `streamjoin_lookup_seconds`, a histogram of query latencies,
    both fed by accumulators the lookup tasks add to (`latency_counts`)."""

    def __init__(self, registry: CollectorRegistry, context: SparkContext) -> None:
        self.events = LabelledAccumulatedCounter(
            Counter(
                "streamjoin_lookup_events",
                "Lookup join: keys looked up, cache hits and "
                "misses, queries sent, retries and failed lookups",
                ["event"],
                registry=registry,
            ),
            context,
        )
        self.latency: Accumulator[dict] = context.accumulator({}, CountsByLabel())
        registry.register(self)

    def collect(self):
        values = dict(self.latency.value)
        cumulative, buckets = 0.0, []
        for bound in (*map(str, LOOKUP_SECONDS_BUCKETS), "+Inf"):
            cumulative += values.get((bound,), 0)
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "streamjoin_lookup_seconds",
            "Lookup join: how long each query to the table took",
            buckets=buckets,
            sum_value=values.get(("sum",), 0.0),
        )


# a histogram's upper bounds of changes a join emitted per input change ("+Inf" past the last)
FANOUT_BOUNDS = (0, 1, 2, 5, 10, 100, 1_000, 10_000)


def fanout_labels() -> list[str]:
    """`streamjoin_join_fanout`'s bucket labels, in order."""
    return [*(str(bound) for bound in FANOUT_BOUNDS), "+Inf"]


class FanoutMetrics:
    """`streamjoin_join_fanout`, a histogram of the changes a regular join emitted per input
    change, and `streamjoin_hot_key_reports_total{input}`, the log lines naming a key that holds
    more than `HOT_KEY_ROWS` rows of one input: both fed by the accumulator the join tasks add
    to (`state.joins.fanout`)."""

    def __init__(self, registry: CollectorRegistry, context: SparkContext) -> None:
        self.accumulator: Accumulator[dict] = context.accumulator({}, CountsByLabel())
        registry.register(self)

    def collect(self):
        values = dict(self.accumulator.value)
        cumulative, buckets = 0, []
        for bound in fanout_labels():
            cumulative += values.get(("fanout", bound), 0)
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "streamjoin_join_fanout",
            "Regular joins: the changes emitted per input change (the rows it matched, "
            "retractions and padding included)",
            buckets=buckets,
            sum_value=values.get(("fanout", "sum"), 0),
        )
        reports = CounterMetricFamily(
            "streamjoin_hot_key_reports",
            "Log lines naming a key that holds more than HOT_KEY_ROWS rows of one input (at "
            "most one a minute per key and worker)",
            labels=["input"],
        )
        for (kind, side), count in sorted(values.items()):
            if kind == "hot":
                reports.add_metric([side], count)
        yield reports


class ServiceMetrics:
    """Everything `/metrics` shows, and the readiness `/readyz` reports."""

    def __init__(
        self,
        context: SparkContext,
        stall_timeout_s: float = 600.0,
        state_ttl_s: float = 0.0,
        pipelined: bool = True,
    ) -> None:
        """`pipelined`: whether state calls go many to a round trip (`state.spark.pipelined`)."""
        self.registry = RefreshedRegistry()
        # the poll's thread and the server's both update: one at a time, or growth counts twice
        self._updating = threading.Lock()
        Gauge(
            "streamjoin_state_calls_pipelined",
            "1: the state's entries are read and written many to a round trip with Spark's "
            "state server; 0: one call each (another pyspark than the one tested: slower)",
            registry=self.registry,
        ).set(1 if pipelined else 0)
        # process_start_time_seconds and the like: restarts, for the dashboard
        ProcessCollector(registry=self.registry)
        # what tells state that grows for ever from state a TTL bounds (the alerts' rule)
        Gauge(
            "streamjoin_state_ttl_seconds",
            "STATE_TTL in seconds; 0: no TTL, rows are held until a change removes them",
            registry=self.registry,
        ).set(state_ttl_s)
        dead_letters = Counter(
            "streamjoin_dead_letters",
            "Records sent to the dead-letter topic: input records that could not be decoded "
            "(input left/right), joined rows a CAST failed on (input output, reason cast), "
            "rows behind the watermark with LATE_ROWS=dead-letter (reason late)",
            ["input", "reason"],
            registry=self.registry,
        )
        self.progress = ProgressMetrics(self.registry, dead_letters)
        self.readiness = Readiness(stall_timeout_s)
        self.dead_letters = LabelledAccumulatedCounter(dead_letters, context)

        self.held_rows = HeldRowsGauge(self.registry, context)
        self.event_times = LargestEventTimes(self.registry, context)
        self.changes = LabelledAccumulatedCounter(
            Counter(
                "streamjoin_changes",
                "Changes the join emitted, by kind (+I -U +U -D)",
                ["kind"],
                registry=self.registry,
            ),
            context,
        )
        self.late_rows = LabelledAccumulatedCounter(
            Counter(
                "streamjoin_late_rows",
                "Event-time rows that arrived behind the combined watermark (interval and "
                "temporal joins): joined or padded as Flink does, or dead-lettered with "
                "LATE_ROWS=dead-letter",
                ["side"],
                registry=self.registry,
            ),
            context,
        )

        self.warm_reads = LabelledAccumulatedCounter(
            Counter(
                "streamjoin_state_reads",
                "Join state entries the workers read: answered from the copy a worker kept "
                "since the last micro-batch (result hit) or read from the state store (miss)",
                ["result"],
                registry=self.registry,
            ),
            context,
        )

        self.fanout = FanoutMetrics(self.registry, context)
        self.lookups = LookupMetrics(self.registry, context)
        self.task_failures = TaskFailures(self.registry, context)
        self.registry.refresh = self.update_accumulated

    def serve(self, port: int) -> int:
        """Serve `/metrics`, `/healthz`, `/readyz`; return the port (a free one for 0)."""
        return serve(self.registry, self.readiness, port)

    def update_accumulated(self) -> None:
        """Fold in what tasks added to the accumulators: driver memory only, no call into the
        JVM, so a scrape answers while Spark stops too."""
        with self._updating:
            for counter in (
                self.dead_letters,
                self.late_rows,
                self.warm_reads,
                self.lookups.events,
                self.changes,
            ):
                counter.update()
            self.held_rows.update()
            self.event_times.update()

    def update(self) -> None:
        self.update_accumulated()
        self.task_failures.update()

    def observe_progress(self, query: StreamingQuery) -> None:
        """Fold in the query's progress reports since the last call."""
        self.progress.poll(query, time.time())

    def watch(self, query: StreamingQuery) -> None:
        """Poll the query: counts from tasks, and readiness.

        A query waiting for data is fine however long it waits; one stuck inside a batch past
        the readiness timeout, or dead, is not.
        """
        self.update()
        self.observe_progress(query)
        if not query.isActive:
            failure = query.exception()
            self.readiness.failed(str(failure).splitlines()[0] if failure else "query stopped")
            return
        if not query.status.get("isTriggerActive", False):
            self.readiness.progressed()
