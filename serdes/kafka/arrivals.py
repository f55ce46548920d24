"""A back-to-back trigger that waits at the broker when nothing is new, not in a busy loop.

Back to back (`TRIGGER_INTERVAL=0`), Spark plans the next micro-batch as soon as the last one
ends, and when no input has anything new it asks every source again 10 ms later: on a quiet
topic the driver and its Python source processes spin. A fixed interval spares that, and makes
every record wait for the next trigger. So one input's reader (the `waitfor` option) holds a
trigger that found nothing new on any input until a record is committed to one of them, or its
wait (a second by default) has passed: a record is planned within milliseconds of being
readable, and an idle service asks the broker about once a wait. The wait is a fetch at the
ends `ListOffsets` gave (`read_committed`: ends where committed records stop), which the broker
answers as soon as it holds a record past them.

The wait never changes what a micro-batch reads, only when it is planned: offsets are still
each reader's own `ListOffsets`. A trigger after one whose wait was cut short by a record does
not wait (the ends moved), nor does one that finds the ends moved since the last wait (a
micro-batch read them, or more came), nor one where another input's reader left records
unread at its last plan (`Backlogs`: a read limit leaves the rest of a backlog to the next
micro-batches while the ends stand still). Spark runs a batch without records after one that
moved the watermark, and at each trigger of a job on the wall clock: with no record coming,
those come a wait apart (`app.run.operators.idle_wait_ms` says how long for a job).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ops.processes import running
from serdes.kafka.client_log import logged
from serdes.kafka.drain import draining
from serdes.kafka.offsets import PartitionBounds, TopicMissingError

IDLE_WAIT_MS = 1000  # the longest a trigger waits for a record, unless told otherwise
_SLICE_S = 0.1  # how often the wait looks for the service's drain marker

Ends = dict[str, dict[int, int]]  # topic -> partition -> end offset


class Backlogs:
    """Which readers of a query left records unread at their last plan, for the reader that
    holds a quiet trigger: each input is planned by a Python process of its own, so each
    reader marks it by a file of its own (named by its process) in a folder they share."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self._left: bool | None = None

    @property
    def _own(self) -> Path:
        # named where it is used: the reader that holds this is pickled to its process first
        return self.folder / f"backlog-{os.getpid()}"

    def mark(self, left: bool) -> None:
        """Whether this reader's plan left records unread (written only when that changes)."""
        if left != self._left:
            if left:
                self._own.touch()
            else:
                self._own.unlink(missing_ok=True)
            self._left = left

    def any(self) -> bool:
        """Whether some reader left records unread at its last plan. A mark whose process is
        gone (a reader killed: Spark starts another) is removed, not counted: it would keep
        every quiet trigger from waiting, the driver asking the broker every 10 ms."""
        for mark in self.folder.glob("backlog-*"):
            pid = mark.name.removeprefix("backlog-")
            if not pid.isdigit() or running(int(pid)):
                return True
            mark.unlink(missing_ok=True)
        return False


class Arrivals:
    """Waits, on the driver, for the next record committed to any of `topics`; the reader
    that holds it gives its own topic's ends, listed already, and the others' are listed here
    (`PartitionBounds`, from `ListOffsets`)."""

    def __init__(
        self,
        topics: list[str],
        client_config: dict[str, str],
        drain_marker: str | None,
        wait_ms: int = IDLE_WAIT_MS,
        backlogs: Backlogs | None = None,
    ) -> None:
        self.topics = topics
        self.backlogs = backlogs  # the query's readers' marks, when they share a folder
        self.wait_s = wait_ms / 1000
        self.client_config = client_config
        self.drain_marker = drain_marker
        self._consumer: Consumer | None = None
        self._bounds: dict[str, PartitionBounds] = {}
        self._last: Ends = {}

    @property
    def consumer(self) -> Consumer:
        # Made on first use: the reader that holds this is pickled to the driver's worker first.
        if self._consumer is None:
            self._consumer = Consumer(
                logged(
                    {
                        **self.client_config,
                        "group.id": "streamjoin-arrivals",
                        "enable.auto.commit": False,
                        "isolation.level": "read_committed",
                        "fetch.wait.max.ms": 100,
                        "fetch.queue.backoff.ms": 1,
                    }
                )
            )
        return self._consumer

    def wait(self, known: Ends) -> bool:
        """Wait for a record past the inputs' ends (`known` those of some), up to `wait_s`,
        unless the ends moved since the last call (records came meanwhile, or this is the first
        call) or a reader left records unread: whether it waited. A broker that does not
        answer, or a topic gone, makes no wait: the readers' own calls meet it."""
        try:
            ends = {**self._ends(set(self.topics) - set(known)), **known}
        except (KafkaException, TopicMissingError):
            return False
        if ends != self._last or (self.backlogs is not None and self.backlogs.any()):
            self._last = ends
            return False
        consumer = self.consumer
        consumer.assign([TopicPartition(t, p, o) for t, of in ends.items() for p, o in of.items()])
        try:
            deadline = time.monotonic() + self.wait_s
            while time.monotonic() < deadline and not draining(self.drain_marker):
                if consumer.consume(num_messages=1, timeout=_SLICE_S):
                    break  # a record (or an error, which the readers will meet and report)
        except KafkaException:
            pass  # as above
        finally:
            consumer.unassign()
        return True

    def _ends(self, topics: set[str]) -> Ends:
        for topic in topics - set(self._bounds):
            self._bounds[topic] = PartitionBounds(topic, self.client_config, probe=False)
        return {topic: self._bounds[topic].ends() for topic in sorted(topics)}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        for bounds in self._bounds.values():
            bounds.close()
