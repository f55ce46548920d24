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

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark import Accumulator, TaskContext

from serdes.kafka.produce import OutputRecord
from serdes.kafka.sink import write_once
from serdes.kafka.transactions import ExactlyOnce
from serdes.records.values import DecodeError
from state.spark.frame import LateRow

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


@dataclass(frozen=True)
class LateRowLetters:
    """An event-time join's rows that came behind the watermark, written to the dead-letter
    topic instead of joined (`LATE_ROWS=dead-letter`; `state.spark.frame.LateLetters`).

    A letter's value is its row as a JSON object of its input's columns (timestamps as the
    output writes them, UTC), which the input's JSON format reads back; its headers say why
    (reason `late`), the watermark it missed and its event time (epoch ms), its input's topic
    and its change kind. Each task's letters are one transaction of its own writer id, so a
    re-run task writes nothing twice."""

    letters: DeadLetterTopic  # `first_writer`: the join's state partition 0's id
    sides: tuple[int, ...]  # the inputs whose late rows come here
    inputs: tuple[str, str]  # each side's input, as the metrics name it
    topics: tuple[str, str]  # each side's topic ("" for a join's result)
    fields: tuple[tuple[str, ...], tuple[str, ...]]  # each side's columns
    timestamps: frozenset[str]  # "side.column" of the columns that hold timestamps
    tally: Accumulator[dict] | None = None  # `{(input, "late"): count}` written

    def letter(self, late: LateRow) -> OutputRecord:
        side, op, row, time, watermark = late
        value = {
            name: _timestamp_text(v) if v is not None and f"{side}.{name}" in self.timestamps else v
            for name, v in zip(self.fields[side], row, strict=True)
        }
        headers = [
            ("streamjoin.error", f"event time {time} behind the watermark {watermark}".encode()),
            ("streamjoin.error.reason", b"late"),
            ("streamjoin.watermark", str(watermark).encode()),
            ("streamjoin.event.time", str(time).encode()),
            ("streamjoin.source.topic", self.topics[side].encode()),
            ("streamjoin.change", op.encode()),
        ]
        text = json.dumps(value, default=str, separators=(",", ":"))
        return self.letters.topic, None, text.encode(), headers

    def send(self, late: list[LateRow]) -> None:
        partition = TaskContext.get().partitionId()
        written = self.letters.write(partition, [self.letter(row) for row in late])
        if written and self.tally is not None:  # none: an earlier attempt counted them
            counts = Counter(self.inputs[row[0]] for row in late)
            self.tally.add({(name, "late"): count for name, count in counts.items()})


def _timestamp_text(micros: int) -> str:
    """Epoch microseconds as the JSON output writes a timestamp, `yyyy-MM-dd HH:mm:ss.SSS`."""
    moment = _EPOCH + timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
