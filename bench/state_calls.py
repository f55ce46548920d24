"""What an entry costs through PySpark's state API, by the kind of call, in a running query.

Usage: python bench/state_calls.py [ENTRIES_PER_BATCH] [BATCHES] [VALUE_BYTES] [KEYS]

One `transformWithStateInPandas` query over parquet files read as a stream (a file a
micro-batch), its rows hashed into 32 buckets over the session's state partitions, as the
joins' buckets are. In each bucket and micro-batch, every row's key and a value of VALUE_BYTES
(60 by default) are written and read back, each kind of call timed on its own. With KEYS, the
rows name that many keys over and over, so that each micro-batch rewrites entries written
before (as a join rewrites the keys it touches again), and only the map's calls are timed; by
default every key is new.

- `map put`, `map get`: a `MapState` entry a key, many calls in one exchange
  (`state.spark.pipelined`), as the keyed joins write and read their keys;
- `list append`: the batch's values appended to the bucket's `ListState` in one call
  (`appendList`), as a log of the bucket's changes would be written;
- `list read`: the whole list read back, as such a log would be replayed.

It prints µs per entry for each, summed over the tasks (what the state server and the worker
spend together), for every batch: the first ones warm up (workers, the JIT).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, DoubleType, LongType, StringType, StructField, StructType

from app.run.session import build_session
from state.spark.pipelined import wire

BUCKETS = 32
KINDS = ("map put", "map get", "list append", "list read")
ENTRY = StructType([StructField("value", BinaryType())])
TIMINGS = StructType(
    [
        StructField("kind", StringType()),
        StructField("entries", LongType()),
        StructField("seconds", DoubleType()),
    ]
)


class CallTimer(StatefulProcessor):
    def __init__(self, value_bytes: int, keys: int | None) -> None:
        self.value, self.keys = b"v" * value_bytes, keys

    def init(self, handle: StatefulProcessorHandle) -> None:
        key = StructType([StructField("key", BinaryType())])
        self.map = handle.getMapState("entries", key, ENTRY)
        self.list = handle.getListState("log", ENTRY)

    def handleInputRows(
        self, key: tuple, rows: Iterator[pa.RecordBatch], timer_values: object
    ) -> Iterator[pd.DataFrame]:
        ids = [i for batch in rows for i in batch.column("id").to_pylist()]
        names = [str(i if self.keys is None else i % self.keys).encode() for i in ids]
        spent: dict[str, float] = {}
        state = wire(self.map)
        assert state is not None
        started = time.perf_counter()
        state.write_values([(name, self.value) for name in names], [])
        spent["map put"] = time.perf_counter() - started
        started = time.perf_counter()
        state.get_values(names)
        spent["map get"] = time.perf_counter() - started
        entries = [len(names), len(names)]
        if self.keys is None:
            started = time.perf_counter()
            self.list.appendList([(self.value,) for _ in names])
            spent["list append"] = time.perf_counter() - started
            started = time.perf_counter()
            entries += [len(names), sum(1 for _ in self.list.get())]
            spent["list read"] = time.perf_counter() - started
        yield pd.DataFrame(
            {"kind": list(spent), "entries": entries, "seconds": list(spent.values())}
        )

    def close(self) -> None:
        pass


def main() -> None:
    per_batch = int(sys.argv[1]) if len(sys.argv) > 1 else 25_000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    value_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    keys = int(sys.argv[4]) if len(sys.argv) > 4 else None
    spark: SparkSession = build_session("local[2]")
    with tempfile.TemporaryDirectory() as work:
        inputs = Path(work) / "in"
        for b in range(batches):
            spark.range(b * per_batch, (b + 1) * per_batch, numPartitions=1).write.mode(
                "append"
            ).parquet(str(inputs))
        rows = (
            spark.readStream.schema("id long")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(inputs))
            .withColumn("bucket", F.col("id") % BUCKETS)
        )
        timed = rows.groupBy("bucket").transformWithStateInPandas(
            CallTimer(value_bytes, keys), TIMINGS, "append", "None"
        )
        sums: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))

        def collect(frame, batch_id: int) -> None:
            for row in frame.collect():
                total = sums[batch_id][row["kind"]]
                total[0] += row["entries"]
                total[1] += row["seconds"]

        query = (
            timed.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(Path(work) / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    for batch in sorted(sums):
        timed_kinds = [kind for kind in KINDS if kind in sums[batch]]
        line = ", ".join(
            f"{kind} {sums[batch][kind][1] / max(sums[batch][kind][0], 1) * 1e6:.1f}"
            for kind in timed_kinds
        )
        logged = sums[batch]["list read"][0] if "list read" in timed_kinds else 0
        print(f"batch {batch}: µs per entry, tasks summed: {line} (list read over {logged:,})")


if __name__ == "__main__":
    main()
