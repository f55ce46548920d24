"""Join conditions written the way Flink users write them, over the aliases `L` and `R`.

The text is parsed with sqlglot (a real SQL parser), so an error can point at the part of the
condition it could not use instead of failing somewhere inside the join.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

ALIASES = ("L", "R")


class ConditionError(ValueError):
    """A join condition that cannot be used; the message quotes the offending part."""


def parse_condition(text: str) -> exp.Expression:
    """Parse a boolean condition whose every column is qualified by `L.` or `R.`."""
    try:
        tree = sqlglot.parse_one(text)
    except ParseError as err:
        first = err.errors[0]
        raise ConditionError(
            f"{first['description']} at column {first['col']}: "
            f"...{first['start_context']}>>{first['highlight']}<<{first['end_context']}..."
        ) from None
    for column in tree.find_all(exp.Column):
        if column.table.upper() not in ALIASES:
            raise ConditionError(
                f"column {column.sql()!r} must be qualified by L. (left) or R. (right)"
            )
    return tree
