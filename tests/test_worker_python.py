"""`streamjoin-python`, the interpreter of Spark's Python workers: pyspark from its installed
package (bytecode cached), not from the zip Spark puts first on their PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyspark

from app.spark import worker_python
from ops.worker_python import without_bundled_zips

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
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert found == pyspark.__file__
