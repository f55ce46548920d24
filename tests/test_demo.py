"""The README's first command: `streamjoin demo` runs the seed's temporal join through Kafka."""

from __future__ import annotations

import subprocess

import pytest

from tests.service import service_env, streamjoin_command

pytestmark = pytest.mark.spark

SEED_TABLE = [
    "o_001 00:01:00 scooter    00:01:00 11.11",
    "o_002 00:03:00 basketball 00:02:00 23.11",
    "o_003 12:00:00 scooter    12:00:00 12.99",
    "o_004 12:00:00 basketball 12:00:00 19.99",
    "o_005 18:00:00 NULL       NULL     NULL",
]


def test_demo_prints_the_seeds_temporal_join_table_and_exits() -> None:
    env = service_env()
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    result = subprocess.run(
        [*streamjoin_command(), "demo"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("streamjoin demo: embedded Kafka-protocol broker at 127.0.0.1:")
    assert "FOR SYSTEM_TIME AS OF L.order_time" in lines[1]
    assert [line.strip() for line in lines[2:7]] == SEED_TABLE
    assert lines[7].startswith("streamjoin demo: metrics were served at http://127.0.0.1:")
    assert len(lines) == 8
    noise = [line for line in result.stderr.splitlines()
             if "Python worker" in line or "log4j" in line or "setLogLevel" in line]  # fmt: skip
    assert noise == []
