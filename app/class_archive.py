"""The driver JVM's class archive (AppCDS): the classes a start loads, mapped from one file
instead of read out of Spark's jars and verified one by one, which is most of what the JVM's
and the SparkSession's start cost (`docs/performance.md`).

Java 17 records an archive as a JVM exits (`-XX:ArchiveClassesAtExit`) and maps it at a later
start (`-XX:SharedArchiveFile`). Recording makes that JVM's own start and exit much slower, so
the service never records in its own JVM: a start that finds no archive for its Java and Spark
(a file of JVM_CLASS_ARCHIVE_DIR named after them) has one recorded beside it, by a process of
the lowest priority that runs a small join and exits (`python -m app.class_archive DIR`, the
image's build runs it too), and the starts after it map it. The archive is written under a name
of its own and renamed into place once whole, so that no start maps half an archive. A JVM that
cannot use an archive (another build of Java, another class path) starts without it, and the
JVM's notes on archives are turned off, so the service's output is the same either way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyspark

from app.config.env import SHUFFLE_PARTITIONS
from app.jars import user_cache
from ops.processes import python_module, running

OFF = "off"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# Options a user gave that already choose an archive: theirs is kept, the service adds none.
_CHOSEN = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare:off")
# The JVM writes the archive as it exits; the recorder waits this long for it.
WRITE_TIMEOUT_S = 300.0
# A recorder's files older than this are those of one that died, even if its process id is
# in use again: another may start.
RECORDING_LIMIT_S = 900.0
# What the recording runs: a regular join of two changelogs, its state in RocksDB.
RECORDED_CASE: dict[str, Any] = {
    "id": "class_archive",
    "streams": {
        "orders": {
            "fields": [["order_id", "STRING"], ["product_id", "STRING"]],
            "rows": [
                {"op": "+I", "v": ["o1", "p1"]},
                {"op": "-U", "v": ["o1", "p1"]},
                {"op": "+U", "v": ["o1", "p2"]},
            ],
        },
        "products": {
            "fields": [["product_id", "STRING"], ["price", "DOUBLE"]],
            "rows": [{"op": "+I", "v": ["p1", 10.0]}, {"op": "-D", "v": ["p1", 10.0]}],
        },
    },
    "join": {
        "type": "regular",
        "kind": "LEFT",
        "left": "orders",
        "right": "products",
        "on": "L.product_id = R.product_id",
    },
}


def _java() -> Path | None:
    """The `java` pyspark starts: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_name() -> str | None:
    """The archive's file name, from this Java's binary and pyspark's version: an archive fits
    one build of Java and one class path, and a Java or Spark upgraded records one anew. None
    without a Java to name it by."""
    java = _java()
    if java is None:
        return None
    made = java.stat()
    named = f"{java}|{made.st_size}|{made.st_mtime_ns}|{pyspark.__version__}"
    return f"driver-{hashlib.sha256(named.encode()).hexdigest()[:16]}.jsa"


def default_folder() -> Path:
    """The user's cache (`/tmp` in the Helm chart's pods: it outlives a container's restart)."""
    return user_cache() / "jvm"


class ClassArchive:
    """The archive a driver starts from, and how one is recorded."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marker = path.with_name(f".{path.name}.recording")

    def conf(self, conf: dict[str, str]) -> dict[str, str]:
        """`conf` with the driver mapping the archive, if there is one and `conf` chooses none."""
        given = conf.get(JAVA_OPTIONS, "")
        if not self.path.is_file() or any(option in given for option in _CHOSEN):
            return conf
        options = f"-XX:SharedArchiveFile={self.path} -Xshare:auto {QUIET}"
        return conf | {JAVA_OPTIONS: f"{given} {options}".strip()}

    def record_later(self) -> subprocess.Popen[bytes] | None:
        """Have the archive recorded by a process of its own (returned), unless it is there, one
        is being recorded (its marker file, see `abandoned`) or the folder cannot be
        written."""
        if self.path.is_file():
            return None
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            marker = self.marker
            if marker.exists() and abandoned(marker):
                marker.unlink()
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))  # one recorder
            recorder = subprocess.Popen(
                python_module(__name__, str(self.path.parent)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # the service's stop does not stop it
            )
            marker.write_text(str(recorder.pid))
            return recorder
        return None

    def record(self) -> None:
        """Record the archive: a session whose JVM writes it as it exits, after a small join
        that loads the classes a service's start loads; then the marker is removed."""
        from app.replay import run_case
        from app.run.session import build_session, quiet_shutdown

        for left in self.path.parent.glob(f".{self.path.name}.*[0-9]"):
            if abandoned(left):
                left.unlink(missing_ok=True)  # half an archive, its recorder killed
        recording = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        options = f"-XX:ArchiveClassesAtExit={recording} {QUIET}"
        try:
            spark = build_session("local[2]", {JAVA_OPTIONS: options, SHUFFLE_PARTITIONS: "2"})
            with tempfile.TemporaryDirectory() as work:
                run_case(spark, RECORDED_CASE, Path(work))
            jvm = spark.sparkContext._gateway.proc  # type: ignore[attr-defined]
            quiet_shutdown(spark)
            spark.stop()
            jvm.stdin.close()  # the JVM exits once its input closes, and writes the archive then
            if jvm.wait(WRITE_TIMEOUT_S) == 0 and recording.is_file():
                recording.replace(self.path)
        finally:
            recording.unlink(missing_ok=True)
            self.marker.unlink(missing_ok=True)


def abandoned(path: Path) -> bool:
    """Whether a recorder's file (its marker, holding its process id, or its half-written
    archive, named after it) is that of a recorder no longer running: its process is gone, or
    it is older than `RECORDING_LIMIT_S`. A recorder is killed with the service that spawned it
    under a supervisor that stops a whole process tree; its files must not hold off the next."""
    try:
        if time.time() - path.stat().st_mtime > RECORDING_LIMIT_S:
            return True
        pid = path.read_text().strip() if path.name.endswith(".recording") else path.suffix[1:]
    except (OSError, UnicodeDecodeError):  # gone meanwhile, or not a marker's text
        return False
    if not pid.isdigit():
        return False  # a marker whose recorder is still being started
    return not running(int(pid))


def for_setting(value: str | None) -> ClassArchive | None:
    """The archive in the folder JVM_CLASS_ARCHIVE_DIR names (unset: the user's cache); `off`,
    or no Java found: None."""
    name = None if value is not None and value.lower() == OFF else archive_name()
    if name is None:
        return None
    return ClassArchive((Path(value) if value else default_folder()) / name)


if __name__ == "__main__":
    # python -m app.class_archive DIR: record the archive of this Java and Spark in DIR,
    # at the lowest priority (beside a running service, it takes what the service leaves)
    os.nice(19)
    folder = Path(sys.argv[1])
    archive = for_setting(str(folder))
    if archive is not None and not archive.path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        archive.record()
