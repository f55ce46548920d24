"""A stopping service's Kafka sources: drained, then holding the query where a stop is safe.

The service stops its query between two micro-batches (`app.run.lifecycle`): one it stopped
mid-way stays planned in the checkpoint, and its tasks are killed as they write. Once the
drain marker exists, a source's `latestOffset` offers no more records. That alone leaves a
query on the wall clock (a state TTL, a processing-time join) without a gap to stop in: Spark
plans a batch at every trigger for its timers, back to back. So a drained source also holds
the trigger that asks it for offsets: nothing of the next batch is planned while it holds.
It says so by a file beside the marker, named by its process (each input is planned by a
Python process of its own), and holds until the service releases it, once the query's stop
has begun: the query's thread then leaves the trigger at its next step instead of running
a batch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ops.processes import running

# A hold that no stop came for (the service's supervising thread gone) ends after this; the
# next trigger holds again.
HOLD_LIMIT_S = 30.0
_POLL_S = 0.01


def draining(marker: str | None) -> bool:
    """Whether the service is stopping: the sources offer no more records."""
    return marker is not None and os.path.exists(marker)


def hold(marker: str) -> None:
    """Hold the trigger that asks this source for offsets until `release`, marked as holding."""
    own = Path(marker).with_name(f"holding-{os.getpid()}")
    own.touch()
    try:
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not _released(Path(marker)).exists() and time.monotonic() < deadline:
            time.sleep(_POLL_S)
    finally:
        own.unlink(missing_ok=True)


def holding(marker: Path) -> bool:
    """Whether a source holds the query's trigger. A mark whose process is gone (a source's
    process killed) is removed, not counted."""
    for mark in marker.parent.glob("holding-*"):
        pid = mark.name.removeprefix("holding-")
        if pid.isdigit() and running(int(pid)):
            return True
        mark.unlink(missing_ok=True)
    return False


def release(marker: Path) -> None:
    """End every hold, and every hold to come."""
    _released(marker).touch()


def _released(marker: Path) -> Path:
    return marker.with_name("released")
