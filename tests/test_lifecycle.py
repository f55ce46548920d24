"""When a run stops: with nothing more to read (available-now on the wall clock), or asked to,
once its drained sources hold the trigger."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from app.run.lifecycle import supervise
from serdes.kafka.drain import draining, hold, holding

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


class HeldTrigger(BatchesInTurn):
    """A query whose trigger stays active after its batches: a drained source holds it."""

    def __init__(self, marker: Path) -> None:
        super().__init__([(3, NEWER, NEWER)])
        self.status = {"isTriggerActive": True}
        self.marker = marker
        self.released_at_stop: bool | None = None

    def stop(self) -> None:
        self.released_at_stop = self.marker.with_name("released").exists()
        super().stop()


def test_a_stop_waits_for_a_drained_source_to_hold_the_trigger_and_then_releases_it(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "draining"
    query = HeldTrigger(marker)
    source = threading.Thread(target=lambda: (wait_for_marker(marker), hold(str(marker))))
    source.start()
    stop = threading.Event()
    stop.set()
    assert supervise(query, stop, marker, grace_s=60) == 0  # type: ignore[arg-type]
    source.join(5)
    assert query.stopped_after == 3
    assert query.released_at_stop is False  # held while the stop began
    assert not source.is_alive()  # and released once it had
    assert not holding(marker)


def test_a_hold_marked_by_a_process_that_is_gone_does_not_count(tmp_path: Path) -> None:
    marker = tmp_path / "draining"
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / f"holding-{gone.pid}").touch()
    assert not holding(marker)
    assert not (tmp_path / f"holding-{gone.pid}").exists()


def wait_for_marker(marker: Path) -> None:
    while not draining(str(marker)):
        time.sleep(0.01)
