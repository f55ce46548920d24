"""Which records a view of a JSON topic may keep, told from their bytes, a batch at a time.

Every view of a topic reads all of its records (`JsonFormat` with a `WHERE`), and most belong
to another view: Nexmark's `person` view keeps 2 in 100 of its topic's records. Parsing each one
to find its `WHERE` field costs a JSON parse and Python's loop per record; a regular expression
over the batch's values (Arrow's RE2, in C) tells most of them apart first. It must never drop a
record the view keeps, so it is a superset: a record may be kept unless, for a field of the
`WHERE`, no `"field":` in it is followed by a value that could read as the literal. Anything
short of certain stays: a backslash anywhere (an escaped name or value could hide a match), a
value of another kind (the column's reading may turn `"10"` into 10 or 10 into `'10'`), a
number with a fraction or an exponent (10.0 is the INT 10), a field that is only nested (the
parse then finds no top-level field). Only the view that does not dead-letter its topic's
unreadable records may skip records unparsed (`JsonFormat`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

RecordFilter = Callable[[pa.Array], pa.Array]  # the values' column -> which records may be kept


def _plain(text: str) -> bool:
    """Text that appears in JSON as it is (no escape), in ASCII (the bytes RE2 reads)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def _value_pattern(kept: Any) -> str | None:
    """What may follow `"field":` where the field could read as `kept`; None: not told."""
    if isinstance(kept, bool):
        return None
    if isinstance(kept, int):
        # the literal and not a longer number (JSON's -0 is 0); a value that is not a plain
        # integer (a string, an object, a number with a fraction or exponent); a minus before
        # no digit
        literal = "-?0" if kept == 0 else re.escape(str(kept))
        return rf"{literal}(?:[^0-9.eE]|$)|[^-0-9\s]|-?[0-9]+[.eE]|-[^0-9]"
    if isinstance(kept, str) and _plain(kept):
        return rf'"{re.escape(kept)}"|[^"\s]'  # the string itself, or a value of another kind
    return None


def view_filter(where: Sequence[tuple[str, Any]]) -> RecordFilter | None:
    """The records a view with this `WHERE` (field, literal) may keep; None where no field of it
    can be told from bytes."""
    patterns = [
        rf'\\|"{re.escape(field)}"\s*:\s*(?:{value})'
        for field, kept in where
        if _plain(field) and (value := _value_pattern(kept)) is not None
    ]
    if not patterns:
        return None

    def may_keep(values: pa.Array) -> pa.Array:
        mask = None
        for pattern in patterns:
            found = pc.match_substring_regex(values, pattern)
            mask = found if mask is None else pc.and_(mask, found)
        return pc.fill_null(mask, True)  # a record without a value: the parse says what it is

    return may_keep
