"""`streamjoin-python`, the interpreter of Spark's Python workers: pyspark from its installed
package (bytecode cached), not from the zip Spark puts first on their PYTHONPATH; the workers are
forked from one daemon that imported the service's modules."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyspark
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from app.run.session import worker_python
from ops.worker.interpreter import without_bundled_zips

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
