"""`streamjoin-python`, the interpreter of Spark's Python workers: pyspark from its installed
package (bytecode cached), not from the zip Spark puts first on their PYTHONPATH; the workers are
forked from one daemon that imported the service's modules, the driver's Python processes from
a fork server that imported theirs."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyspark
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from app.run.session import worker_python
from ops.processes import python_module
from ops.worker.forkserver import FORKSERVER
from ops.worker.interpreter import without_bundled_zips
from tests.service import user_folder_shadowing_the_service

LIB = Path(pyspark.__file__).parent / "python" / "lib"


def test_workers_import_pyspark_from_the_installed_package_and_keep_other_paths(
    tmp_path: Path,
) -> None:
    zips = sorted(str(z) for z in LIB.glob("*.zip"))
    assert zips, "the pyspark package ships its zips"
    other = tmp_path / "elsewhere.zip"
    python_path = os.pathsep.join([*zips, str(other), str(tmp_path)])
    assert without_bundled_zips(python_path) == os.pathsep.join([str(other), str(tmp_path)])

    env = {**os.environ, "PYTHONPATH": python_path}
    found = subprocess.run(
        [worker_python(), "-c", "import pyspark; print(pyspark.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert found == pyspark.__file__


def test_the_services_python_processes_import_its_code_from_any_directory(tmp_path: Path) -> None:
    """Spark's workers (`-m module` through `streamjoin-python`) and the service's own Python
    processes (the fork server, the keeper of warm state, the class archive's recorder) start
    in the user's directory; a folder there named like one of the service's packages is not
    what they import."""
    folder = user_folder_shadowing_the_service(tmp_path)
    for command in ([worker_python(), "-m", "ops.processes"], python_module("ops.processes")):
        ran = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
        assert ran.returncode == 0, ran.stderr[-2000:]


def _worker_facts(_: int) -> tuple[str, bool]:
    """In a Spark task: what forked this worker, and whether the lookup join's module was
    imported before the task asked for it."""
    import sys

    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return parent, "app.run.lookups" in sys.modules


def test_workers_are_forked_with_the_service_modules_already_imported(spark) -> None:
    parent, preloaded = spark.sparkContext.parallelize([0], 1).map(_worker_facts).collect()[0]
    assert "-m app.run.worker_daemon" in parent
    assert preloaded


def _daemon_of_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"daemon": [os.getppid()]})


class DaemonOfGroups(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Any:
        for _ in rows:
            pass
        yield pd.DataFrame({"daemon": [os.getppid()]})


def test_stateful_stages_fork_their_workers_from_the_daemon_the_sources_use(spark) -> None:
    """One daemon for every worker a query runs: a second one would import the service's
    modules again and fork its workers during the first micro-batch."""
    (arrow,) = spark.range(1).mapInArrow(_daemon_of_batches, "daemon long").collect()
    (stateful,) = (
        spark.range(1)
        .groupBy("id")
        .transformWithStateInPandas(DaemonOfGroups(), "daemon long", "Append", "None")
        .collect()
    )
    assert stateful.daemon == arrow.daemon


class RowsOfGroups(StatefulProcessor):
    """Each group's key, the kind of object its rows come in, and its values."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Any:
        chunks = list(rows)
        values = [v for chunk in chunks for v in chunk.column("v").to_pylist()]
        yield pd.DataFrame(
            {"key": [key[0]], "kinds": [type(chunks[0]).__name__], "values": [sorted(values)]}
        )


def test_a_stateful_stage_takes_each_groups_rows_as_arrow_slices_a_group_once(spark) -> None:
    """The service's workers hand a group's rows to the processor as slices of Spark's Arrow
    batches (`state.spark.arrow_groups`), not as pandas DataFrames built a row at a time; a
    group split over several batches (two rows a batch here) is still one call with all its
    rows."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        found = (
            spark.range(9)
            .selectExpr("id % 3 AS k", "id AS v")
            .groupBy("k")
            .transformWithStateInPandas(
                RowsOfGroups(), "key long, kinds string, values array<long>", "Append", "None"
            )
            .collect()
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert sorted((r.key, r.kinds, r["values"]) for r in found) == [
        (0, "RecordBatch", [0, 3, 6]),
        (1, "RecordBatch", [1, 4, 7]),
        (2, "RecordBatch", [2, 5, 8]),
    ]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _until(condition: Any, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_drivers_python_processes_are_forked_by_the_sessions_fork_server(tmp_path) -> None:
    """What Spark starts in the driver (here pyspark's daemon of a data source step, as Spark
    starts it) runs as a child of the fork server, with the caller's streams and environment;
    closing its input ends it as Spark ends it, with the exit code it has started as a new
    interpreter; killing its caller ends it; the server ends, its socket removed, when its
    session's process does."""
    path = tmp_path / "forkserver"
    server = subprocess.Popen(
        [sys.executable, "-m", "ops.worker.forkserver", str(path)], stdin=subprocess.PIPE
    )
    command = [worker_python(), "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"]
    own = {k: v for k, v in os.environ.items() if k != FORKSERVER}  # not the tests' session's
    env = {**own, FORKSERVER: str(path)}
    # pyspark's daemon, its input closed, exits with 1 (its `finally` overrides its exit 0)
    alone = subprocess.run(command, input=b"", env=own, capture_output=True, check=False)
    try:
        _until(path.exists, "the fork server never listened", 60)
        for end in ("input closed", "caller killed"):
            daemon = subprocess.Popen(
                command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert daemon.stdout is not None and daemon.stdin is not None
            (port,) = struct.unpack("!i", daemon.stdout.read(4))  # as it tells Spark
            assert 0 < port < 65536
            (child,) = _children(server.pid)
            forked = Path(f"/proc/{child}/cmdline").read_bytes()  # the server's, as forked
            assert b"ops.worker.forkserver" in forked, forked
            if end == "input closed":
                daemon.stdin.close()
                assert daemon.wait(30) == alone.returncode
            else:
                daemon.kill()
                daemon.wait(30)
            _until(lambda: not _children(server.pid), f"the daemon outlived its {end}")
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(30)
    assert not path.exists()
