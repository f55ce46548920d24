"""The texts Flink (Java) gives values that become strings: `Double.toString` for a double (a
`CAST(x AS STRING)`, a JSON or Avro number read into a STRING column), Jackson's compact JSON for
a JSON object or array read into a STRING column (its doubles written by `Double.toString`,
`{"a":1.0E20,"b":[1.1]}`). Python's own texts differ (`1e+20`, `1e-05`, `12345678.0` where Java
writes `1.2345678E7`)."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any

# Java writes a double in plain notation from 10^-3 up to 10^7, in scientific notation beyond
_PLAIN = (1e-3, 1e7)
_TWO_DIGITS = Context(prec=2, rounding=ROUND_HALF_EVEN)
# Jackson's escapes in a string: the short ones, and every other control character as \u00XX
_ESCAPES = {c: f"\\u{c:04X}" for c in range(0x20)} | {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
}


def double_text(number: float) -> str:
    """Java's `Double.toString(number)` (JDK 19 and later: the shortest decimal that reads back
    as `number`, at least two digits in scientific notation, the closest of two where one
    would do: 4.9E-324, not 5.0E-324)."""
    if not math.isfinite(number):
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    shortest = repr(number)
    if number == 0 or _PLAIN[0] <= abs(number) < _PLAIN[1]:
        return shortest  # Python's plain notation is Java's there, `.0` included
    decimal = Decimal(shortest).normalize()
    if len(decimal.as_tuple().digits) == 1:
        decimal = _TWO_DIGITS.plus(Decimal(number))  # the exact double, to two digits
    sign, digits, exponent = decimal.as_tuple()
    power = len(digits) - 1 + int(exponent)
    fraction = "".join(map(str, digits[1:])).rstrip("0") or "0"
    return f"{'-' if sign else ''}{digits[0]}.{fraction}E{power}"


def json_text(value: Any) -> str:
    """`value` (read from JSON: a dict, list, string, number, bool or None) as Jackson writes it
    compactly; another value (an Avro field's bytes or time) as its text."""
    if isinstance(value, str):
        return f'"{value.translate(_ESCAPES)}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):  # a number's text as written is not Jackson's: `1.10` is 1.1
        return double_text(value)
    if isinstance(value, dict):
        fields = (f"{json_text(str(name))}:{json_text(item)}" for name, item in value.items())
        return "{" + ",".join(fields) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(json_text, value)) + "]"
    return json_text(str(value))
