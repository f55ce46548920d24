"""Arithmetic on a join condition's values as Flink's generated Java code does it, where Python's
own differs: a whole number divided by one is truncated toward zero (-7 / 2 is -3, Python's
`//` gives -4) and its remainder has the dividend's sign (-7 % 2 is -1, not 1); a DOUBLE meets a
DECIMAL as a DOUBLE (Python refuses to mix them); a DOUBLE divided by zero is infinite or NaN,
a negative one's square root NaN, an overflowing power infinite (Python raises, which would fail
the task on every retry). A whole number divided by zero is NULL here: Flink's job fails on it.

Whole numbers are wrapped at their type's width where the condition's compiler knows it
(`state.expr.condition`): the values here carry none."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

Number = int | float | Decimal


def _widened(x: Any, y: Any) -> tuple[Any, Any]:
    """`x` and `y` in one type where a DECIMAL meets a DOUBLE: both DOUBLE, as Flink's planner
    makes them (Python refuses to add or order the two)."""
    if isinstance(x, Decimal) and isinstance(y, float):
        return float(x), y
    if isinstance(y, Decimal) and isinstance(x, float):
        return x, float(y)
    return x, y


def widened(values: Sequence[Any]) -> Sequence[Any]:
    """`_widened` of any number of values (GREATEST, LEAST): all DOUBLE where one is."""
    if any(isinstance(v, float) for v in values):
        return [float(v) if isinstance(v, Decimal) else v for v in values]
    return values


def _widening(operation: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda x, y: operation(*_widened(x, y))


add = _widening(operator.add)
subtract = _widening(operator.sub)
multiply = _widening(operator.mul)


def _both_whole(x: Any, y: Any) -> bool:
    return isinstance(x, int) and isinstance(y, int)


def _by_zero(x: float, y: float) -> float:
    """A DOUBLE divided by zero, as IEEE 754 (and Java) has it."""
    if x == 0 or math.isnan(x):
        return math.nan
    return math.copysign(math.inf, x) * math.copysign(1.0, y)


def divide(x: Any, y: Any) -> Any:
    x, y = _widened(x, y)
    if isinstance(x, float) or isinstance(y, float):
        return _by_zero(x, y) if y == 0 else x / y
    if y == 0:
        return None
    if _both_whole(x, y):
        quotient = abs(x) // abs(y)
        return quotient if (x < 0) == (y < 0) else -quotient
    return Decimal(x) / Decimal(y)


def remainder(x: Any, y: Any) -> Any:
    x, y = _widened(x, y)
    if isinstance(x, float) or isinstance(y, float):
        return math.nan if y == 0 else math.fmod(x, y)
    if y == 0:
        return None
    if _both_whole(x, y):
        rest = abs(x) % abs(y)
        return rest if x >= 0 else -rest
    return Decimal(x) % Decimal(y)  # a Decimal's remainder has the dividend's sign, as Java's


def _whole(value: Any, rounding: str, whole: Callable[[Any], int]) -> Any:
    """`value` rounded to a whole number of its own type (Flink's FLOOR of a DOUBLE is a
    DOUBLE, of a DECIMAL a DECIMAL); an infinite or NaN double as it is."""
    if isinstance(value, float):
        return float(whole(value)) if math.isfinite(value) else value
    if isinstance(value, Decimal):
        return value.to_integral_value(rounding=rounding)
    return whole(value)


def floor(value: Any) -> Any:
    return _whole(value, ROUND_FLOOR, math.floor)


def ceil(value: Any) -> Any:
    return _whole(value, ROUND_CEILING, math.ceil)


def power(base: Number, exponent: Number) -> float:
    """Java's `Math.pow`: NaN for a negative base to a fraction, infinite beyond a double."""
    base, exponent = float(base), float(exponent)
    try:
        return math.pow(base, exponent)
    except ValueError:  # a negative base to a fraction, or zero to a negative power
        return math.inf if base == 0 else math.nan
    except OverflowError:
        odd = exponent.is_integer() and exponent % 2 == 1
        return -math.inf if base < 0 and odd else math.inf


def sqrt(value: Number) -> float:
    return math.sqrt(value) if value >= 0 else math.nan
