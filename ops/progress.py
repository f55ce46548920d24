"""Metrics read off the streaming query's progress reports (one per micro-batch).

Spark's progress JSON carries what an operator watches: the watermark, input rates, batch
durations and, per stateful operator, its state rows and bytes. Each new report (by batch id)
is folded into Prometheus gauges, counters and a histogram once, as the service polls the query.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

BATCH_SECONDS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300)
# The joined rows a select list's CAST failed on, sent to the dead-letter topic, per batch, as
# the query observes them (`Dataset.observe`). The join's changes and the inputs' event times
# are counted by the tasks themselves (`ops.metrics`): an observation costs every task of its
# stage a generated projection and every micro-batch's plan a node (`docs/performance.md`).
CAST_FAILURES_OBSERVATION = "cast_failures"


# In a source's latest offsets, the ends its broker did not confirm so far, by reason:
# `{END_FALLBACKS: {reason: count}}` (`serdes.kafka.offsets.PartitionBounds.fallbacks`).
END_FALLBACKS = "end fallbacks"


def _offsets(value: Any) -> dict[str, Any]:
    """A source's offsets in a progress report: `{topic: {partition: offset}}`, and notes under
    keys that no topic can have (they hold a space: when the reader started, the partitions'
    event times, END_FALLBACKS)."""
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}


def _topics(offsets: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {name: partitions for name, partitions in offsets.items() if " " not in name}


def _epoch_seconds(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class ProgressMetrics:
    """`streamjoin_*` metrics of the query's progress reports."""

    def __init__(self, registry: CollectorRegistry, dead_letters: Counter) -> None:
        """`dead_letters`: where the rows a CAST failed on are counted (`input` "output")."""
        self.dead_letters = dead_letters
        self.watermark = Gauge(
            "streamjoin_watermark_seconds",
            "Combined event-time watermark (the minimum of both inputs'), epoch seconds",
            registry=registry,
        )
        self.watermark_lag = Gauge(
            "streamjoin_watermark_lag_seconds",
            "Wall clock minus the combined watermark, when the last batch ran",
            registry=registry,
        )
        self.kafka_lag = Gauge(
            "streamjoin_kafka_lag_records",
            "Records of a topic-partition not processed yet (log end minus processed offset)",
            ["topic", "partition"],
            registry=registry,
        )
        self.kafka_offset = Gauge(
            "streamjoin_kafka_offset",
            "Next offset of a topic-partition to process (the end of the last batch); its rate "
            "is the records read from it per second",
            ["topic", "partition"],
            registry=registry,
        )
        self.state_entries = Gauge(
            "streamjoin_state_entries",
            "Entries in a stateful operator's state store (keys, pages or buckets, and timers)",
            ["operator"],
            registry=registry,
        )
        self.state_bytes = Gauge(
            "streamjoin_state_memory_bytes",
            "Memory a stateful operator's state store uses",
            ["operator"],
            registry=registry,
        )
        self.state_sst_bytes = Gauge(
            "streamjoin_state_sst_bytes",
            "Size of a stateful operator's RocksDB SST files",
            ["operator"],
            registry=registry,
        )
        self.expired_keys = Counter(
            "streamjoin_state_expired_keys",
            "Join keys whose state Spark dropped after STATE_TTL without a write",
            registry=registry,
        )
        self.input_rows = Counter(
            "streamjoin_input_rows",
            "Input records read from Kafka, both inputs",
            registry=registry,
        )
        self.input_rate = Gauge(
            "streamjoin_input_rows_per_second",
            "Input records per second over the last batch",
            registry=registry,
        )
        self.batch_duration = Histogram(
            "streamjoin_batch_duration_seconds",
            "Duration of a micro-batch (trigger execution)",
            buckets=BATCH_SECONDS,
            registry=registry,
        )
        self.end_fallbacks = Counter(
            "streamjoin_kafka_end_fallbacks",
            "Ends of a topic's partitions a micro-batch was planned to without the broker's "
            "word: unconfirmed (a broker whose ListOffsets is not trusted showed no end "
            "marker in time), unanswered (the broker did not answer: the last ends stood)",
            ["topic", "reason"],
            registry=registry,
        )
        self._fallbacks_seen: dict[tuple[str, str], int] = {}
        self.last_batch = Gauge(
            "streamjoin_last_batch_id", "Id of the last micro-batch", registry=registry
        )
        self.last_progress = Gauge(
            "streamjoin_last_progress_timestamp_seconds",
            "When the last micro-batch started, epoch seconds",
            registry=registry,
        )
        self.seen_batch = -1  # the last batch folded in

    def poll(self, query: StreamingQuery, now: float) -> None:
        """Fold in `query`'s progress reports not seen yet: the last one, and when more than
        one batch ran since the last poll, the ones before it that Spark keeps
        (`spark.sql.streaming.numRecentProgressUpdates`, 100).

        Polled, not heard: a `StreamingQueryListener` in Python turns every report into Python
        objects through py4j, field by field, and each Java map it walks ends in an exception
        that py4j resolves by looking class names up on the classpath: such a listener took a
        large share of the JVM's time on the listener bus thread beside the tasks
        (`docs/performance.md`); a poll costs two py4j calls. The last report's batch id is
        read off the JVM's object: pyspark's `lastProgress` has the JVM write the whole report
        as JSON, at every poll of a query that waits (most of an idle service's CPU).
        """
        latest = query._jsq.lastProgress()  # type: ignore[attr-defined]
        if latest is None or int(latest.batchId()) <= self.seen_batch:
            return
        ran = int(latest.batchId()) - self.seen_batch
        reports = query.recentProgress if ran > 1 else [query.lastProgress]
        for report in reports:
            try:
                self.observe(json.loads(report.json), now)
            except (ValueError, TypeError, KeyError) as err:  # metrics never stop the join
                log.warning("progress report not understood: %s", err)

    def _end_fallbacks(self, topic: str, reason: str, count: int) -> None:
        """A reader's count since it started, added as its growth."""
        seen = self._fallbacks_seen.get((topic, reason), 0)
        if count > seen:
            self.end_fallbacks.labels(topic, reason).inc(count - seen)
        self._fallbacks_seen[topic, reason] = count

    def observe(self, progress: dict[str, Any], now: float) -> None:
        """Fold in one progress report (ignored if its batch was seen already)."""
        batch = int(progress.get("batchId", -1))
        if batch <= self.seen_batch:
            return
        self.seen_batch = batch
        self.last_batch.set(batch)
        started = _epoch_seconds(progress.get("timestamp"))
        if started is not None:
            self.last_progress.set(started)
        event_time = progress.get("eventTime") or {}
        watermark = _epoch_seconds(event_time.get("watermark"))
        if watermark is not None:
            self.watermark.set(watermark)
            self.watermark_lag.set(now - watermark)
        for source in progress.get("sources") or ():
            latest = _offsets(source.get("latestOffset"))
            done, topics = _topics(_offsets(source.get("endOffset"))), _topics(latest)
            for topic, partitions in topics.items():
                for partition, end in partitions.items():
                    processed = done.get(topic, {}).get(partition, 0)
                    self.kafka_lag.labels(topic, partition).set(max(0, end - processed))
                    self.kafka_offset.labels(topic, partition).set(processed)
                for reason, count in (latest.get(END_FALLBACKS) or {}).items():
                    self._end_fallbacks(topic, reason, int(count))
        self.input_rows.inc(int(progress.get("numInputRows") or 0))
        self.input_rate.set(float(progress.get("inputRowsPerSecond") or 0.0))
        duration_ms = (progress.get("durationMs") or {}).get("triggerExecution")
        if duration_ms is not None:
            self.batch_duration.observe(duration_ms / 1000)
        observed = progress.get("observedMetrics") or {}
        failed_casts = (observed.get(CAST_FAILURES_OBSERVATION) or {}).get("rows")
        if failed_casts:
            self.dead_letters.labels("output", "cast").inc(int(failed_casts))
        for i, operator in enumerate(progress.get("stateOperators") or ()):
            name = f"{i}-{operator.get('operatorName', 'state')}"
            self.state_entries.labels(name).set(operator.get("numRowsTotal", 0))
            self.state_bytes.labels(name).set(operator.get("memoryUsedBytes", 0))
            custom = operator.get("customMetrics") or {}
            if custom.get("rocksdbSstFileSize") is not None:
                self.state_sst_bytes.labels(name).set(custom["rocksdbSstFileSize"])
            self.expired_keys.inc(int(custom.get("numValuesRemovedDueToTTLExpiry") or 0))
