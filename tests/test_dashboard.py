"""The chart's Grafana dashboard: the file it ships is what `ops/dashboard.py` builds, it reaches
Grafana's sidecar as a labelled ConfigMap, and every panel's query is valid PromQL (the series
they read are checked against a real scrape in the service tests)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from ops.dashboard import OUTPUT, as_json, queries
from tests.alerting import CHART


def configmaps(values: dict | None) -> dict[str, dict]:
    rendered = helm.Chart.load(CHART).render(values, name="sj", namespace="stream").values()
    docs = [doc for text in rendered for doc in yaml.safe_load_all(text) if doc]
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ConfigMap"}


def test_the_shipped_dashboard_is_the_one_the_code_builds() -> None:
    assert OUTPUT.read_text() == as_json(), "run `python -m ops.dashboard` and commit the file"


def test_the_chart_ships_it_labelled_for_grafanas_sidecar_unless_turned_off() -> None:
    shipped = configmaps(None)["sj-streamjoin-dashboard"]
    assert shipped["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(shipped["data"]["streamjoin.json"]) == json.loads(OUTPUT.read_text())
    relabelled = configmaps({"dashboard": {"label": "team/dashboards", "labelValue": "joins"}})
    assert relabelled["sj-streamjoin-dashboard"]["metadata"]["labels"]["team/dashboards"] == "joins"
    assert "sj-streamjoin-dashboard" not in configmaps({"dashboard": {"enabled": False}})


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    rules = [
        {
            "record": f"panel:{i}",
            "expr": expr.replace("$__rate_interval", "5m").replace("$job", ".*"),
        }
        for i, (_, expr) in enumerate(queries())
    ]
    (tmp_path / "panels.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]})
    )
    checked = subprocess.run(
        ["promtool", "check", "rules", "panels.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
