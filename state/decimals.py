"""Flink's DECIMAL(p, s) of a number, as `DecimalData.fromBigDecimal` makes it: rounded half up
to `s` places, NULL where it then has more than `p` digits. One rule for a value read into a
DECIMAL column (`serdes.records.values`) and a CAST to one (`state.expr.functions`)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation


def decimal_fitting(precision: int, scale: int) -> Callable[[Decimal], Decimal | None]:
    """The fitting of a number into DECIMAL(precision, scale); None for one beyond it, or one
    that is not finite."""
    quantum = Decimal(1).scaleb(-scale)
    # quantizing in the column's precision signals a value of more digits, once rounded
    digits = Context(prec=precision, rounding=ROUND_HALF_UP)

    def fitted(number: Decimal) -> Decimal | None:
        try:
            return number.quantize(quantum, context=digits)
        except InvalidOperation:
            return None

    return fitted
