"""The chart's alert rules as the tests see them: rendered with default values, and the series
their expressions read."""

from __future__ import annotations

import re
from pathlib import Path

import helm_python as helm
import yaml

CHART = Path(__file__).parent.parent / "helm" / "streamjoin"
# labels Prometheus gives every series of a scrape target, not the service
TARGET_LABELS = {"job", "instance", "namespace"}


def alert_rules() -> list[dict]:
    """The PrometheusRule's groups, the chart rendered as release `sj` in namespace `stream`."""
    values = {"alerts": {"enabled": True}}
    for text in helm.Chart.load(CHART).render(values, name="sj", namespace="stream").values():
        for doc in yaml.safe_load_all(text):
            if doc and doc["kind"] == "PrometheusRule":
                return doc["spec"]["groups"]
    raise AssertionError("no PrometheusRule rendered")


def assert_alerts_read_what_is_served(page: str) -> None:
    """Every series an alert reads is on the `/metrics` `page` (counters as their family), and
    every label it matches or groups by is one of those series' labels, where `page` has samples
    of them all."""
    served: dict[str, set[str]] = {}
    for name, labels in re.findall(r"^(streamjoin_\w+)(?:\{(.*)\})? ", page, re.M):
        served.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    for rule in (rule for group in alert_rules() for rule in group["rules"]):
        expr = rule["expr"]
        names = set(re.findall(r"\b(streamjoin_\w+)", expr))
        for name in names:  # a counter without samples yet: its TYPE line
            typed = {f"# TYPE {name} ", f"# TYPE {name.removesuffix('_total')} "}
            assert name in served or any(t in page for t in typed), (rule["alert"], name)
        labels = set(re.findall(r'(\w+)\s*=~?\s*"', expr))
        for grouped in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            labels.update(label.strip() for label in grouped.split(","))
        if names <= served.keys():
            have = set().union(*(served[name] for name in names))
            assert labels - TARGET_LABELS <= have, (rule["alert"], labels - have)
