"""The Grafana dashboard the Helm chart ships, built with Grafana's own SDK
(`grafana-foundation-sdk`, the `ops` extra) rather than written as JSON by hand.

`python -m ops.dashboard` writes it to `helm/streamjoin/dashboards/streamjoin.json`, which the
chart puts in a ConfigMap for Grafana's dashboard sidecar; `tests/test_dashboard.py` holds the
file to this code and every query's series to what the service serves. Every panel reads only
series the service exports, selected by the `job` variable (one Prometheus job per release).
"""

from __future__ import annotations

import sys
from pathlib import Path

from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DatasourceVariable,
    QueryVariable,
    Row,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.timeseries import Panel
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

OUTPUT = Path(__file__).parent.parent / "helm" / "streamjoin" / "dashboards" / "streamjoin.json"
UID = "streamjoin"
JOB = 'job=~"$job"'
RATE = "$__rate_interval"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")

# (row, [(panel title, unit, [(query, legend)])]): what an on-call engineer looks at, in order
PANELS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "Throughput",
        [
            (
                "Input records/s by topic",
                "rps",
                [
                    (
                        f"sum by (topic) (deriv(streamjoin_kafka_offset{{{JOB}}}[{RATE}]))",
                        "{{topic}}",
                    )
                ],
            ),
            (
                "Output changes/s by kind",
                "rps",
                [(f"sum by (kind) (rate(streamjoin_changes_total{{{JOB}}}[{RATE}]))", "{{kind}}")],
            ),
            (
                "Micro-batch duration",
                "s",
                [
                    (
                        "histogram_quantile(0.5, sum by (le) "
                        f"(rate(streamjoin_batch_duration_seconds_bucket{{{JOB}}}[{RATE}])))",
                        "p50",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        f"(rate(streamjoin_batch_duration_seconds_bucket{{{JOB}}}[{RATE}])))",
                        "p99",
                    ),
                ],
            ),
        ],
    ),
    (
        "Time and lag",
        [
            (
                "Watermark lag",
                "s",
                [(f"streamjoin_watermark_lag_seconds{{{JOB}}}", "{{instance}}")],
            ),
            (
                "Event time and watermark",
                "dateTimeAsIso",
                [
                    (
                        f"streamjoin_event_time_max_seconds{{{JOB}}} * 1000",
                        "max event time {{side}}",
                    ),
                    (f"streamjoin_watermark_seconds{{{JOB}}} * 1000", "watermark"),
                ],
            ),
            (
                "Kafka lag by topic",
                "short",
                [(f"sum by (topic) (streamjoin_kafka_lag_records{{{JOB}}})", "{{topic}}")],
            ),
        ],
    ),
    (
        "State",
        [
            (
                "State rows by operator and side",
                "short",
                [
                    (
                        f"sum by (operator, side) (streamjoin_state_rows{{{JOB}}})",
                        "{{operator}} {{side}}",
                    ),
                ],
            ),
            (
                "State memory and SST files",
                "bytes",
                [
                    (
                        f"sum by (operator) (streamjoin_state_memory_bytes{{{JOB}}})",
                        "memory {{operator}}",
                    ),
                    (
                        f"sum by (operator) (streamjoin_state_sst_bytes{{{JOB}}})",
                        "SST {{operator}}",
                    ),
                ],
            ),
            (
                "State reads: kept in memory (hit) or read from the store (miss)",
                "short",
                [
                    (
                        "sum by (result) "
                        f"(increase(streamjoin_state_reads_total{{{JOB}}}[{RATE}]))",
                        "{{result}}",
                    ),
                ],
            ),
            (
                "Join fan-out: changes emitted per input change",
                "short",
                [
                    (
                        "histogram_quantile(0.5, sum by (le) "
                        f"(rate(streamjoin_join_fanout_bucket{{{JOB}}}[{RATE}])))",
                        "p50",
                    ),
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        f"(rate(streamjoin_join_fanout_bucket{{{JOB}}}[{RATE}])))",
                        "p99",
                    ),
                ],
            ),
            (
                "Hot keys reported (more than HOT_KEY_ROWS rows of one input)",
                "short",
                [
                    (
                        "sum by (input) "
                        f"(increase(streamjoin_hot_key_reports_total{{{JOB}}}[{RATE}]))",
                        "{{input}}",
                    ),
                ],
            ),
            (
                "Keys expired by STATE_TTL",
                "short",
                [
                    (
                        f"sum(increase(streamjoin_state_expired_keys_total{{{JOB}}}[{RATE}]))",
                        "expired",
                    )
                ],
            ),
        ],
    ),
    (
        "Bad and late input",
        [
            (
                "Dead letters by input and reason",
                "short",
                [
                    (
                        "sum by (input, reason) "
                        f"(increase(streamjoin_dead_letters_total{{{JOB}}}[{RATE}]))",
                        "{{input}}: {{reason}}",
                    ),
                ],
            ),
            (
                "Late rows by side",
                "short",
                [
                    (
                        f"sum by (side) (increase(streamjoin_late_rows_total{{{JOB}}}[{RATE}]))",
                        "{{side}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Lookup join",
        [
            (
                "Lookup latency",
                "s",
                [
                    (
                        "histogram_quantile(0.99, sum by (le) "
                        f"(rate(streamjoin_lookup_seconds_bucket{{{JOB}}}[{RATE}])))",
                        "p99",
                    ),
                ],
            ),
            (
                "Lookups by event (cache hits, misses, errors)",
                "short",
                [
                    (
                        "sum by (event) "
                        f"(increase(streamjoin_lookup_events_total{{{JOB}}}[{RATE}]))",
                        "{{event}}",
                    ),
                ],
            ),
        ],
    ),
    (
        "Process",
        [
            (
                "Broker trouble: ends not given, task attempts failed",
                "short",
                [
                    (
                        "sum by (topic, reason) "
                        f"(increase(streamjoin_kafka_end_fallbacks_total{{{JOB}}}[{RATE}]))",
                        "ends {{reason}}: {{topic}}",
                    ),
                    (
                        f"sum(increase(streamjoin_spark_task_failures_total{{{JOB}}}[{RATE}]))",
                        "failed task attempts",
                    ),
                ],
            ),
            (
                "Restarts (service up, and its uptime)",
                "s",
                [
                    (f"time() - process_start_time_seconds{{{JOB}}}", "uptime {{instance}}"),
                    (f"up{{{JOB}}}", "up {{instance}}"),
                ],
            ),
        ],
    ),
]


def build() -> Dashboard:
    board = (
        Dashboard("streamjoin")
        .uid(UID)
        .tags(["streamjoin", "kafka", "spark"])
        .refresh("30s")
        .time("now-3h", "now")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            QueryVariable("job")
            .label("Job")
            .datasource(DATASOURCE)
            .query("label_values(streamjoin_last_batch_id, job)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .multi(True)
        )
    )
    ids = iter(range(1, 1000))
    for row, panels in PANELS:
        board = board.with_row(Row(row).id(next(ids)))
        for title, unit, queries in panels:
            panel = (
                Panel()
                .id(next(ids))
                .title(title)
                .unit(unit)
                .datasource(DATASOURCE)
                .height(8)
                .span(8)
            )
            for ref, (expr, legend) in zip("ABCDEFGH", queries, strict=False):
                panel = panel.with_target(Dataquery().expr(expr).legend_format(legend).ref_id(ref))
            board = board.with_panel(panel)
    return board


def as_json() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


def queries() -> list[tuple[str, str]]:
    """Every panel's title and query."""
    return [(title, expr) for _, panels in PANELS for title, _, qs in panels for expr, _ in qs]


if __name__ == "__main__":
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(as_json())
    sys.stdout.write(f"wrote {OUTPUT}\n")
