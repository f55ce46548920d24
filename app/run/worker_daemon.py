"""The daemon Spark forks its Python workers from (`spark.python.daemon.module`): pyspark's own,
with the modules every worker imports already imported, so that a new worker starts with them.

A worker that runs its first task imports pyspark's worker, pyarrow, pandas and the modules of
the function it runs: about a second (`docs/performance.md`). Spark forks workers as a query
needs them, and a micro-batch's stages share them, so each worker pays this once, mostly before
and during the first batches and on the CPU the running ones need. Forked from a daemon that
imported them, a worker shares the modules' pages and starts at once.

Its workers hand a stateful stage's rows to the frame as slices of Arrow batches, not pyspark's
pandas DataFrames built row by row (`state.spark.arrow_groups`). It also starts the keeper of
the executor's warm state (`state.store.keeper`) and tells the workers it forks where it
listens.

pyspark's daemon imports the worker module after the fork because "pandas and pyarrow start
some threads when they are imported", and a fork copies no thread. After these imports two run:
pyarrow's bundled jemalloc's background purging thread (jemalloc's own `pthread_atfork`
handlers take its locks across a fork; pyarrow's default pool here is mimalloc anyway) and
OpenBLAS's worker (numpy; OpenBLAS re-creates its pool in a child). `gc.freeze` keeps the
imported objects out of every collection, so no child writes to their pages to walk them.
"""

from __future__ import annotations

import gc
import importlib
import os

from state.spark.arrow_groups import install
from state.store.keeper import KEEPER_SOCKET, start

# What the service's workers import: the source and sink, the decoders, the join processors,
# the lookup join and its client, and pandas, which pyspark's worker imports for a stateful
# stage; pyarrow comes with them.
PRELOADED = ("pyspark.worker", "app.run.builder", "app.run.lookups", "asyncpg", "pandas")


def main() -> None:
    os.environ[KEEPER_SOCKET] = start()
    for module in PRELOADED:
        importlib.import_module(module)
    install()  # a stateful stage's rows reach its frame as Arrow slices
    gc.freeze()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
