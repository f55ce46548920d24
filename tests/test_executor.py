"""`streamjoin executor`: the image's answer to Spark on Kubernetes starting an executor pod."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.config.env import ConfigError
from app.run.executor import BACKEND, executor_command
from tests.service import streamjoin_command
from tests.spark_cluster import StandaloneCluster

POD = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@sj-0.sj-driver.ns.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_APPLICATION_ID": "spark-a1",
    "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
    "SPARK_EXECUTOR_MEMORY": "4g",
    "SPARK_EXECUTOR_POD_NAME": "sj-exec-3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_JAVA_OPT_10": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_2": "-Xss4m",
    "JAVA_HOME": "/usr/lib/jvm/java-17",
}


def test_the_executor_jvm_is_started_as_sparks_own_images_start_it() -> None:
    command = executor_command(POD, Path("/opt/pyspark"))
    assert command[:5] == [
        "/usr/lib/jvm/java-17/bin/java",
        "-Xss4m",
        "-Dspark.driver.port=7078",
        "-Xms4g",
        "-Xmx4g",
    ]  # options in their numbered order
    assert command[5:7] == ["-cp", "/opt/pyspark/conf:/opt/pyspark/jars/*"]
    assert command[7] == BACKEND
    flags = dict(zip(command[8::2], command[9::2], strict=True))
    assert flags == {
        "--driver-url": POD["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "2",
        "--app-id": "spark-a1",
        "--hostname": "10.0.0.7",
        "--resourceProfileId": "0",
        "--podName": "sj-exec-3",
    }


def test_an_executor_without_sparks_environment_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="SPARK_DRIVER_URL / SPARK_EXECUTOR_ID"):
        executor_command({}, Path("/opt/pyspark"))
    result = subprocess.run(
        [*streamjoin_command(), "executor"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "streamjoin: SPARK_DRIVER_URL / SPARK_EXECUTOR_ID / SPARK_EXECUTOR_CORES / "
        "SPARK_APPLICATION_ID / SPARK_EXECUTOR_POD_IP / SPARK_EXECUTOR_MEMORY: expected what "
        "Spark on Kubernetes sets for an executor pod; it is not set"
    ]


@pytest.mark.spark
def test_an_executor_started_by_streamjoin_executor_runs_a_drivers_python_tasks(
    tmp_path: Path,
) -> None:
    """No Kubernetes here: a standalone master with no workers leaves the driver with only the
    executor that `streamjoin executor` starts from a pod's environment."""
    with StandaloneCluster(tmp_path / "cluster", workers=0) as cluster:
        result = subprocess.run(
            [sys.executable, "-m", "tests.executor_driver", cluster.url],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.stdout.splitlines() == ["sum=9900 block-managers=2"], result.stderr[-3000:]
