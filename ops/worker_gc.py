"""Garbage-collector settings for Python workers: the join processors, the decoder, the Kafka
source and sink.

- Rare young collections. A join processor unpickles, grows and pickles large graphs of small
  objects (cached rows and their containers) in every micro-batch. With CPython's default
  thresholds, the allocations trigger collections of the older generations over and over, each
  walking every live object: measured on 100,000 keys, unpickling a batch's state took 3.5 s
  with them and 0.18 s without, and joining the rows 1.9 s against 0.57 s. The state holds no
  reference cycles (reference counting frees it), so collections are made rare, not switched
  off.
- What lives before a task is frozen (`gc.freeze`). pyspark's worker daemon runs a full
  collection after every task of a reused worker, which walks every object the worker holds,
  its imported modules (pandas, pyarrow, pyspark: ~95,000 objects) first: 50 ms a task on these
  machines, and in a 200,000-row `side_by_side.py` run the workers spent 32 s of their ~110 s
  of CPU in it (py-spy). Frozen objects are skipped by collections (reference counting still
  frees them); only cycles among them would stay, and the daemon has just collected the last
  task's.
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
