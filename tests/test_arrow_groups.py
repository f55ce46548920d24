"""How the service's workers cut a stateful stage's Arrow batches into its groups."""

from __future__ import annotations

import pyarrow as pa

from state.spark.arrow_groups import groups


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
