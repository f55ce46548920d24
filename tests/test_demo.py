"""The README's first command: `streamjoin demo` runs Flink's temporal join example through
Kafka."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.broker import ApacheKafka
from app.demo import SCRIPT
from tests.service import service_env, user_folder_shadowing_the_service

pytestmark = pytest.mark.spark

EXAMPLE_TABLE = [
    "o_001 00:01:00 scooter    00:01:00 11.11",
    "o_002 00:03:00 basketball 00:02:00 23.11",
    "o_003 12:00:00 scooter    12:00:00 12.99",
    "o_004 12:00:00 basketball 12:00:00 19.99",
    "o_005 18:00:00 NULL       NULL     NULL",
]


def test_demo_prints_the_examples_temporal_join_table_and_exits(tmp_path: Path) -> None:
    """Run as a user runs it: the installed command, from a directory of their own, whose
    folders may bear the service's package names (a project's `app`): Spark's Python workers,
    started there, still import the service's code."""
    env = service_env()
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    command = [str(Path(sys.executable).with_name("streamjoin")), "demo"]
    result = subprocess.run(
        command,
        env=env,
        cwd=user_folder_shadowing_the_service(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    if lines[0].startswith("streamjoin demo: fetching Apache Kafka"):  # the first run only
        lines = lines[1:]
    started = f"streamjoin demo: {ApacheKafka.name}, a local process, at 127.0.0.1:"
    assert lines[0].startswith(started)
    assert lines[1] == "streamjoin demo: the job, as Flink SQL (STREAMJOIN_SQL):"
    assert textwrap.indent(SCRIPT.format(suffix=""), "  ") in result.stdout  # the example's query
    tail = lines[-7:]  # what the join wrote
    assert tail[0] == "streamjoin demo: 5 rows reached orders_enriched:"
    assert [line.strip() for line in tail[1:6]] == EXAMPLE_TABLE
    assert tail[6].startswith("streamjoin demo: metrics were served at http://127.0.0.1:")
    assert len(lines) == 2 + 1 + len(SCRIPT.splitlines()) + 1 + 7  # the script between blanks
    noise = [
        line
        for line in result.stderr.splitlines()
        if "Python worker" in line or "log4j" in line or "setLogLevel" in line
    ]
    assert noise == []
