"""When a run with nothing more to read stops (available-now on the wall clock)."""

from __future__ import annotations

import threading
from pathlib import Path

from app.run.lifecycle import supervise

OFFSETS = '{"orders": {"0": 2}}'
NEWER = '{"orders": {"0": 5}}'


class BatchesInTurn:
    """A running query's surface as `supervise` reads it: one more batch's progress each time
    it is awaited, and which batch was the last when it was stopped."""

    def __init__(self, batches: list[tuple[int, str, str]]) -> None:
        self.batches = batches  # (batch id, start offsets, end offsets), in turn
        self.done = 0
        self.isActive = True
        self.status = {"isTriggerActive": False}
        self.stopped_after: int | None = None

    def awaitTermination(self, _timeout: float) -> None:
        self.done = min(self.done + 1, len(self.batches))

    @property
    def lastProgress(self) -> dict | None:
        if not self.done:
            return None
        batch, start, end = self.batches[self.done - 1]
        return {
            "batchId": batch,
            "numInputRows": 0,
            "timestamp": "2026-12-02T00:00:00.000Z",
            "sources": [{"startOffset": start, "endOffset": end}],
        }

    def stop(self) -> None:
        self.stopped_after = self.batches[self.done - 1][0]
        self.isActive = False

    def exception(self) -> None:
        return None


def test_a_batch_left_planned_by_the_last_run_does_not_end_a_restart(tmp_path: Path) -> None:
    """Batch 7, planned by the last run as it drained, is run again first and reads nothing:
    the restart must still read what came since (batch 8) before it stops on a dry batch."""
    query = BatchesInTurn([(7, OFFSETS, OFFSETS), (8, OFFSETS, NEWER), (9, NEWER, NEWER)])
    code = supervise(query, threading.Event(), tmp_path / "draining", until_dry_from=8)  # type: ignore[arg-type]
    assert code == 0
    assert query.stopped_after == 9


def test_a_run_stops_at_its_first_own_batch_with_nothing_new(tmp_path: Path) -> None:
    query = BatchesInTurn([(8, OFFSETS, OFFSETS), (9, OFFSETS, NEWER)])
    supervise(query, threading.Event(), tmp_path / "draining", until_dry_from=8)  # type: ignore[arg-type]
    assert query.stopped_after == 8
    assert (tmp_path / "draining").exists()  # the sources were drained first
