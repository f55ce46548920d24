"""The interval join as a Spark `transformWithStateInPandas` processor over state buckets.

Spark charges a socket round trip per key for every state call and for switching keys, which
with one or two rows per key and batch costs far more than the join itself. So the processor
is keyed by a bucket of join keys (a hash of the key modulo `buckets`, 128 by default): per
bucket and micro-batch it reads one value, writes one, and registers at most one timer,
whatever the number of keys and rows. The value holds the cached rows of its keys, whose size
the interval bounds; the join's semantics, per key, are those of `state.interval_join`.

Event time: the operator time is Spark's watermark, the minimum of both inputs' watermarks.
The rows' time column carries no watermark metadata, so Spark does not drop late rows before
they reach the processor: like Flink, the join decides what a late row still meets.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from state.condition import compile_matcher, parse_condition
from state.interval_bounds import IntervalCondition, split_interval
from state.interval_join import Bucket, IntervalJoin, Pair
from state.regular_processor import SideSpec
from state.worker_gc import relax_garbage_collector

BUCKET_STATE = StructType([StructField("bucket", BinaryType())])
PROCTIME = "proctime"


@dataclass(frozen=True)
class IntervalJoinSpec:
    """Everything the processor needs, small and picklable: it travels to the executors.

    `left_time` / `right_time` name each input's time attribute as the condition refers to it;
    `proctime` for processing time (then both must be).
    """

    kind: str
    on: str
    left: SideSpec
    right: SideSpec
    left_time: str
    right_time: str
    buckets: int = 128

    @cached_property
    def condition(self) -> IntervalCondition:
        return split_interval(parse_condition(self.on), self.left_time, self.right_time)

    @property
    def equi_keys(self) -> tuple[tuple[str, str], ...]:
        return self.condition.condition.equi

    @property
    def projects_right(self) -> bool:
        return True

    @property
    def proctime(self) -> bool:
        return self.left_time == PROCTIME

    @property
    def time_mode(self) -> str:
        return "ProcessingTime" if self.proctime else "EventTime"

    def operator(self) -> IntervalJoin:
        matcher = compile_matcher(self.condition.condition, self.left.fields, self.right.fields)
        return IntervalJoin(self.kind, self.condition.lower_ms, self.condition.upper_ms, matcher)


_NAT = np.iinfo(np.int64).min  # NaT's bit pattern


def _python_values(series: pd.Series, kind: str) -> list[Any]:
    """A pandas column as Python values, NULL as None (pandas has NaN and NaT for it).

    Timestamps become epoch microseconds: plain ints are far cheaper than pandas Timestamps to
    make, pickle and compare, and go back to timestamps column-wise on output.
    """
    if kind == "timestamp":
        micros = series.to_numpy(dtype="datetime64[us]").view(np.int64).tolist()
        return [None if v == _NAT else v for v in micros]
    values = series.tolist()
    if kind == "integral" and series.dtype.kind == "f":
        return [None if v != v else int(v) for v in values]
    return values


def _pandas_column(values: list[Any], kind: str) -> Any:
    if kind == "timestamp":
        micros = np.array([_NAT if v is None else v for v in values], dtype=np.int64)
        return micros.view("datetime64[us]")
    return pd.Series(values, dtype=object)


class IntervalJoinProcessor(StatefulProcessor):
    """For `transformWithStateInPandas`, grouped by bucket. Input columns: `side`, `op` (`+I`),
    `seq` (order),
    `ts` (event time, ms), the join key `k0..kN`, then `L_<col>` and `R_<col>` for every column
    of each side (one side's null). Output: `op` (`+I`, append-only) and the same `L_`/`R_`
    columns.

    Whole columns cross between Arrow and Python at once (`tolist`), not a Row per row: that
    conversion, not the join, is most of the cost of a Row-based processor.
    """

    def __init__(
        self, spec: IntervalJoinSpec, output_names: list[str], kinds: dict[str, str]
    ) -> None:
        """`kinds`: `integral` or `timestamp` for the columns pandas carries as float / NaT."""
        self.spec = spec
        self.output_names = output_names
        self.kinds = kinds

    def init(self, handle: StatefulProcessorHandle) -> None:
        relax_garbage_collector()
        self.handle = handle
        self.state = handle.getValueState("bucket", BUCKET_STATE)
        self.join = self.spec.operator()
        self.left_columns = [f"L_{name}" for name in self.spec.left.fields]
        self.right_columns = [f"R_{name}" for name in self.spec.right.fields]
        self.key_columns = [f"k{i}" for i in range(max(1, len(self.spec.equi_keys)))]

    def _operator_time(self, timer_values: TimerValues) -> int:
        if self.spec.proctime:
            return timer_values.getCurrentProcessingTimeInMs()
        return max(timer_values.getCurrentWatermarkInMs(), 0)

    def _load(self) -> tuple[Bucket, bytes | None]:
        stored = self.state.get()
        if stored is None:
            return Bucket(), None
        return pickle.loads(stored[0]), stored[0]

    def _frame(self, pairs: list[Pair]) -> pd.DataFrame:
        columns: dict[str, Any] = {"op": ["+I"] * len(pairs)}
        for side, names in ((0, self.left_columns), (1, self.right_columns)):
            rows = [pair[side] for pair in pairs]
            blank = (None,) * len(names)
            for i, name in enumerate(names):
                values = [(row or blank)[i] for row in rows]
                columns[name] = _pandas_column(values, self.kinds.get(name, ""))
        return pd.DataFrame(columns, columns=self.output_names)

    def _save(self, bucket: Bucket, before: bytes | None, now: int) -> None:
        """Write the bucket back if it changed, and keep one engine timer at its next timer."""
        next_timer = bucket.next_timer()
        pending = bucket.spark_timer
        if next_timer is not None and (pending is None or pending <= now or next_timer < pending):
            self.handle.registerTimer(next_timer)
            bucket.spark_timer = next_timer
        elif next_timer is None:
            bucket.spark_timer = None
        if not bucket.keys:
            if before is not None:
                self.state.clear()
            return
        blob = pickle.dumps(bucket, protocol=pickle.HIGHEST_PROTOCOL)
        if blob != before:
            self.state.update((blob,))

    def _column(self, frame: pd.DataFrame, name: str) -> list[Any]:
        return _python_values(frame[name], self.kinds.get(name, ""))

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        frames = list(rows)
        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        if (frame["op"] != "+I").any():
            raise ValueError("an interval join takes insert-only inputs, got an update or delete")
        bucket, before = self._load()
        now = self._operator_time(timerValues)
        pairs = self.join.fire_due(bucket, now)
        sides, seqs, times = (frame[c].tolist() for c in ("side", "seq", "ts"))
        keys = list(zip(*(self._column(frame, c) for c in self.key_columns), strict=True))
        lefts = list(zip(*(self._column(frame, c) for c in self.left_columns), strict=True))
        rights = list(zip(*(self._column(frame, c) for c in self.right_columns), strict=True))
        process = self.join.process
        for i in sorted(range(len(sides)), key=seqs.__getitem__):
            row = lefts[i] if sides[i] == 0 else rights[i]
            time = now if self.spec.proctime else times[i]
            pairs += process(bucket, keys[i], sides[i], row, time, now)
        self._save(bucket, before, now)
        if pairs:
            yield self._frame(pairs)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        bucket, before = self._load()
        now = self._operator_time(timerValues)
        bucket.spark_timer = None
        pairs = self.join.fire_due(bucket, now)
        self._save(bucket, before, now)
        if pairs:
            yield self._frame(pairs)

    def close(self) -> None:
        """No resources beyond the state handles, which Spark closes."""
