"""The one `transformWithStateInPandas` processor: every stateful operator runs in this frame.

An operator (`StatefulOperator`: a join, the changelog normalizer, the upsert materializer)
says how it keeps a bucket (`store`), what a bucket's input rows of a micro-batch emit
(`apply`), what its due timers emit (`fire_due`) and what it holds (`held`); the frame does
the rest the same way for all of them, per bucket and micro-batch:

1. the input columns to Python values, column by column (`ColumnLayout`, `InputRows`);
2. the operator time of its clock: the watermark, the wall clock, or none;
3. the bucket read once (`state.spark.layouts`), the due timers fired, the rows applied;
4. the bucket written back if it changed, with at most one engine timer, at its earliest (those
   calls, and the switch to the next bucket, wait for no answer: `state.spark.deferred`);
5. what the bucket holds reported (`streamjoin_state_rows`), late rows counted;
6. the output changes (`state.changes.Change`) to columns.

Spark charges a socket round trip per grouping key for every state call and for switching keys,
which with one or two rows per key and batch costs far more than an operator itself. So the
frame is grouped by a bucket of keys (a hash of the key modulo the buckets), not by the key.
Whole columns cross between Arrow and Python at once (`to_pylist`, `tolist`), not a `Row` per
row: that conversion, not the join, is most of the cost of a Row-based processor. The service's
workers hand a bucket's rows over as slices of Spark's Arrow batches (`state.spark.arrow_groups`);
pyspark's own path (its test harness) as a pandas DataFrame. Event time is the `ts`
column (epoch ms) without Spark's watermark metadata, so Spark drops no late row before the
operator sees it.

Spark moves a query's watermark between micro-batches only: a row read in one fires the timers
its time passes in the next, one micro-batch late. Where the layout carries each row's `bound`
(`state.columns`: its input's watermark once this micro-batch is read), the task learns the
watermark the next micro-batch will have, as far as its own rows show it: the least, over the
inputs, of the largest bound of each input's rows it took (none while an input showed it none).
A bucket's visit then fires its timers up to that (`batch_watermark`), after its rows were
applied at the watermark Spark gave: what Flink emits once the watermark passes, emitted before
the next micro-batch's rows, as the next micro-batch would, only sooner. A bucket without rows
in the micro-batch fires at the watermark Spark gives, a micro-batch later.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from ops.worker.collector import settle_worker
from state.changes import SIDES, Change, Row
from state.columns import BOUND, OP, SEQ, SIDE, TS, ColumnLayout
from state.joins.specs import NO_WATERMARK, Clock
from state.spark import arrow_groups, deferred
from state.spark.arrow_groups import OutputColumns
from state.spark.layouts import BucketLayout
from state.store.keeper import worker_copies
from state.store.warm import ReadCounts

if TYPE_CHECKING:  # pandas only where pyspark's own path hands frames over: imported there
    import pandas as pd

    # A bucket's rows of a micro-batch: pyspark's DataFrame, or the Arrow slices of the
    # service's workers as one table
    Input = pd.DataFrame | pa.Table

_NAT = np.iinfo(np.int64).min  # NaT's bit pattern
TIME_MODES: dict[Clock, str] = {
    "event": "EventTime",
    "processing": "ProcessingTime",
    "none": "None",
}

# What a bucket holds of one side: a count, or counts by when a state TTL drops them (epoch ms,
# None: never), as `state.store.keyed_state.held_by_expiry` gives them.
Held = int | tuple[tuple[int | None, int], ...]


@dataclass
class KeyHeld:
    """What one stored entry holds of one side for one key, as `streamjoin state` reports it:
    how many rows, the earliest event time among them (ms; None where the operator keeps none),
    and the rows themselves where the entry has them (a paged side's count is in its key's entry,
    its rows in its pages: `count` 0 there)."""

    side: str
    key: tuple
    count: int
    oldest: int | None = None
    rows: list[Row] = field(default_factory=list)


class LateRows(Protocol):
    """Where late rows are counted, `{(side,): count}`: a Spark accumulator on a cluster."""

    def add(self, counts: dict[tuple[str], int]) -> None: ...


# A row an event-time join did not take because it came behind the watermark: its input (0:
# left, 1: right), change kind, row, event time (ms) and the watermark it missed (ms).
LateRow = tuple[int, str, Row, int, int]


class LateLetters(Protocol):
    """Where an event-time join sends the rows of inputs `sides` that arrive behind the
    watermark, instead of joining them (`LATE_ROWS=dead-letter`): `send` takes a task's, once
    its bucket visits are done; a re-run of the task sends the same rows again, which the
    receiver writes once."""

    sides: tuple[int, ...]

    def send(self, late: list[LateRow]) -> None: ...


class WarmReads(Protocol):
    """Where the entries a task read are counted, `{("hit",): n, ("miss",): m}`: answered from
    a warm copy or read from the store (`state.store.warm`)."""

    def add(self, counts: dict[tuple[str], int]) -> None: ...


class ChangeCounts(Protocol):
    """Where the changes of a job's last join are counted by kind, `{(kind,): count}`: a Spark
    accumulator (`streamjoin_changes`)."""

    def add(self, counts: dict[tuple[str], int]) -> None: ...


class FanoutCounts(Protocol):
    """Where a join's fan-out and hot-key reports are counted (`state.joins.fanout`):
    `{("fanout", bound) | ("fanout", "sum") | ("hot", input): count}`."""

    def add(self, counts: dict[tuple[str, str], int]) -> None: ...


@dataclass(frozen=True)
class WarmState:
    """How much state each Python worker keeps between micro-batches (`state.store.warm`; 0:
    none), and where its reads are counted."""

    budget_bytes: int
    reads: WarmReads | None = None


class HeldRows(Protocol):
    """Where each bucket reports what its state holds after a visit,
    `{(operator, side, bucket): (when, counts by expiry)}`: a Spark accumulator keeping each
    bucket's latest report (`ops.metrics`), so a re-executed task repeats a report, never adds
    to it; rows whose expiry has passed are no longer counted, visited or not."""

    def add(self, reports: dict[tuple[str, str, int], tuple[float, tuple]]) -> None: ...


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


def arrow_values(column: pa.ChunkedArray, kind: str) -> list[Any]:
    """An Arrow column as the same Python values `python_values` makes of it in pandas, but
    NULL as None in every column (pandas makes a NULL DOUBLE NaN)."""
    if kind == "timestamp":
        micros = pa.timestamp("us", tz=column.type.tz)
        return column.cast(micros).cast(pa.int64()).to_pylist()
    return column.to_pylist()


def pandas_column(values: list[Any], kind: str) -> Any:
    import pandas as pd

    if kind == "timestamp":
        micros = np.array([_NAT if v is None else v for v in values], dtype=np.int64)
        return micros.view("datetime64[us]")
    return pd.Series(values, dtype=object)


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

    def without(self, dropped: set[int]) -> InputRows:
        """These rows but those at the positions `dropped`."""
        kept = [i for i in range(len(self.sides)) if i not in dropped]
        return InputRows(
            *(
                [column[i] for i in kept]
                for column in (
                    self.sides,
                    self.ops,
                    self.seqs,
                    self.times,
                    self.keys,
                    self.lefts,
                    self.rights,
                )
            )
        )

    def by_key(self) -> dict[Any, list[int]]:
        """Row positions per key, each key's in arrival order."""
        grouped: dict[Any, list[int]] = {}
        for i in self.order():
            grouped.setdefault(self.keys[i], []).append(i)
        return grouped


class StatefulOperator(Protocol):
    """What an operator gives the frame. `name` labels its state in the held-rows reports;
    `clock` is the time it runs on (`now` below: the watermark, the wall clock, or 0)."""

    name: str

    @property
    def clock(self) -> Clock: ...

    @property
    def store_ttl_ms(self) -> int | None:
        """Spark's TTL on the state entries it keeps (None: none). Whether there is one changes
        their value schema in Spark's state store, so a checkpoint keeps it
        (`app.run.pipeline.state_meaning`)."""
        ...

    def store(self, handle: StatefulProcessorHandle) -> BucketLayout:
        """How a bucket is kept in Spark's state store (`state.spark.layouts`)."""
        ...

    def fire_due(self, bucket: Any, now: int) -> list[Change]:
        """What the bucket's timers due at `now` emit."""
        ...

    def apply(self, bucket: Any, rows: InputRows, now: int) -> list[Change]:
        """What the bucket's input rows of a micro-batch emit."""
        ...

    def held(self, bucket: Any) -> dict[str, Held]:
        """What the bucket holds, by the input (or output) it holds it for."""
        ...

    @property
    def variables(self) -> tuple[str, ...]:
        """The state variables `store` declares, in the order Spark records them."""
        ...

    def inspect(
        self, variable: str, name: bytes | None, value: bytes, now: int
    ) -> Iterator[KeyHeld]:
        """What one stored entry of `variable` holds (`name`: a map entry's, None for a value
        state's), read from a checkpoint by `streamjoin state`, as of processing time `now`:
        what has expired by then is not held."""
        ...


class StatefulFrame(StatefulProcessor):
    """Runs `operator` over buckets of keys, its rows in and out as `layout` names them."""

    def __init__(
        self,
        operator: StatefulOperator,
        layout: ColumnLayout,
        late_rows: LateRows | None = None,
        held_rows: HeldRows | None = None,
        chained: bool = False,
        warm: WarmState | None = None,
        fanout: FanoutCounts | None = None,
        late_letters: LateLetters | None = None,
        changes: ChangeCounts | None = None,
    ) -> None:
        """`late_rows` counts event-time rows that arrive behind the watermark, by side;
        `late_letters` takes those of its `sides` instead of the operator;
        `held_rows` takes what each bucket holds (`held`); `chained`: the left input is the
        result of a join before this one in the same query (see `handleInputRows`); `warm`:
        the state kept in the workers between micro-batches; `fanout`: where a join that
        counts its fan-out (a `fanout` attribute, `state.joins.fanout`) adds it; `changes`:
        where its output is counted by kind, once a task."""
        self.operator = operator
        self.layout = layout
        self.late_rows = late_rows if operator.clock == "event" else None
        self.late_letters = late_letters if operator.clock == "event" else None
        self.held_rows = held_rows
        self.chained = chained and operator.clock == "event"  # only time orders its work
        self.warm = warm
        self.fanout = fanout
        self.changes = changes
        # the operator's name among every copy a worker keeps: made once, where the query is
        self.owner = uuid.uuid4().hex

    @property
    def time_mode(self) -> str:
        return TIME_MODES[self.operator.clock]

    def init(self, handle: StatefulProcessorHandle) -> None:
        settle_worker()
        deferred.install(handle)  # before `store`: its state objects' writes are deferred too
        self.handle = handle
        self.store = self.operator.store(handle)
        self.emitted = 0  # changes this task has emitted: the next one's `seq`
        self.kinds: Counter[str] = Counter()  # of those changes, when they are counted
        self.late: list[LateRow] = []  # the task's rows for `late_letters`
        self.reads = ReadCounts()
        self.bounds: dict[int, int] = {}  # each input's largest `bound` among the task's rows
        if self.warm is not None and self.warm.budget_bytes > 0:
            self.store.keep_warm(worker_copies(), self.reads, self.owner, self.warm.budget_bytes)

    def _operator_time(self, timer_values: TimerValues) -> int:
        """The time `now` of the operator's clock. Spark's watermark starts at 0: up to there,
        no watermark yet (`NO_WATERMARK`), as in Flink, so that rows at or before 1970 are
        not behind one before any was seen."""
        clock = self.operator.clock
        if clock == "event":
            watermark = timer_values.getCurrentWatermarkInMs()
            return watermark if watermark > 0 else NO_WATERMARK
        return timer_values.getCurrentProcessingTimeInMs() if clock == "processing" else 0

    def _take_bounds(self, frame: Input, sides: list[int]) -> None:
        """Raise each input's largest `bound` seen by the task with this bucket's rows."""
        for side, bound in zip(sides, self._column(frame, BOUND, "integral"), strict=True):
            if bound is not None:
                self.bounds[side] = max(bound, self.bounds.get(side, bound))

    def batch_watermark(self) -> int | None:
        """The watermark the task's rows show the query reaching once this micro-batch is
        read (see the module's text), None where its layout carries no bounds or an input
        showed the task none."""
        if not self.layout.bounds or len(self.bounds) < len(self.layout.sides):
            return None
        return min(self.bounds.values())

    def _column(self, frame: Input, name: str, kind: str | None = None) -> list[Any]:
        kind = self.layout.kind(name) if kind is None else kind
        if isinstance(frame, pa.Table):
            return arrow_values(frame.column(name), kind)
        return python_values(frame[name], kind)

    def _rows(self, frame: Input, side: int) -> list[Row]:
        if side >= len(self.layout.sides):
            return []
        columns = (self._column(frame, c) for c in self.layout.side_columns(side))
        return list(zip(*columns, strict=True))

    def _input(self, frame: Input) -> InputRows:
        count = len(frame)
        layout = self.layout
        times = self._column(frame, TS, "integral") if layout.times else [None] * count
        return InputRows(
            sides=self._column(frame, SIDE) if len(layout.sides) > 1 else [0] * count,
            ops=self._column(frame, OP),
            seqs=self._column(frame, SEQ),
            times=times,
            keys=list(zip(*(self._column(frame, c) for c in layout.key_columns), strict=True)),
            lefts=self._rows(frame, 0),
            rights=self._rows(frame, 1),
        )

    def _late(self, rows: InputRows, watermark: int) -> list[int]:
        """The positions of the rows behind the watermark (a join's result is never late here),
        or of those the operator itself calls late (a window join: those of a fired window)."""
        judged = getattr(self.operator, "late", None)
        if judged is not None:
            return judged(rows, watermark)
        counted = (1,) if self.chained else (0, 1)
        return [
            i
            for i, (s, t) in enumerate(zip(rows.sides, rows.times, strict=True))
            if t is not None and t < watermark and s in counted
        ]

    def _diverted(self, rows: InputRows, late: list[int], watermark: int) -> InputRows:
        """`rows` without the late ones `late_letters` takes, which the task keeps to send."""
        assert self.late_letters is not None
        sides = self.late_letters.sides
        taken = {i for i in late if rows.sides[i] in sides}
        if not taken:
            return rows
        self.late.extend(
            (rows.sides[i], rows.ops[i], rows.row(i), rows.times[i], watermark)  # type: ignore[misc]
            for i in sorted(taken, key=rows.seqs.__getitem__)
        )
        return rows.without(taken)

    def _save(self, bucket: Any, before: bytes | None, now: int) -> None:
        """Write the bucket back if it changed, and keep one engine timer at its next timer."""
        self.store.flush(bucket)
        next_timer = bucket.next_timer()
        # a timer due already (a late row's) fires at the next watermark, as in Flink; one at
        # or before 0 at the first past Spark's start, 0, which the operator's clock takes for
        # no watermark yet (`_operator_time`)
        wanted = None if next_timer is None else max(next_timer, now + 1, 1)
        pending = bucket.spark_timer
        if wanted != pending and (
            wanted is None or pending is None or pending <= now or wanted < pending
        ):
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
            reported = time.time()
            self.held_rows.add(
                {
                    (self.operator.name, side, key[0]): (
                        reported,
                        ((None, n),) if isinstance(n, int) else n,
                    )
                    for side, n in self.operator.held(bucket).items()
                }
            )

    def _frame(self, changes: list[Change]) -> pd.DataFrame | OutputColumns:
        """The changes as output columns: plain Python values by column name where the
        worker makes the Arrow batch of them (`state.spark.arrow_groups`), else a pandas
        DataFrame for pyspark's own path."""
        layout = self.layout
        plain = arrow_groups.installed()
        if not plain:
            import pandas as pd
        columns: dict[str, Any] = {OP: [c.kind for c in changes]}
        if self.changes is not None:
            self.kinds.update(columns[OP])
        if layout.out_seq:
            if changes[0].seq is None:  # the operator leaves the order to the frame
                columns[SEQ] = list(range(self.emitted, self.emitted + len(changes)))
                self.emitted += len(changes)
            else:
                columns[SEQ] = [c.seq for c in changes]
        if layout.out_ts:
            ts = [c.ts for c in changes]
            columns[TS] = ts if plain else pd.Series(ts, dtype=object)
        if layout.out_key:
            columns[layout.key_columns[0]] = [c.key for c in changes]
        for side in layout.outputs:
            names = layout.side_columns(side)
            rows = [c[1 + side] for c in changes]
            blank = (None,) * len(names)
            for i, name in enumerate(names):
                values = [(row or blank)[i] for row in rows]
                columns[name] = values if plain else pandas_column(values, layout.kind(name))
        return OutputColumns(columns) if plain else pd.DataFrame(columns)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame | pa.RecordBatch], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame | OutputColumns]:
        """`rows`: the bucket's rows as pandas DataFrames (pyspark's worker) or as slices of
        Arrow batches (the service's workers, `state.spark.arrow_groups`)."""
        frames = list(rows)
        frame: Input
        if isinstance(frames[0], pa.RecordBatch):
            frame = pa.Table.from_batches(frames)
        else:
            import pandas as pd

            frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        now = self._operator_time(timerValues)
        bucket, before = self.store.read(now, key)
        rows = self._input(frame)
        if self.layout.bounds:
            self._take_bounds(frame, rows.sides)
        counting = self.late_rows is not None or self.late_letters is not None
        late = self._late(rows, now) if counting else []
        if late and self.late_rows is not None:
            counts = Counter(SIDES[rows.sides[i]] for i in late)
            self.late_rows.add({(side,): count for side, count in counts.items()})
        if late and self.late_letters is not None:
            rows = self._diverted(rows, late, now)
        if self.chained:
            # What the join before emitted at this batch's watermark reaches this one before
            # the watermark does, as Flink's channels deliver a watermark after the rows it
            # released: the rows first, then the timers due.
            changes = self.operator.apply(bucket, rows, now)
            changes += self.operator.fire_due(bucket, now)
        else:
            changes = self.operator.fire_due(bucket, now)
            changes += self.operator.apply(bucket, rows, now)
            shown = self.batch_watermark()  # as far as the task's rows so far show it
            if shown is not None and shown > now:
                now = shown
                changes += self.operator.fire_due(bucket, now)
        self._visited(key, bucket, before, now)
        if changes:
            yield self._frame(changes)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        # Spark hands a timer's key as a `Row` (`Row(bucket=7)`) and a group's as a tuple
        # (`(7,)`): as a tuple, a bucket is one owner of its warm copies whichever way it is
        # visited, so a timer's visit reads what the rows' visits kept (`state.store.warm`)
        key = tuple(key)
        now = self._operator_time(timerValues)
        bucket, before = self.store.read(now, key)
        if bucket.spark_timer is not None and bucket.spark_timer <= now:
            bucket.spark_timer = None  # this one, firing (or about to, in this batch)
        changes = self.operator.fire_due(bucket, now)
        self._visited(key, bucket, before, now)
        if changes:
            yield self._frame(changes)

    def close(self) -> None:
        """Send the task's late rows, count its reads and fan-out, and let go of the task's
        state handle and store (the handles are Spark's to close). Let go because the
        worker's next task freezes what still lives out of every collection
        (`ops.worker.collector`): held here until the next `init`, a cycle among the state
        objects `init` made, pyspark's own included, would never be freed."""
        del self.handle, self.store
        if self.late_letters is not None and self.late:
            self.late_letters.send(self.late)
        counted = getattr(self.operator, "fanout", None)
        if self.fanout is not None and counted is not None:
            self.fanout.add(counted.take())
        if self.changes is not None and self.kinds:
            self.changes.add({(kind,): n for kind, n in self.kinds.items()})
        if self.warm is None or self.warm.reads is None:
            return
        hits, misses = self.reads.take()
        if hits or misses:
            self.warm.reads.add({("hit",): hits, ("miss",): misses})
