"""The chart's alerts: each fires on the series it watches for and clears once they recover
(`promtool test rules` on synthetic series), and each links a runbook the README has."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.alerting import alert_rules

FIXTURE = Path(__file__).parent / "fixtures" / "alerts" / "streamjoin_test.yaml"
README = Path(__file__).parent.parent / "README.md"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus)")
def test_each_alert_fires_on_what_it_watches_and_clears(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": alert_rules()}))
    shutil.copy(FIXTURE, tmp_path)
    checked = subprocess.run(["promtool", "check", "rules", "rules.yaml"], cwd=tmp_path,
                             capture_output=True, text=True)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(["promtool", "test", "rules", FIXTURE.name], cwd=tmp_path,
                            capture_output=True, text=True)  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert has a test case
    cases = yaml.safe_load(FIXTURE.read_text())["tests"]
    tested_alerts = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert tested_alerts == {rule["alert"] for group in alert_rules() for rule in group["rules"]}


def test_each_alert_links_a_runbook_section_of_the_readme() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", README.read_text(), re.M)
    }
    for rule in (rule for group in alert_rules() for rule in group["rules"]):
        url = rule["annotations"]["runbook_url"]
        assert url.split("#")[1] in anchors, (rule["alert"], url)
