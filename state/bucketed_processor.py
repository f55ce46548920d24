"""A `transformWithStateInPandas` processor keyed by buckets of join keys, for the time-based joins.

Spark charges a socket round trip per grouping key for every state call and for switching keys,
which with one or two rows per key and batch costs far more than a join itself. So the interval
and temporal joins group their input by a bucket of join keys (a hash of the key modulo the
spec's `buckets`): per bucket and micro-batch the processor registers at most one timer (at the
earliest timer of its keys), and its layout decides the state calls: `WholeBuckets` reads and
writes one value per bucket, `KeyedEntries` one entry per key it touches (see
`docs/design.md`, "Whole buckets or one entry per key"). A subclass says which layout, and what
the join does with a bucket.

Whole columns cross between Arrow and Python at once (`tolist`), not a `Row` per row: that
conversion, not the join, is most of the cost of a Row-based processor. Event time is the
`ts` column (epoch ms), without Spark's watermark metadata, so Spark drops no late row before
the join sees it.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    MapState,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from ops.worker_gc import settle_worker
from state.condition import JoinCondition, compile_matcher
from state.encoding import dump, load
from state.interval_join import Row
from state.keyed_state import KeyedBucket, StoredKeys

BUCKET_STATE = StructType([StructField("bucket", BinaryType())])
ENTRY_KEY = StructType([StructField("key", BinaryType())])
_NAT = np.iinfo(np.int64).min  # NaT's bit pattern
PROCTIME = "proctime"
SIDES = ("left", "right")
Emitted = tuple[str, Row | None, Row | None]  # an output change: kind, left row, right row


@dataclass(frozen=True)
class SideSpec:
    """One input's columns, in order, and its unique key (empty: none)."""

    fields: tuple[str, ...]
    unique_key: tuple[str, ...] = ()


class LateRows(Protocol):
    """Where late rows are counted, `{(side,): count}`: a Spark accumulator on a cluster."""

    def add(self, counts: dict[tuple[str], int]) -> None: ...


# What a bucket holds of one side: a count, or counts by when a state TTL drops them (epoch ms,
# None: never), as `state.keyed_state.held_by_expiry` gives them.
Held = int | tuple[tuple[int | None, int], ...]


class HeldRows(Protocol):
    """Where each bucket reports what its state holds after a visit,
    `{(operator, side, bucket): (when, counts by expiry)}`: a Spark accumulator keeping each
    bucket's latest report (`ops.metrics`), so a re-executed task repeats a report, never adds
    to it; rows whose expiry has passed are no longer counted, visited or not."""

    def add(self, reports: dict[tuple[str, str, int], tuple[float, tuple]]) -> None: ...


def report_held(held_rows: HeldRows | None, operator: str, bucket: int,
                counts: dict[str, Held]) -> None:  # fmt: skip
    if held_rows is not None:
        now = time.time()
        held_rows.add({(operator, side, bucket): (now, ((None, n),) if isinstance(n, int) else n)
                       for side, n in counts.items()})  # fmt: skip


class BucketedJoinSpec:
    """What every join spec gives the processor frame: both inputs' columns, the number of
    buckets the join keys hash into, and the join's clock, the left input's time attribute
    (`proctime` for processing time). Outputs carry both sides' columns unless said otherwise."""

    left: SideSpec
    right: SideSpec
    left_time: str
    buckets: int

    @property
    def join_condition(self) -> JoinCondition:
        raise NotImplementedError

    @property
    def equi_keys(self) -> tuple[tuple[str, str], ...]:
        return self.join_condition.equi

    @property
    def projects_right(self) -> bool:
        return True

    @property
    def proctime(self) -> bool:
        return self.left_time == PROCTIME

    @property
    def time_mode(self) -> str:
        return "ProcessingTime" if self.proctime else "EventTime"

    def matcher(self) -> Callable[[Row, Row], bool]:
        return compile_matcher(self.join_condition, self.left.fields, self.right.fields)

    def operator(self) -> Any:
        """The join of one bucket's keys (`state.interval_join`, `state.temporal_join`)."""
        raise NotImplementedError


def python_values(series: pd.Series, kind: str) -> list[Any]:
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


def pandas_column(values: list[Any], kind: str) -> Any:
    if kind == "timestamp":
        micros = np.array([_NAT if v is None else v for v in values], dtype=np.int64)
        return micros.view("datetime64[us]")
    return pd.Series(values, dtype=object)


class BucketLayout(Protocol):
    """How a processor keeps its buckets: `read` at a bucket's visit (the bucket and the bytes
    it was read from), `flush` its keys, then `write` what the bucket holds besides them."""

    def read(self, now: int) -> tuple[Any, bytes | None]: ...

    def flush(self, bucket: Any) -> None: ...

    def write(self, bucket: Any, before: bytes | None) -> None: ...


class WholeBuckets:
    """One value per bucket, read and written whole: for state that time bounds and a batch
    mostly touches (the interval join), one call per bucket beats one per key."""

    def __init__(
        self,
        handle: StatefulProcessorHandle,
        new: Callable[[], Any],
        to_plain: Callable[[Any], Any],
        from_plain: Callable[[Any], Any],
    ) -> None:
        self.state = handle.getValueState("bucket", BUCKET_STATE)
        self.new, self.to_plain, self.from_plain = new, to_plain, from_plain

    def read(self, now: int = 0) -> tuple[Any, bytes | None]:
        stored = self.state.get()
        if stored is None:
            return self.new(), None
        return self.from_plain(load(stored[0])), stored[0]

    def flush(self, bucket: Any) -> None:
        """Nothing to do before `write`: the keys are in the bucket's value."""

    def write(self, bucket: Any, before: bytes | None) -> None:
        if not bucket.keys:
            if before is not None:
                self.state.clear()
            return
        blob = dump(self.to_plain(bucket))
        if blob != before:
            self.state.update((blob,))


class MapEntries:
    """A bucket's `MapState` as the `EntryStore` of `state.keyed_state`."""

    def __init__(self, state: MapState) -> None:
        self.state = state

    def get(self, key: bytes) -> bytes | None:
        found = self.state.getValue((key,))
        return None if found is None else found[0]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for (key,), (value,) in self.state.iterator():
            yield key, value

    def put(self, key: bytes, value: bytes) -> None:
        self.state.updateValue((key,), (value,))

    def remove(self, key: bytes) -> None:
        self.state.removeKey((key,))


class KeyedEntries:
    """Each key of a bucket its own `MapState` entry (`state.keyed_state`): a batch reads and
    writes the keys it touches. The bucket's own value holds its engine timer, the keys that
    wait for time, the rows that wait in it and the ledger of its entries, and is written only
    when those change."""

    def __init__(
        self,
        handle: StatefulProcessorHandle,
        to_plain: Callable[[Any], Any],
        from_plain: Callable[[Any], Any],
        timer_of: Callable[[Any], int | None],
        size_of: Callable[[Any], tuple[int, int]],
        ttl_ms: int | None = None,
    ) -> None:
        """`ttl_ms`: Spark drops an entry not written for that long (processing time), from
        its own index of expiry times: no timer, no scan of the keys."""
        self.own = handle.getValueState("bucket", BUCKET_STATE)
        self.entries = MapEntries(handle.getMapState("keys", ENTRY_KEY, BUCKET_STATE, ttl_ms))
        self.to_plain, self.from_plain, self.timer_of = to_plain, from_plain, timer_of
        self.size_of = size_of
        self.ttl_ms = ttl_ms

    def read(self, now: int = 0) -> tuple[KeyedBucket, bytes | None]:
        """The bucket as of `now`, the processing time that ages its entries under a TTL."""
        stored = self.own.get()
        spark_timer, timers, waiting, ledger = (
            (None, [], {}, []) if stored is None else load(stored[0])
        )
        keys = StoredKeys(self.entries, dict(timers), self.to_plain, self.from_plain,
                          self.timer_of, {e: list(c) for e, c in ledger}, self.size_of,
                          self.ttl_ms, now)  # fmt: skip
        return KeyedBucket(keys, waiting, spark_timer), None if stored is None else stored[0]

    def flush(self, bucket: KeyedBucket) -> None:
        bucket.keys.flush()

    def write(self, bucket: KeyedBucket, before: bytes | None) -> None:
        keys = bucket.keys
        if (
            bucket.spark_timer is None
            and not keys.timers
            and not bucket.waiting
            and not keys.ledger
        ):
            if before is not None:
                self.own.clear()
            return
        blob = dump((bucket.spark_timer, list(keys.timers.items()), bucket.waiting,
                     list(keys.ledger.items())))  # fmt: skip
        if blob != before:
            self.own.update((blob,))


@dataclass
class InputRows:
    """One bucket's input of a micro-batch, column by column."""

    sides: list[int]
    ops: list[str]
    seqs: list[int]
    times: list[int | None]
    keys: list[tuple[Any, ...]]
    lefts: list[Row]
    rights: list[Row]

    def order(self) -> list[int]:
        """Row positions in arrival order."""
        return sorted(range(len(self.sides)), key=self.seqs.__getitem__)

    def row(self, i: int) -> Row:
        return self.lefts[i] if self.sides[i] == 0 else self.rights[i]


class BucketedJoinProcessor(StatefulProcessor):
    """Input columns: `side`, `op`, `seq` (order), `ts` (event time, ms), the join key
    `k0..kN`, then `L_<col>` and `R_<col>` for every column of each side (one side's null).
    Output: `op`, `seq` if `output_names` has it (the order this task emitted its changes in,
    for an upsert materializer downstream), and the same `L_`/`R_` columns (a side's columns
    NULL when it is padded)."""

    def __init__(
        self,
        spec: BucketedJoinSpec,
        output_names: list[str],
        kinds: dict[str, str],
        late_rows: LateRows | None = None,
        held_rows: HeldRows | None = None,
    ) -> None:
        """`kinds`: `integral` or `timestamp` for the columns pandas carries as float / NaT;
        `late_rows` counts event-time rows that arrive behind the watermark, by side;
        `held_rows` takes what each bucket holds per side (`held`)."""
        self.spec = spec
        self.output_names = output_names
        self.kinds = kinds
        self.late_rows = late_rows
        self.held_rows = held_rows
        self.join = spec.operator()

    @abstractmethod
    def layout(self, handle: StatefulProcessorHandle) -> BucketLayout:
        """How a bucket is kept in Spark's state store."""

    @abstractmethod
    def fire_due(self, bucket: Any, now: int) -> list[Emitted]:
        """What the keys' timers due at `now` emit."""

    @abstractmethod
    def apply(self, bucket: Any, rows: InputRows, now: int) -> list[Emitted]:
        """What the bucket's input rows of a micro-batch emit."""

    @abstractmethod
    def held(self, bucket: Any) -> tuple[Held, Held]:
        """The rows (or versions) the bucket's state holds for each side."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        settle_worker()
        self.handle = handle
        self.store = self.layout(handle)
        self.left_columns = [f"L_{name}" for name in self.spec.left.fields]
        self.right_columns = [f"R_{name}" for name in self.spec.right.fields]
        self.key_columns = [f"k{i}" for i in range(max(1, len(self.spec.equi_keys)))]
        self.emitted = 0  # changes this task has emitted: the next one's `seq`

    def _operator_time(self, timer_values: TimerValues) -> int:
        if self.spec.proctime:
            return timer_values.getCurrentProcessingTimeInMs()
        return max(timer_values.getCurrentWatermarkInMs(), 0)

    def _save(self, bucket: Any, before: bytes | None, now: int) -> None:
        """Write the bucket back if it changed, and keep one engine timer at its next timer."""
        self.store.flush(bucket)
        next_timer = bucket.next_timer()
        # a timer due already (a late row's) fires at the next watermark, as in Flink
        wanted = None if next_timer is None else max(next_timer, now + 1)
        pending = bucket.spark_timer
        if wanted != pending and (wanted is None or pending is None or pending <= now
                                  or wanted < pending):  # fmt: skip
            # One engine timer per bucket: one registered twice makes the engine warn, and a
            # stale one fires for nothing. A due one's work is done: `fire_due` ran first.
            if pending is not None:
                self.handle.deleteTimer(pending)
            if wanted is not None:
                self.handle.registerTimer(wanted)
            bucket.spark_timer = wanted
        self.store.write(bucket, before)

    def _visited(self, key: tuple[int], bucket: Any, before: bytes | None, now: int) -> None:
        """Save the bucket, and report what it holds."""
        self._save(bucket, before, now)
        if self.held_rows is not None:
            left, right = self.held(bucket)
            report_held(self.held_rows, "join", key[0], {"left": left, "right": right})

    def _column(self, frame: pd.DataFrame, name: str) -> list[Any]:
        return python_values(frame[name], self.kinds.get(name, ""))

    def _input(self, frame: pd.DataFrame) -> InputRows:
        return InputRows(
            sides=frame["side"].tolist(),
            ops=frame["op"].tolist(),
            seqs=frame["seq"].tolist(),
            times=python_values(frame["ts"], "integral"),
            keys=list(zip(*(self._column(frame, c) for c in self.key_columns), strict=True)),
            lefts=list(zip(*(self._column(frame, c) for c in self.left_columns), strict=True)),
            rights=list(zip(*(self._column(frame, c) for c in self.right_columns), strict=True)),
        )

    def _count_late(self, rows: InputRows, watermark: int) -> None:
        late = Counter(SIDES[s] for s, t in zip(rows.sides, rows.times, strict=True)
                       if t is not None and t < watermark)  # fmt: skip
        if late and self.late_rows is not None:
            self.late_rows.add({(side,): count for side, count in late.items()})

    def _frame(self, emitted: list[Emitted]) -> pd.DataFrame:
        columns: dict[str, Any] = {"op": [change[0] for change in emitted]}
        columns["seq"] = np.arange(self.emitted, self.emitted + len(emitted), dtype=np.int64)
        self.emitted += len(emitted)
        for side, names in ((1, self.left_columns), (2, self.right_columns)):
            rows = [change[side] for change in emitted]
            blank = (None,) * len(names)
            for i, name in enumerate(names):
                values = [(row or blank)[i] for row in rows]
                columns[name] = pandas_column(values, self.kinds.get(name, ""))
        return pd.DataFrame(columns, columns=self.output_names)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        frames = list(rows)
        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        now = self._operator_time(timerValues)
        bucket, before = self.store.read(now)
        pairs = self.fire_due(bucket, now)
        rows = self._input(frame)
        if self.late_rows is not None and not self.spec.proctime:
            self._count_late(rows, now)
        pairs += self.apply(bucket, rows, now)
        self._visited(key, bucket, before, now)
        if pairs:
            yield self._frame(pairs)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        now = self._operator_time(timerValues)
        bucket, before = self.store.read(now)
        if bucket.spark_timer is not None and bucket.spark_timer <= now:
            bucket.spark_timer = None  # this one, firing (or about to, in this batch)
        pairs = self.fire_due(bucket, now)
        self._visited(key, bucket, before, now)
        if pairs:
            yield self._frame(pairs)

    def close(self) -> None:
        """No resources beyond the state handles, which Spark closes."""
