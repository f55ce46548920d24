"""What Flink 2.3 computed, for the join condition's and the select list's tests: FLOOR, CEIL
and EXTRACT over times on and beside each unit's boundaries (`fixtures/functions/
flink_time.json`), TRY_CAST of texts to numbers and BOOLEAN (`fixtures/functions/
flink_text_casts.json`), INITCAP, what an INSERT casts a query's column to, or refuses
(`fixtures/functions/flink_sink_casts.json`), and what the json format reads a JSON value into
a column of each type as (`fixtures/functions/flink_json_reads.json`).

Flink counts a time before 1970 but not at midnight in the next day (its CAST to DATE, YEAR,
MILLISECOND: 1969-12-31 23:59:59.999 is 1970-01-01, its millisecond -1); that value is computed
as the calendar has it here, and left out of the comparisons.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

FLINK_TIME = json.loads((Path(__file__).parent / "fixtures/functions/flink_time.json").read_text())
FLINK_MISCOUNTS = "1969-12-31 23:59:59.999"
FLINK_TEXT_CASTS = json.loads(
    (Path(__file__).parent / "fixtures/functions/flink_text_casts.json").read_text()
)
FLINK_SINK_CASTS = json.loads(
    (Path(__file__).parent / "fixtures/functions/flink_sink_casts.json").read_text()
)
FLINK_JSON_READS = json.loads(
    (Path(__file__).parent / "fixtures/functions/flink_json_reads.json").read_text()
)
# the expressions both places compute
EXPRESSIONS = list(FLINK_TIME["results"])


def qualified(expression: str) -> str:
    """An expression of the fixture's `t` and `d` as of the left input's columns."""
    for name in ("t", "d"):
        expression = expression.replace(f"({name}", f"(L.{name}")
        expression = expression.replace(f"FROM {name})", f"FROM L.{name})")
    return expression


def as_flink_prints(value: object) -> object:
    """A value as the fixtures hold Flink's: a time as Python prints it, a date ISO, a number,
    a DECIMAL as its text (no sign on a zero), a DOUBLE that is not finite as Python's repr."""
    if isinstance(value, Decimal):
        return str(value + 0)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, datetime):
        return str(value.replace(tzinfo=None))
    return value.isoformat() if isinstance(value, date) else value


# Flink's INITCAP is Calcite's: words of ASCII letters and digits, any other character as it is
FLINK_INITCAP = (
    "INITCAP('straße İstanbul émile ÉMILE o''neil hello wORLD foo-bar x1y a😀b x_y')",
    "StraßE İStanbul éMile ÉMile O'Neil Hello World Foo-Bar X1y A😀B X_Y",
)
