"""A JVM class archive (AppCDS) for the services the tests start: recorded once per test run,
it saves each `streamjoin run` about 9 s of its JVM's and SparkSession's start
(`docs/performance.md`), and the suite starts dozens.

Recorded by a short replay in a JVM of its own (`-XX:ArchiveClassesAtExit`, written as that JVM
exits), then given to every service's driver (`-XX:SharedArchiveFile`, through
SPARK_CONF_SPARK_DRIVER_EXTRAJAVAOPTIONS as an operator would). A JVM that cannot use it (another
Java, another class path) starts without it; the JVM's own notes on that are turned off, so a
service's output is what it would be without the archive.

Usage: python -m tests.class_archive PATH
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPLAYED = Path(__file__).parent / "fixtures" / "oracle" / "a_regular.json"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_recorded: list[Path] = []


def record_once(folder: Path) -> None:
    """Record the archive in `folder`, unless this test run has one: the first test that runs
    Spark asks for it (`conftest.py`)."""
    if not _recorded:
        path = folder / "driver.jsa"
        subprocess.run(
            [sys.executable, "-m", "tests.class_archive", str(path)],
            check=True,
            capture_output=True,
            timeout=600,
        )
        _recorded.append(path)


# A test's service lives for seconds over a few hundred rows, and the tests' own session runs
# hundreds of such queries: the JIT's optimizing compiler (C2) would spend more of the two cores
# compiling than its code saves. An operator's service, up for months, keeps the JVM's default.
SHORT_LIVED = "-XX:TieredStopAtLevel=1"


def driver_options(short_lived: bool) -> dict[str, str]:
    """The variables that give a test's service the archive, once recorded, and the options of
    a short-lived JVM if it is one. Outside the test suite (the benchmarks), none."""
    if not _recorded:
        return {}
    options = [f"-XX:SharedArchiveFile={_recorded[0]} -Xshare:auto {QUIET}"]
    if short_lived:
        options.append(SHORT_LIVED)
    return {"SPARK_CONF_SPARK_DRIVER_EXTRAJAVAOPTIONS": " ".join(options)}


def record(path: Path) -> None:
    """Run a replay case in a JVM that writes the classes it loaded to `path` as it exits."""
    from app.replay import run_case
    from app.run.session import build_session

    options = f"-XX:ArchiveClassesAtExit={path} {QUIET}"
    spark = build_session("local[2]", {"spark.driver.extraJavaOptions": options})
    with tempfile.TemporaryDirectory() as work:
        run_case(spark, json.loads(REPLAYED.read_text())["cases"][0], Path(work))
    jvm = spark.sparkContext._gateway.proc  # type: ignore[attr-defined]
    spark.stop()
    jvm.stdin.close()  # the JVM exits when its Python closes its input
    jvm.wait(300)


if __name__ == "__main__":
    record(Path(sys.argv[1]))
