"""Many state entries read and written in one exchange with Spark's state server store and
return what pyspark's own calls do, through a real `transformWithStateInPandas` query."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from state.spark.layouts import BUCKET_STATE, ENTRY_KEY, MapEntries

pytestmark = pytest.mark.spark

ENTRIES = 3000
BIG = b"x" * 200_000  # more than a socket buffer holds, one way and back


def value(i: int) -> bytes:
    return BIG if i == 7 else b"value of %d " % i * 8


class WritesThenReads(StatefulProcessor):
    """Batch 0 writes entries (even ones one call each, odd ones in one exchange); batch 1
    reads them both ways, removes a third in one exchange and reads again."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.entries = MapEntries(handle.getMapState("keys", ENTRY_KEY, BUCKET_STATE))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Any:
        batch = int(pd.concat(list(rows))["batch"].iloc[0])
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
        yield pd.DataFrame({"batch": [batch], "wired": [entries.wire is not None],
                            "wrong": [wrong]})  # fmt: skip


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
