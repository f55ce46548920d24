"""How the service's workers cut a stateful stage's Arrow batches into its groups."""

from __future__ import annotations

import pyarrow as pa

from state.spark.arrow_groups import _timers_up_to_batch_watermark, groups


def test_groups_are_runs_of_equal_keys_joined_across_batches() -> None:
    """Spark sends a group's rows one after another, over batch boundaries: each run of one
    key (of two columns here) is one group, its rows the value columns of its slices."""
    batches = [
        pa.RecordBatch.from_pydict({"a": [1, 1, 1], "b": ["x", "x", "y"], "v": [10, 11, 12]}),
        pa.RecordBatch.from_pydict({"a": [], "b": [], "v": []}),
        pa.RecordBatch.from_pydict({"a": [1, 2], "b": ["y", "y"], "v": [13, 14]}),
        pa.RecordBatch.from_pydict({"a": [2], "b": ["y"], "v": [15]}),
    ]
    found = [(key, list(slices)) for key, slices in groups(iter(batches), [0, 1], [2])]
    assert [
        (key, [v for s in slices for v in s.column("v").to_pylist()]) for key, slices in found
    ] == [
        ((1, "x"), [10, 11]),
        ((1, "y"), [12, 13]),
        ((2, "y"), [14, 15]),
    ]
    assert {tuple(s.schema.names) for _, slices in found for s in slices} == {("v",)}


class Client:
    """pyspark's state client as far as the task's timers read it: Spark's watermark, fetched
    once and kept for the task."""

    def __init__(self, watermark: int) -> None:
        self.spark_watermark = watermark
        self._watermark_timestamp = -1

    def get_timestamps(self, _mode: str) -> tuple[int, int]:
        if self._watermark_timestamp == -1:
            self._watermark_timestamp = self.spark_watermark
        return 0, self._watermark_timestamp


class Processor:
    def __init__(self, shown: int | None) -> None:
        self.shown = shown

    def batch_watermark(self) -> int | None:
        return self.shown


class Utils:
    """What pyspark pickles as a transformWithStateInPandas stage's function: a method of an
    object that holds the processor."""

    def __init__(self, processor: Processor) -> None:
        self._stateful_processor = processor

    def transformWithStateUDF(self) -> None: ...


def test_a_tasks_timers_fire_up_to_the_watermark_its_rows_show_never_below_sparks() -> None:
    for shown, spark, fired_up_to in ((900, 400, 900), (300, 400, 400), (None, 400, 400)):
        client = Client(spark)
        _timers_up_to_batch_watermark(Utils(Processor(shown)).transformWithStateUDF, client)
        assert client.get_timestamps("eventtime") == (0, fired_up_to)
