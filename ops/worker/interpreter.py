"""`streamjoin-python`: the interpreter Spark starts its Python workers with. It is this
environment's Python, importing pyspark and py4j from their installed packages rather than from
the zips Spark puts first on every worker's PYTHONPATH, and the service's code from this
environment too, never from the directory Spark starts it in (`ops.processes.SAFE_PATH`).

Python compiles what it imports from a zip at every start (it never caches bytecode there), and
Spark starts some twenty Python processes per query (a daemon per worker kind, its workers, the
source runners): importing pyspark from `pyspark.zip` was over a third of all their CPU, most
of it before the first output (`docs/performance.md`).
When a zip is the one the installed pyspark package ships, the same modules are on `sys.path`
anyway, with their cached bytecode; only those zips are dropped, so a Spark installed elsewhere
keeps its own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

from ops.processes import SAFE_PATH


def _bundled(path: str) -> bool:
    """Whether `path` is a zip inside a pyspark package this interpreter imports from
    (`<site-packages>/pyspark/python/lib/*.zip`)."""
    package = Path(path).parent.parent.parent
    return (
        path.endswith(".zip")
        and package.name == "pyspark"
        and (package / "__init__.py").is_file()
        and str(package.parent) in sys.path
    )


def without_bundled_zips(python_path: str) -> str:
    return os.pathsep.join(p for p in python_path.split(os.pathsep) if p and not _bundled(p))


def main() -> NoReturn:
    env = dict(os.environ)
    env["PYTHONPATH"] = without_bundled_zips(env.get("PYTHONPATH", ""))
    args = sys.argv[1:]
    if args[:1] == ["-m"]:  # a module: one the driver's fork server runs?
        from ops.worker import forkserver

        server = env.get(forkserver.FORKSERVER)
        if server and forkserver.served(args):
            code = forkserver.request(server, args, env)
            if code is not None:
                sys.exit(code)
    os.execve(sys.executable, [sys.executable, SAFE_PATH, *args], env)
