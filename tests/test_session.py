"""The driver's JVM: Java's C2 compiler held back from code run once a micro-batch (Spark's
planner), and an operator's own Java options kept beside the service's."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pyspark

from app.run.session import C2_LATER, session_conf

THRESHOLDS = dict(re.findall(r"-XX:(\w+)=(\d+)", C2_LATER))


def test_the_driver_compiles_with_c2_thresholds_ten_times_java_s(spark) -> None:
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    held = {name: bean.getVMOption(name).getValue() for name in THRESHOLDS}
    assert held == THRESHOLDS == {
        "Tier4InvocationThreshold": "50000", "Tier4MinInvocationThreshold": "6000",
        "Tier4CompileThreshold": "150000", "Tier4BackEdgeThreshold": "400000",
    }  # fmt: skip


def _driver_command(conf: dict[str, str]) -> list[str]:
    """The driver's Java command as Spark's launcher builds it when PySpark starts a session
    with `conf` (what `spark-submit` runs; `spark-class` reads it from the launcher, run by the
    Java it finds as `spark-class` does)."""
    home = Path(pyspark.__file__).parent
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else "java"
    settings = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
    printed = subprocess.run(
        [java, "-Xmx128m", "-cp", f"{home / 'jars'}/*", "org.apache.spark.launcher.Main",
         "org.apache.spark.deploy.SparkSubmit", "--master", "local", *settings, "pyspark-shell"],
        env={**os.environ, "SPARK_HOME": str(home), "SPARK_SCALA_VERSION": "2.13"},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return printed.split("\0")


def test_an_operators_java_options_come_after_the_services_so_theirs_win() -> None:
    operator = "-XX:Tier4InvocationThreshold=7 -Dsomething=1"
    command = _driver_command(session_conf({"spark.driver.extraJavaOptions": operator}, None))
    ours = [f"-XX:{name}={value}" for name, value in THRESHOLDS.items()]
    assert all(flag in command for flag in ours)
    assert command.index(ours[-1]) < command.index("-XX:Tier4InvocationThreshold=7")
    assert "-Dsomething=1" in command
