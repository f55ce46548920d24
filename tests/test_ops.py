"""Metrics from progress reports and from tasks' accumulators, and the health endpoints (no
Spark query needed)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry, Counter, generate_latest
from pyspark.sql import SparkSession

from ops.endpoints import Readiness, serve
from ops.metrics import LatestReports, ServiceMetrics, latency_counts
from ops.progress import ProgressMetrics
from tests.alerting import assert_promtool_accepts

PROGRESS = {  # the shape of a Spark 4.3 progress report of this service's join query
    "id": "q",
    "batchId": 7,
    "timestamp": "2026-11-22T10:00:00.000Z",
    "numInputRows": 1200,
    "inputRowsPerSecond": 400.0,
    "durationMs": {"triggerExecution": 1500},
    "eventTime": {"max": "2026-11-22T09:59:50.000Z", "watermark": "2026-11-22T09:59:00.000Z"},
    "sources": [
        {
            "description": "streamjoin-kafka",
            "endOffset": '{"orders": {"0": 90, "1": 100}, "event times": {"0": 5, "1": 7}}',
            "latestOffset": json.dumps(
                {
                    "orders": {"0": 120, "1": 100},
                    "started at": {"ns": 1795341600000000000},
                    "end fallbacks": {"unconfirmed": 2, "unanswered": 0},
                }
            ),
        },
    ],
    "observedMetrics": {"cast_failures": {"rows": 2}},
    "stateOperators": [
        {
            "operatorName": "transformWithStateInPandasExec",
            "numRowsTotal": 42,
            "memoryUsedBytes": 1024,
            "customMetrics": {"rocksdbSstFileSize": 4096, "numValuesRemovedDueToTTLExpiry": 3},
        },
    ],
}
NOW = 1795341600.0  # 2026-11-22T10:00:00Z


def progress_metrics(registry: CollectorRegistry) -> ProgressMetrics:
    letters = Counter(
        "streamjoin_dead_letters", "dead letters", ["input", "reason"], registry=registry
    )
    return ProgressMetrics(registry, letters)


def test_a_progress_report_feeds_watermark_lag_state_and_batch_metrics() -> None:
    registry = CollectorRegistry()
    metrics = progress_metrics(registry)
    metrics.observe(PROGRESS, NOW)
    metrics.observe(PROGRESS, NOW + 5)  # the same batch again: counted once

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("streamjoin_watermark_lag_seconds") == 60.0
    assert value("streamjoin_kafka_lag_records", topic="orders", partition="0") == 30
    assert value("streamjoin_kafka_lag_records", topic="orders", partition="1") == 0
    # the reader's notes beside the offsets are no topics
    assert value("streamjoin_kafka_lag_records", topic="started at", partition="ns") is None
    assert value("streamjoin_kafka_offset", topic="event times", partition="0") is None
    assert value("streamjoin_kafka_end_fallbacks_total", topic="orders", reason="unconfirmed") == 2
    assert value("streamjoin_input_rows_total") == 1200
    assert value("streamjoin_last_batch_id") == 7
    assert value("streamjoin_dead_letters_total", input="output", reason="cast") == 2
    operator = "0-transformWithStateInPandasExec"
    assert value("streamjoin_state_entries", operator=operator) == 42
    assert value("streamjoin_state_expired_keys_total") == 3
    assert value("streamjoin_state_sst_bytes", operator=operator) == 4096
    assert value("streamjoin_batch_duration_seconds_count") == 1
    assert value("streamjoin_batch_duration_seconds_bucket", le="2.0") == 1


class Report(dict):
    """A progress report as `StreamingQuery.lastProgress` gives it: a dict with `json`."""

    @property
    def json(self) -> str:
        return json.dumps(self)


class JvmReport:
    """The JVM's object of a progress report, as py4j hands it over."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def batchId(self) -> int:
        return self.report["batchId"]


class JvmQuery:
    """The JVM's side of a `StreamingQuery` (`_jsq`), as much of it as the metrics poll."""

    def __init__(self, ran: list[Report]) -> None:
        self.ran = ran

    def lastProgress(self) -> JvmReport | None:
        return JvmReport(self.ran[-1]) if self.ran else None


class PolledQuery:
    """What of a `StreamingQuery` the metrics poll, over reports that ran."""

    def __init__(self) -> None:
        self.ran: list[Report] = []
        self._jsq = JvmQuery(self.ran)

    def run_batch(self, rows: int) -> None:
        self.ran.append(Report(PROGRESS, batchId=len(self.ran), numInputRows=rows))

    @property
    def lastProgress(self) -> Report | None:
        return self.ran[-1] if self.ran else None

    @property
    def recentProgress(self) -> list[Report]:
        return self.ran[-100:]


def test_polling_the_query_counts_every_batch_once_however_many_ran_between_polls() -> None:
    registry = CollectorRegistry()
    metrics, query = progress_metrics(registry), PolledQuery()
    metrics.poll(query, NOW)  # before the first batch
    query.run_batch(10)
    metrics.poll(query, NOW)
    metrics.poll(query, NOW)  # nothing new
    for rows in (20, 30, 40):  # three batches between two polls
        query.run_batch(rows)
    metrics.poll(query, NOW)
    assert registry.get_sample_value("streamjoin_input_rows_total") == 100
    assert registry.get_sample_value("streamjoin_batch_duration_seconds_count") == 4
    assert registry.get_sample_value("streamjoin_last_batch_id") == 3
    # each report carries the reader's count since it started: its growth is what is added
    fallbacks = {"topic": "orders", "reason": "unconfirmed"}
    assert registry.get_sample_value("streamjoin_kafka_end_fallbacks_total", fallbacks) == 2


def test_promtool_finds_no_problem_in_the_metrics() -> None:
    registry = CollectorRegistry()
    progress_metrics(registry).observe(PROGRESS, NOW)
    assert_promtool_accepts(generate_latest(registry))


def test_readiness_fails_when_the_query_stalls_or_dies() -> None:
    now = [0.0]
    readiness = Readiness(60, clock=lambda: now[0])
    assert readiness.problem() == "the query has not started"
    assert readiness.dead() is None  # starting is not dying: no liveness restart for it
    readiness.started()
    now[0] = 59
    assert readiness.problem() is None
    now[0] = 61
    assert readiness.problem() == readiness.dead() == "no progress for 61s (READINESS_TIMEOUT 60s)"
    readiness.progressed()
    assert readiness.problem() is None
    readiness.failed("query stopped")
    assert readiness.problem() == readiness.dead() == "query stopped"


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_health_endpoints_answer_beside_the_metrics() -> None:
    registry = CollectorRegistry()
    progress_metrics(registry).observe(PROGRESS, NOW)
    readiness = Readiness(60)
    port = serve(registry, readiness, 0)
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/readyz") == (503, "not ready: the query has not started\n")
    readiness.started()
    assert get(port, "/readyz") == (200, "ready\n")
    readiness.failed("the query failed: boom")
    assert get(port, "/healthz") == (503, "not alive: the query failed: boom\n")
    status, page = get(port, "/metrics")
    assert status == 200 and "streamjoin_watermark_lag_seconds 60.0" in page
    assert get(port, "/nothing")[0] == 404


def test_a_buckets_held_rows_are_its_latest_report_however_often_a_task_reran() -> None:
    merged = LatestReports().zero({})
    for reports in (
        {("join", "left", 0): (1.0, 5), ("join", "left", 1): (1.0, 7)},
        {("join", "left", 0): (2.0, 4)},  # bucket 0 visited again
        {("join", "left", 0): (2.0, 4)},  # ... and that task re-executed
        {("join", "left", 0): (1.5, 9)},  # a report older than the last one merged
    ):
        merged = LatestReports().addInPlace(merged, reports)
    assert merged == {("join", "left", 0): (2.0, 4), ("join", "left", 1): (1.0, 7)}


def test_the_joins_changes_and_each_inputs_largest_event_time_are_what_the_tasks_saw(
    spark: SparkSession,
) -> None:
    """Counted by the tasks, not observed by the query: the changes add up over tasks, an
    input's event time is the largest any task reported, a later task's older rows or not."""
    metrics = ServiceMetrics(spark.sparkContext)
    changes, times = metrics.changes.accumulator, metrics.event_times.accumulator

    def task(behind_s: int) -> None:
        changes.add({("+I",): 3, ("-D",): 1})
        times.add({("left",): int((NOW - behind_s) * 1000)})

    spark.sparkContext.parallelize([10, 60], 2).foreach(task)
    spark.sparkContext.parallelize([30], 1).foreach(task)
    sample = metrics.registry.get_sample_value
    assert sample("streamjoin_changes_total", {"kind": "+I"}) == 9
    assert sample("streamjoin_changes_total", {"kind": "-D"}) == 3
    assert sample("streamjoin_event_time_max_seconds", {"side": "left"}) == NOW - 10
    assert sample("streamjoin_event_time_max_seconds", {"side": "right"}) is None


def test_a_scrape_shows_what_finished_tasks_counted_without_waiting_for_the_poll(
    spark: SparkSession,
) -> None:
    """A count and the histogram beside it agree on every page, and polling between pages
    adds nothing twice."""
    metrics = ServiceMetrics(spark.sparkContext)
    events, latency = metrics.lookups.events.accumulator, metrics.lookups.latency

    def lookups(keys: int) -> None:
        def task(_: int) -> None:
            events.add({("key",): keys})
            latency.add(latency_counts([0.01]))

        spark.sparkContext.parallelize([0], 1).foreach(task)

    def page() -> tuple[float | None, float | None]:
        sample = metrics.registry.get_sample_value
        return (
            sample("streamjoin_lookup_events_total", {"event": "key"}),
            sample("streamjoin_lookup_seconds_count"),
        )

    lookups(4)
    assert page() == (4, 1)
    metrics.update()  # the service's poll
    lookups(2)
    assert page() == (6, 2)
    metrics.update()
    assert page() == (6, 2)
