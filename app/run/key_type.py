"""The type a join's equal keys are compared in, as Flink's planner widens them: `L.k = R.k` of
an INT and a BIGINT compares BIGINTs, of an INT and a DOUBLE DOUBLEs. Both sides' keys are cast
to it before they are hashed to a key: cast to one side's type, a DOUBLE 1.5 would be the INT 1
and join it, a BIGINT 2^32 + 1 would wrap to the INT 1 (the join takes rows of one key for
equal, `state.expr.condition.compile_matcher`)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import types as T

# A whole number's digits, as a DECIMAL holds it
_WHOLE_DIGITS = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 20}
_FLOATING = (T.FloatType, T.DoubleType)


def common_key_type(types: Sequence[T.DataType]) -> T.DataType:
    """The type keys of `types` compare in: theirs where they agree; a DOUBLE where one is a
    floating point; the widest whole number; a DECIMAL wide enough for each; else the first's
    (the planner lets only numbers of different types compare)."""
    first = types[0]
    if all(t == first for t in types):
        return first
    if any(isinstance(t, _FLOATING) for t in types):
        return T.DoubleType()
    whole = [_WHOLE_DIGITS.get(type(t)) for t in types]
    if all(digits is not None for digits in whole):
        return max(types, key=lambda t: _WHOLE_DIGITS[type(t)])
    if all(isinstance(t, T.DecimalType) or type(t) in _WHOLE_DIGITS for t in types):
        decimals = [
            (t.precision, t.scale) if isinstance(t, T.DecimalType) else (_WHOLE_DIGITS[type(t)], 0)
            for t in types
        ]
        scale = max(s for _, s in decimals)
        integral = max(p - s for p, s in decimals)
        return T.DecimalType(min(38, integral + scale), scale)
    return first
