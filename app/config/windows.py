"""A window join's windowing table function, as `JOIN_WINDOW` or Flink SQL names it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.config.parsers import duration_ms

# Flink's windowing functions and what each takes, in its order (an offset may follow)
WINDOW_ARGUMENTS = {"TUMBLE": ("size",), "HOP": ("slide", "size"), "CUMULATE": ("step", "size")}


@dataclass(frozen=True)
class Windowing:
    """TUMBLE (`size`), HOP (`step` the slide) or CUMULATE (`step`), epoch-aligned, shifted by
    `offset_ms`, as Flink's windowing table functions assign rows to windows."""

    function: str
    size_ms: int
    step_ms: int = 0
    offset_ms: int = 0

    def __str__(self) -> str:
        values = [self.step_ms, self.size_ms] if self.step_ms else [self.size_ms]
        values += [self.offset_ms] if self.offset_ms else []
        return f"{self.function}({', '.join(f'{v}ms' for v in values)})"


def windowing(text: str) -> Windowing:
    """`TUMBLE(10s)`, `HOP(5s, 10s)` (slide, size), `CUMULATE(2s, 10s)` (step, size), each
    with an optional offset last; a HOP's or CUMULATE's size a whole number of its steps."""
    found = re.fullmatch(r"\s*(\w+)\s*\((.*)\)\s*", text)
    if not found or found.group(1).upper() not in WINDOW_ARGUMENTS:
        raise ValueError(text)
    function = found.group(1).upper()
    values = [duration_ms(v.strip()) for v in found.group(2).split(",")]
    wanted = len(WINDOW_ARGUMENTS[function])
    if len(values) not in (wanted, wanted + 1) or any(v <= 0 for v in values[:wanted]):
        raise ValueError(text)
    offset = values[wanted] if len(values) > wanted else 0
    if function == "TUMBLE":
        return Windowing(function, values[0], 0, offset)
    step, size = values[:2]
    if size % step:
        raise ValueError(text)
    return Windowing(function, size, step, offset)
