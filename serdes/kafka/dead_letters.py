"""The dead-letter topic, written by the task that found the records it could not decode.

Why here and not as a branch of the query: Spark reads a source once per branch that uses it,
so a dead-letter branch beside the join read every input topic and decoded every record twice
per micro-batch, for the few records that fail. Spark reuses one branch's work for another only
through a shuffle (`ReusedExchange`), and its optimizer pushes each branch's filter below that
shuffle, so the two branches never share it. The decoding task therefore writes its own dead
letters, once its input is exhausted, through the sink's delivery (`write_once`): exactly-once,
as one transaction per (input partition, micro-batch) with its marker, so a re-run task or batch
writes nothing twice. The writers' transactional ids follow the state partitions' (see
`DeadLetterTopic.first_writer`), so start-up fences them with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serdes.kafka.produce import OutputRecord
from serdes.kafka.sink import write_once
from serdes.kafka.transactions import ExactlyOnce
from serdes.records.values import DecodeError


@dataclass(frozen=True)
class DeadLetterTopic:
    """Where one input's dead letters go; picklable, shipped to the decoding tasks."""

    topic: str
    client_config: dict[str, str]
    exactly_once: ExactlyOnce | None
    first_writer: int  # the transactional id index of the input's partition 0

    def letter(self, error: DecodeError, record: dict[str, Any]) -> OutputRecord:
        """The record as it came, with the error and its coordinates in headers."""
        headers = [(h["key"], h["value"]) for h in record["headers"] or ()]
        headers += [
            ("streamjoin.error", str(error).encode()),
            ("streamjoin.error.reason", error.reason.encode()),
            ("streamjoin.source.topic", record["topic"].encode()),
            ("streamjoin.source.partition", str(record["partition"]).encode()),
            ("streamjoin.source.offset", str(record["offset"]).encode()),
        ]
        return self.topic, record["key"], record["value"], headers

    def write(self, partition: int, letters: list[OutputRecord]) -> int:
        """Write the letters of input `partition` for the running micro-batch; returns how
        many were written (0 if this batch's letters of that partition were written before)."""
        writer = self.first_writer + partition
        return write_once(self.client_config, self.exactly_once, letters, self.topic, writer)
