"""How a stateful stage's rows reach the frame in the service's workers: each group's rows as
slices of the Arrow batches Spark sends, not as pandas DataFrames built row by row.

pyspark's `transformWithStateInPandas` worker turns every Arrow batch into pandas, walks it a
row at a time (`itertuples`) to regroup the rows by grouping key, and builds a DataFrame per
group from those row tuples; the frame then takes the columns back out. That regrouping costs
several times the join it feeds (`docs/performance.md`). Spark sends a group's rows one after
another, so the groups are runs of equal keys: here each run is cut out of the batch where it
lies (a zero-copy slice), a group that spans batches as several slices, and the frame reads
each column of them whole (`state.spark.frame.StatefulFrame`).

`install` wraps pyspark's `read_udfs` in a worker (the daemon's, `app.run.worker_daemon`): for a
`transformWithStateInPandas` stage it keeps what pyspark made for it (the processor's function, the
grouping columns, the state client, the output's schema) and replaces how the input is grouped and
how the output becomes Arrow; every other kind of UDF is pyspark's own. The rest of the protocol is
pyspark's: the function called once per group with that group's rows, then for the timers due at
the watermark Spark gave the task, then to complete the partition. The frame's output comes back as
plain columns (`OutputColumns`), made into the output's Arrow types at once, where pyspark would
build a pandas DataFrame and convert it column by column; a pandas DataFrame is still converted as
pyspark does. Where pyspark's function does not have the parts named here (another pyspark), it is
left as it is, and the frame takes and gives pandas as before (`installed`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

# What pyspark's transformWithStateInPandas function is made of (its closure), by name
_PARTS = ("udf", "key_offsets", "value_offsets", "stateful_processor_api_client", "output_schema")

_installed = False


def installed() -> bool:
    """Whether this worker's stateful task groups by `groups` (and takes `OutputColumns`
    back)."""
    return _installed


class OutputColumns(dict):
    """A processor's output in a worker that `install`ed this: its columns' plain Python values
    by name (a timestamp as epoch microseconds), made into the output's Arrow batch here
    without pandas."""


def groups(
    batches: Iterator[pa.RecordBatch], key_offsets: list[int], value_offsets: list[int]
) -> Iterator[tuple[tuple, Iterator[pa.RecordBatch]]]:
    """Each group's key (a tuple of Python values) and its rows' value columns, as slices of
    `batches`, in the order the groups come; a group's slices in several batches are one
    group if they are next to each other, as Spark sends them."""

    def runs() -> Iterator[tuple[tuple, pa.RecordBatch]]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            values = batch.select(value_offsets)
            keys = [batch.column(o).to_numpy(zero_copy_only=False) for o in key_offsets]
            changed = np.zeros(batch.num_rows - 1, dtype=bool)
            for column in keys:
                changed |= column[1:] != column[:-1]
            starts = [0, *(np.flatnonzero(changed) + 1).tolist(), batch.num_rows]
            key_lists = [batch.column(o).take(starts[:-1]).to_pylist() for o in key_offsets]
            for i, (start, end) in enumerate(itertools.pairwise(starts)):
                yield tuple(k[i] for k in key_lists), values.slice(start, end - start)

    for key, run in itertools.groupby(runs(), key=lambda found: found[0]):
        yield key, (rows for _, rows in run)


def _arrow_grouped(parts: dict[str, Any], convert: Callable[[Any], pa.RecordBatch]) -> Callable:
    """pyspark's transformWithStateInPandas function made of its `parts`, the input grouped
    by `groups`."""
    from pyspark.sql.streaming.stateful_processor_util import (
        TransformWithStateInPandasFuncMode as Mode,
    )

    udf, client = parts["udf"], parts["stateful_processor_api_client"]

    def converted(results: Iterator[Any]) -> Iterator[pa.RecordBatch]:
        for result in results:
            yield convert(result)

    def transform_with_state(split_index: int, batches: Iterator[pa.RecordBatch]) -> Iterator:
        for key, rows in groups(batches, parts["key_offsets"], parts["value_offsets"]):
            yield from converted(udf(client, Mode.PROCESS_DATA, key, rows))
        yield from converted(udf(client, Mode.PROCESS_TIMER, None, iter([])))
        yield from converted(udf(client, Mode.COMPLETE, None, iter([])))

    return transform_with_state


def install() -> None:
    """Group a transformWithStateInPandas stage's input by `groups` in this worker."""
    import pyspark.worker as worker
    from pyspark.util import PythonEvalType

    read_udfs = worker.read_udfs

    def read_udfs_grouping_arrow(pickle_ser, udf_infos, eval_type, runner_conf, eval_conf) -> Any:
        func, profiler, deserializer, serializer = read_udfs(
            pickle_ser, udf_infos, eval_type, runner_conf, eval_conf
        )
        if eval_type != PythonEvalType.SQL_TRANSFORM_WITH_STATE_PANDAS_UDF:
            return func, profiler, deserializer, serializer
        closure = dict(
            zip(
                func.__code__.co_freevars,
                (cell.cell_contents for cell in func.__closure__ or ()),
                strict=True,
            )
        )
        global _installed
        _installed = set(_PARTS) <= set(closure)  # else not the pyspark this was written for
        if not _installed:
            return func, profiler, deserializer, serializer
        return (
            _arrow_grouped(closure, _output_to_arrow(closure, runner_conf)),
            profiler,
            deserializer,
            serializer,
        )

    worker.read_udfs = read_udfs_grouping_arrow


def _output_to_arrow(parts: dict[str, Any], runner_conf: Any) -> Callable[[Any], pa.RecordBatch]:
    """An output as the one struct column pyspark's function makes of it: `OutputColumns`
    straight into the output's Arrow types, a pandas DataFrame as pyspark converts it."""
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.pandas.types import to_arrow_type

    output = parts["output_schema"]
    struct = to_arrow_type(output.fields[0].dataType, timezone=runner_conf.timezone)

    def convert(result: Any) -> pa.RecordBatch:
        if isinstance(result, OutputColumns):
            arrays = [pa.array(result[f.name], type=f.type) for f in struct]
            return pa.RecordBatch.from_arrays(
                [pa.StructArray.from_arrays(arrays, fields=list(struct))], [output.names[0]]
            )
        return PandasToArrowConversion.convert(
            [result],
            output,
            timezone=runner_conf.timezone,
            safecheck=runner_conf.safecheck,
            arrow_cast=True,
            assign_cols_by_name=runner_conf.assign_cols_by_name,
            int_to_decimal_coercion_enabled=runner_conf.int_to_decimal_coercion_enabled,
        )

    return convert
