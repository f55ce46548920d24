"""Many state entries read and written in one exchange with Spark's state server store and
return what pyspark's own calls do, and keys a bucket never held are not read at all, through
real `transformWithStateInPandas` queries (whose rows the service's workers hand over as Arrow
slices, `state.spark.arrow_groups`), whose writes wait for no answer as the service's frame
makes them (`state.spark.deferred`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from state.spark import deferred
from state.spark.layouts import BUCKET_STATE, ENTRY_KEY, KeyedEntries, MapEntries
from state.store.keyed_state import as_is, never

pytestmark = pytest.mark.spark

ENTRIES = 3000
BIG = b"x" * 200_000  # more than a socket buffer holds, one way and back


def value(i: int) -> bytes:
    return BIG if i == 7 else b"value of %d " % i * 8


class WritesThenReads(StatefulProcessor):
    """Batch 0 writes entries (even ones one call each, odd ones in one exchange); batch 1
    reads them both ways, removes a third in one exchange and reads again."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        assert deferred.install(handle)
        self.entries = MapEntries(handle.getMapState("keys", ENTRY_KEY, BUCKET_STATE))

    def handleInputRows(self, key: Any, rows: Iterator[pa.RecordBatch], timerValues: Any) -> Any:
        batch = pa.Table.from_batches(list(rows)).column("batch")[0].as_py()
        names = [b"key %d" % i for i in range(ENTRIES)]
        entries = self.entries
        if batch == 0:
            for i in range(0, ENTRIES, 2):
                entries.put(names[i], value(i))
            entries.write_many([(names[i], value(i)) for i in range(1, ENTRIES, 2)], [])
            wrong = 0
        else:
            one_by_one = [entries.get(name) for name in names]
            at_once = entries.get_many(names)
            expected = [value(i) for i in range(ENTRIES)]
            wrong = sum(a != e for a, e in zip(at_once, expected, strict=True))
            wrong += sum(a != e for a, e in zip(one_by_one, expected, strict=True))
            entries.write_many([], names[::3])
            after = entries.get_many(names)
            wrong += sum((a is None) != (i % 3 == 0) for i, a in enumerate(after))
        yield pd.DataFrame(
            {"batch": [batch], "wired": [entries.wire is not None], "wrong": [wrong]}
        )


def test_entries_written_and_read_in_one_exchange_are_those_of_single_calls(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, results = tmp_path / "in", []
    source.mkdir()
    for batch in (0, 1):
        pd.DataFrame({"g": [0], "batch": [batch]}).to_parquet(source / f"{batch}.parquet")
        query = (
            spark.readStream.schema("g long, batch long")
            .parquet(str(source))
            .groupBy("g")
            .transformWithStateInPandas(
                WritesThenReads(), "batch long, wired boolean, wrong long", "Append", "None"
            )
            .writeStream.foreachBatch(lambda frame, _id: results.extend(frame.collect()))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    assert [(r.batch, r.wired, r.wrong) for r in results] == [(0, True, 0), (1, True, 0)]


class LoadsKeys(StatefulProcessor):
    """Each batch writes the keys its rows name into a bucket of `KeyedEntries` (as a table's
    load does) and returns what it found for them."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        assert deferred.install(handle)
        self.entries = KeyedEntries(handle, as_is, as_is, never, lambda _state: (1, 0))

    def handleInputRows(self, key: Any, rows: Iterator[pa.RecordBatch], timerValues: Any) -> Any:
        names = pa.Table.from_batches(list(rows)).column("k").to_pylist()
        bucket, before = self.entries.read()
        bucket.keys.prefetch((k,) for k in names)
        found = sum(bucket.keys.get((k,)) is not None for k in names)
        for k in names:
            bucket.keys[(k,)] = k
        self.entries.flush(bucket)
        self.entries.write(bucket, before)
        yield pd.DataFrame({"found": [found]})


def test_keys_a_bucket_never_held_are_loaded_without_a_read_of_the_store(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Each batch a query of its own on one checkpoint, as a restart: the bucket's filter
    survives it, new keys cost the store no read, and keys written before are found."""
    source, found, reads = tmp_path / "in", [], []
    source.mkdir()
    # the second batch touches few of the bucket's keys: they are read one by one, not in a pass
    batches = [[f"p{i}" for i in range(5000)], [f"q{i}" for i in range(1000)] + ["p1", "p2"]]
    for batch, keys in enumerate(batches):
        pd.DataFrame({"g": 0, "k": keys}).to_parquet(source / f"{batch}.parquet")
        query = (
            spark.readStream.schema("g long, k string")
            .parquet(str(source))
            .groupBy("g")
            .transformWithStateInPandas(LoadsKeys(), "found long", "Append", "None")
            .writeStream.foreachBatch(lambda frame, _id: found.extend(frame.collect()))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        reads.append(query.lastProgress["stateOperators"][0]["customMetrics"]["rocksdbGetCount"])
    assert [r.found for r in found] == [0, 2]
    # RocksDB's reads in the second batch: Spark's own at each write (to count the state's
    # rows), the bucket's value, the two keys held and a few false positives; reading the new
    # keys too would double them
    assert reads[1] < 1.2 * 1002
