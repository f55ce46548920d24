"""The JVM class archive (AppCDS) of the services the tests start: recorded once per test run by
the service's own recorder (`app.class_archive`), it saves each `streamjoin run` several
seconds of its JVM's and SparkSession's start (`docs/performance.md`), and the suite starts
dozens. Given to every service through its own setting, JVM_CLASS_ARCHIVE_DIR: no service
records one of its own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.class_archive import OFF

_recorded: list[Path] = []


def record_once(folder: Path) -> None:
    """Record the archive in `folder`, unless this test run has one: the first test that runs
    Spark asks for it (`conftest.py`)."""
    if not _recorded:
        subprocess.run(
            [sys.executable, "-m", "app.class_archive", str(folder)],
            check=True,
            capture_output=True,
            timeout=600,
        )
        (archive,) = folder.glob("*.jsa")
        _recorded.append(archive)


def recorded() -> Path | None:
    """The test run's archive, once recorded."""
    return _recorded[0] if _recorded else None


# A test's service lives for seconds over a few hundred rows, and the tests' own session runs
# hundreds of such queries: the JIT's optimizing compiler (C2) would spend more of the two cores
# compiling than its code saves. An operator's service, up for months, keeps the JVM's default.
# Without C2 the JVM reserves only 48 MB for compiled code, and the tests' session, compiling each
# query's generated classes, fills more than that: the tiered default's room (240 MB) is kept.
SHORT_LIVED = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def driver_options(short_lived: bool) -> dict[str, str]:
    """The variables that give a test's service the archive, once recorded (none before: no
    test writes to the user's cache), and the options of a short-lived JVM if it is one."""
    archive = recorded()
    variables = {"JVM_CLASS_ARCHIVE_DIR": str(archive.parent) if archive else OFF}
    if short_lived:
        variables["SPARK_CONF_SPARK_DRIVER_EXTRAJAVAOPTIONS"] = SHORT_LIVED
    return variables
