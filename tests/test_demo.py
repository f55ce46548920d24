"""The README's first command: `streamjoin demo` runs self-contained and stops cleanly."""

from __future__ import annotations

import json
import subprocess

import pytest

from app.demo import seed_records
from tests.service import service_env, streamjoin_command

pytestmark = pytest.mark.spark


def test_demo_runs_the_seed_through_the_embedded_broker_and_exits() -> None:
    env = service_env()
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    result = subprocess.run(
        [*streamjoin_command(), "demo"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("streamjoin demo: embedded Kafka-protocol broker at 127.0.0.1:")
    printed = [json.loads(line) for line in lines[2:]]
    seeded = [json.loads(value) for records in seed_records().values() for _k, value, _t in records]
    assert sorted(map(json.dumps, printed)) == sorted(map(json.dumps, seeded))
