"""A window join's inputs through its windowing table function: each row once per window that
holds it, with the window's columns appended to it, as Flink's TUMBLE, HOP and CUMULATE give
them (`window_start`, `window_end`, `window_time` = end - 1 ms, epoch-aligned plus the offset)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType, TimestampType

from app.config.windows import Windowing
from state.columns import OP, SEQ, TS
from state.joins.specs import WINDOW_COLUMNS


def windowed_type(row: StructType) -> StructType:
    """A row type with its window's columns."""
    return StructType([*row, *(StructField(c, TimestampType()) for c in WINDOW_COLUMNS)])


def _ends(time: Column, windows: Windowing) -> Column:
    """The ends (epoch ms) of the windows that hold `time` (epoch ms)."""
    offset = F.lit(windows.offset_ms)
    if windows.function == "TUMBLE":
        start = time - F.pmod(time - offset, F.lit(windows.size_ms))
        return F.array(start + windows.size_ms)
    step = F.lit(windows.step_ms)
    if windows.function == "HOP":  # the last start at or before the time, and the ones before
        last_end = time - F.pmod(time - offset, step) + windows.size_ms
        return F.sequence(last_end - windows.size_ms + windows.step_ms, last_end, step)
    start = time - F.pmod(time - offset, F.lit(windows.size_ms))  # CUMULATE: its whole window's
    first_end = time - F.pmod(time - offset, step) + windows.step_ms
    return F.sequence(first_end, start + windows.size_ms, step)


def windowed(changes: DataFrame, windows: Windowing, row: StructType) -> DataFrame:
    """An input's changes (`op`, `seq`, `ts`, `row` of type `row`), each once per window that
    holds its event time, its row with that window's columns."""
    end = F.explode(_ends(F.col(TS), windows)).alias("window_end_ms")
    exploded = changes.select(OP, SEQ, TS, "row", end)
    end_ms = F.col("window_end_ms")
    start_ms = (  # a CUMULATE window starts where its whole window does
        end_ms - windows.size_ms
        if windows.function != "CUMULATE"
        else F.col(TS) - F.pmod(F.col(TS) - F.lit(windows.offset_ms), F.lit(windows.size_ms))
    )
    bounds = {
        "window_start": F.timestamp_millis(start_ms),
        "window_end": F.timestamp_millis(end_ms),
        "window_time": F.timestamp_millis(end_ms - 1),
    }
    fields = [F.col("row")[f.name].alias(f.name) for f in row]
    fields += [bounds[c].alias(c) for c in WINDOW_COLUMNS]
    return exploded.select(OP, SEQ, TS, F.struct(*fields).alias("row"))
