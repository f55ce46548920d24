"""A select list's EXTRACT, FLOOR(t TO unit) and CEIL(t TO unit) rewritten as Spark SQL that
computes what Flink's do (the join condition's are `state.expr.functions.time_bound` and
`extract`).

Spark's `EXTRACT` lacks 9 of Flink's 19 units (its MILLISECONDS holds the seconds too, where
Flink's MILLISECOND is within the second), and its `DATE_TRUNC('WEEK')` starts a week on Monday
where Flink's starts it on Sunday. Flink's FLOOR and CEIL of a unit of days or more are
Calcite's `julianDateFloor`, on the date alone: a CEIL of a time on the 1st of a month TO MONTH
is that 1st, and a CEIL TO QUARTER of any day but January 1st is the next quarter's start
(Calcite's test is `month > 1 || day > 1`).
A bound of a DATE is a DATE, of a TIMESTAMP a TIMESTAMP.
"""

from __future__ import annotations

from sqlglot import exp

from app.plan.spark_template import VALUE, spark_template
from state.expr.functions import time_unit

_DAY = f"CAST({VALUE} AS DATE)"
_YEAR = f"YEAR({VALUE})"

_EXTRACTED = {  # Flink's unit: Spark SQL of the same number, where Spark's EXTRACT differs
    "MILLISECOND": f"CAST(DATE_FORMAT({VALUE}, 'SSS') AS BIGINT)",
    "MICROSECOND": f"CAST(DATE_FORMAT({VALUE}, 'SSSSSS') AS BIGINT)",
    "NANOSECOND": f"CAST(DATE_FORMAT({VALUE}, 'SSSSSS') AS BIGINT) * 1000",
    "EPOCH": f"UNIX_SECONDS(CAST({VALUE} AS TIMESTAMP))",
    "DECADE": f"FLOOR({_YEAR} / 10)",
    "CENTURY": f"FLOOR(({_YEAR} + 99) / 100)",
    "MILLENNIUM": f"FLOOR(({_YEAR} + 999) / 1000)",
    "ISODOW": f"WEEKDAY({VALUE}) + 1",
    "ISOYEAR": f"YEAR(DATE_ADD({_DAY}, 3 - WEEKDAY({VALUE})))",
}

_SINCE_SUNDAY = f"(DAYOFWEEK({_DAY}) - 1)"
_WEEK_START = f"DATE_ADD({_DAY}, -{_SINCE_SUNDAY})"
_PAST_NEW_YEAR = f"(MONTH({_DAY}) > 1 OR DAY({_DAY}) > 1)"
_CALENDAR_BOUNDS = {  # unit: (FLOOR, CEIL) as a DATE
    "WEEK": (_WEEK_START, f"IF({_SINCE_SUNDAY} > 0, DATE_ADD({_WEEK_START}, 7), {_DAY})"),
    "MONTH": (
        f"TRUNC({_DAY}, 'MM')",
        f"IF(DAY({_DAY}) > 1, ADD_MONTHS(TRUNC({_DAY}, 'MM'), 1), {_DAY})",
    ),
    "QUARTER": (
        f"TRUNC({_DAY}, 'QUARTER')",
        f"IF({_PAST_NEW_YEAR}, ADD_MONTHS(TRUNC({_DAY}, 'QUARTER'), 3), {_DAY})",
    ),
    "YEAR": (
        f"TRUNC({_DAY}, 'YEAR')",
        f"IF({_PAST_NEW_YEAR}, MAKE_DATE({_YEAR} + 1, 1, 1), {_DAY})",
    ),
    "DECADE": (
        f"MAKE_DATE({_YEAR} - PMOD({_YEAR}, 10), 1, 1)",
        f"MAKE_DATE({_YEAR} - PMOD({_YEAR}, 10) + 10, 1, 1)",
    ),
    "CENTURY": (  # counted from a year 1: 1901, 2001
        f"MAKE_DATE({_YEAR} - PMOD({_YEAR} - 1, 100), 1, 1)",
        f"MAKE_DATE({_YEAR} - PMOD({_YEAR} - 1, 100) + 100, 1, 1)",
    ),
    "MILLENNIUM": (
        f"MAKE_DATE({_YEAR} - PMOD({_YEAR} - 1, 1000), 1, 1)",
        f"MAKE_DATE({_YEAR} - PMOD({_YEAR} - 1, 1000) + 1000, 1, 1)",
    ),
}


def _clock_bound(unit: str, up: bool) -> str:
    """FLOOR or CEIL of an instant to MILLISECOND, SECOND, MINUTE, HOUR or DAY."""
    floor = f"DATE_TRUNC('{unit}', {VALUE})"
    return f"IF({floor} = {VALUE}, {VALUE}, {floor} + INTERVAL 1 {unit})" if up else floor


def time_rewritten(node: exp.Expression, kind: str | None) -> exp.Expression:
    """`node`, an EXTRACT or a FLOOR or CEIL of a time TO a unit (`kind` the type of the value
    it takes: `DATE`, else a timestamp), as Spark computes Flink's; any other node as it is."""
    unit = time_unit(node)
    if unit is None:
        return node
    if isinstance(node, exp.Extract):
        value = node.expression
        if unit == "SECOND":  # whole seconds, not Spark's DECIMAL with the fraction
            return exp.Second(this=value.copy())
        template = _EXTRACTED.get(unit)
        if template is None:  # a unit Spark's EXTRACT counts as Flink's
            return node
        return spark_template(f"CAST({template} AS BIGINT)", value=value)
    up = isinstance(node, exp.Ceil)
    if unit in _CALENDAR_BOUNDS:
        bound = _CALENDAR_BOUNDS[unit][up]
        bound = bound if kind == "DATE" else f"CAST({bound} AS TIMESTAMP)"
    else:
        bound = _clock_bound(unit, up)
        bound = f"CAST({bound} AS DATE)" if kind == "DATE" else bound
    return spark_template(bound, value=node.this)
