"""The chart's alert rules and dashboard as the tests see them (rendered as release `sj`), and a
check that the series their expressions read are the ones the service serves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import helm_python as helm
import pytest
import yaml

CHART = Path(__file__).parent.parent / "helm" / "streamjoin"
# labels Prometheus gives every series of a scrape target, not the service
TARGET_LABELS = {"job", "instance", "namespace"}
# what the service itself exports (`up` is Prometheus' own)
SERVICE_SERIES = r"streamjoin_\w+|process_start_time_seconds"


# Where an operator serves the runbooks page (`alerts.runbookUrl`)
RUNBOOKS_URL = "https://docs.example.org/streamjoin/runbooks.html"


def alert_rules() -> list[dict]:
    """The PrometheusRule's groups, the chart rendered as release `sj` in namespace `stream`."""
    values = {"alerts": {"enabled": True, "runbookUrl": RUNBOOKS_URL}}
    for text in helm.Chart.load(CHART).render(values, name="sj", namespace="stream").values():
        for doc in yaml.safe_load_all(text):
            if doc and doc["kind"] == "PrometheusRule":
                return doc["spec"]["groups"]
    raise AssertionError("no PrometheusRule rendered")


def expressions() -> list[tuple[str, str]]:
    """Every alert's and dashboard panel's name and PromQL expression."""
    from ops.dashboard import queries

    rules = [(rule["alert"], rule["expr"]) for group in alert_rules() for rule in group["rules"]]
    return rules + queries()


def assert_monitoring_reads_what_is_served(page: str) -> None:
    """Every series an alert or a dashboard panel reads is on the `/metrics` `page` (counters
    without samples yet by their TYPE line), and every label it matches or groups by is one of
    those series' labels, where `page` has samples of them all."""
    served: dict[str, set[str]] = {}
    for name, labels in re.findall(rf"^({SERVICE_SERIES})(?:\{{(.*)\}})? ", page, re.M):
        served.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    for what, expr in expressions():
        names = set(re.findall(rf"\b({SERVICE_SERIES})", expr))
        for name in names:  # a counter without samples yet: its TYPE line
            typed = {f"# TYPE {name} ", f"# TYPE {name.removesuffix('_total')} "}
            assert name in served or any(t in page for t in typed), (what, name)
        labels = set(re.findall(r'(\w+)\s*=~?\s*"', expr))
        for grouped in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            labels.update(label.strip() for label in grouped.split(","))
        if names <= served.keys():
            have = set().union(*(served[name] for name in names))
            assert labels - TARGET_LABELS <= have, (what, labels - have)


def assert_promtool_accepts(exposition: bytes) -> None:
    """Prometheus' own check of a metrics page finds nothing to say (Debian's `prometheus`
    gives `promtool`; `.ci/run` installs it, and where it is missing the test says so)."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Debian prometheus) is not installed")
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=exposition, capture_output=True
    )
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, checked
