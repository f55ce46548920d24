"""Garbage-collector settings for Python workers: the join processors, the decoder, the Kafka
source and sink.

- Rare young collections. A join processor unpickles, grows and pickles large graphs of small
  objects (cached rows and their containers) in every micro-batch. With CPython's default
  thresholds, the allocations trigger collections of the older generations over and over, each
  walking every live object, which made unpickling a batch's state and joining its rows
  several times slower (`docs/performance.md`). The state holds no reference cycles (reference
  counting frees it), so collections are made rare, not switched off.
- What lives before a task is frozen (`gc.freeze`). pyspark's worker daemon runs a full
  collection after every task of a reused worker, which walks every object the worker holds,
  its imported modules (pandas, pyarrow, pyspark) first: a fixed cost every task that added up
  to a large share of the workers' CPU (`docs/performance.md`). Frozen objects are skipped by
  collections (reference counting still frees them); only cycles among them would stay. The
  daemon has just collected the last task's garbage, and a processor lets go of its task's
  state when the task closes; but what a task made before its processor's `init` (pyspark's
  state client and handle) is frozen with the rest: nothing there may sit in a reference
  cycle, or it is never freed (`state.spark.deferred` holds pyspark's objects weakly for that).
"""

from __future__ import annotations

import gc

THRESHOLDS = (200_000, 50, 1_000)


def settle_worker() -> None:
    """Call at the start of each task: rare young collections, and everything alive now left
    out of every later collection."""
    if gc.get_threshold() != THRESHOLDS:
        gc.set_threshold(*THRESHOLDS)
    gc.freeze()
