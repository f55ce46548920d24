"""`streamjoin executor`: what an executor pod of Spark on Kubernetes runs.

Spark on Kubernetes starts each executor pod from the driver's image with the single argument
`executor` and describes the executor in environment variables; Spark's own images answer with
the `executor` branch of their `entrypoint.sh`. This is that branch for this image (whose
entrypoint is `tini -- streamjoin`): the JVM of `KubernetesExecutorBackend` with the jars of the
installed pyspark, replacing this process so that tini's signals reach it.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import NoReturn

from app.config.env import ConfigError

BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
# Set by Spark's executor pod builder (BasicExecutorFeatureStep) for every executor.
REQUIRED = (
    "SPARK_DRIVER_URL",
    "SPARK_EXECUTOR_ID",
    "SPARK_EXECUTOR_CORES",
    "SPARK_APPLICATION_ID",
    "SPARK_EXECUTOR_POD_IP",
    "SPARK_EXECUTOR_MEMORY",
)
_JAVA_OPTION = re.compile(r"SPARK_JAVA_OPT_(\d+)")


def spark_home() -> Path:
    """The installed pyspark package: it carries Spark's jars (Kubernetes' among them)."""
    spec = find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations, "pyspark is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def executor_command(env: Mapping[str, str], home: Path) -> list[str]:
    """The executor's JVM command line, as Spark's `entrypoint.sh` builds it from `env`."""
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        raise ConfigError(" / ".join(missing), "what Spark on Kubernetes sets for an executor pod")
    numbered = [
        (int(m.group(1)), value)
        for name, value in env.items()
        if (m := _JAVA_OPTION.fullmatch(name))
    ]
    java = str(Path(env["JAVA_HOME"]) / "bin" / "java") if env.get("JAVA_HOME") else "java"
    classpath = [
        env.get("SPARK_CONF_DIR") or str(home / "conf"),
        env.get("SPARK_CLASSPATH", ""),
        str(home / "jars" / "*"),
        env.get("SPARK_EXTRA_CLASSPATH", ""),
        env.get("SPARK_DIST_CLASSPATH", ""),
    ]
    memory = env["SPARK_EXECUTOR_MEMORY"]
    return [
        java,
        *(value for _, value in sorted(numbered)),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        ":".join(part for part in classpath if part),
        BACKEND,
        "--driver-url",
        env["SPARK_DRIVER_URL"],
        "--executor-id",
        env["SPARK_EXECUTOR_ID"],
        "--cores",
        env["SPARK_EXECUTOR_CORES"],
        "--app-id",
        env["SPARK_APPLICATION_ID"],
        "--hostname",
        env["SPARK_EXECUTOR_POD_IP"],
        "--resourceProfileId",
        env.get("SPARK_RESOURCE_PROFILE_ID", "0"),
        "--podName",
        env.get("SPARK_EXECUTOR_POD_NAME") or socket.gethostname(),
    ]


def run_executor(env: Mapping[str, str]) -> NoReturn:
    """Replace this process with the executor's JVM (raises `ConfigError` before, if unset)."""
    command = executor_command(env, spark_home())
    os.execvp(command[0], command)
