"""The chart's alerts: each fires on the series it watches for and clears once they recover
(`promtool test rules` on synthetic series), and each links its runbook (docs/runbooks.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from tests.alerting import CHART, RUNBOOKS_URL, alert_rules

FIXTURE = Path(__file__).parent / "fixtures" / "alerts" / "streamjoin_test.yaml"
RUNBOOKS = Path(__file__).parent.parent / "docs" / "runbooks.md"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_each_alert_fires_on_what_it_watches_and_clears(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": alert_rules()}))
    shutil.copy(FIXTURE, tmp_path)
    checked = subprocess.run(
        ["promtool", "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", FIXTURE.name], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert has a test case
    cases = yaml.safe_load(FIXTURE.read_text())["tests"]
    tested_alerts = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert tested_alerts == {rule["alert"] for group in alert_rules() for rule in group["rules"]}


def test_each_alert_links_its_runbook_section_by_an_absolute_url() -> None:
    """An alert tool opens the link: it is where the operator serves docs/runbooks.md, and
    the section it names is there."""
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", RUNBOOKS.read_text(), re.M)
    }
    for rule in (rule for group in alert_rules() for rule in group["rules"]):
        url, section = rule["annotations"]["runbook_url"].split("#")
        assert url == RUNBOOKS_URL and section in anchors, (rule["alert"], url)


@pytest.mark.parametrize("url", ["", "docs/runbooks.md"], ids=["unset", "relative"])
def test_alerts_without_an_absolute_runbook_url_are_refused(url: str) -> None:
    with pytest.raises(Exception, match="runbookUrl"):
        helm.Chart.load(CHART).render(
            {"alerts": {"enabled": True, "runbookUrl": url}}, name="sj", namespace="stream"
        )
