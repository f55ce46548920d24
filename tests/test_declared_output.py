"""The output table's declared types (`OUTPUT_SCHEMA`): the select list cast to them as Flink's
INSERT casts, refused where Flink refuses, against what Flink 2.3 did for each pair of types."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from app.plan.declared_output import declared_problem, declared_select
from app.plan.projection import project, zoned_selected
from serdes.records.encode import KEY_COLUMN, as_json, encode
from serdes.records.schema import parse_schema
from tests import flink_readings as readings

CASTS = readings.FLINK_SINK_CASTS
TYPES = list(CASTS["values"])  # the select column's types, column c<i> of the left input
VALUES = [
    -7,
    300,
    100000,
    5000000000,
    1.5,
    2.675,
    Decimal("123.45"),
    True,
    "abcdef",
    date(2024, 2, 29),
    datetime(2024, 1, 1, 10, 0, 0, 923000, tzinfo=UTC),
    datetime(2024, 1, 1, 10, 0, 0, 923000, tzinfo=UTC),
    b"\x01\x02",
]
COLUMNS = {
    "L": {c.name: c for c in parse_schema(", ".join(f"c{i} {t}" for i, t in enumerate(TYPES)))}
}
ZONED = {f"L_c{TYPES.index('TIMESTAMP_LTZ(3)')}"}


def _select(pair: dict) -> str:
    return f"L.c{TYPES.index(pair['select'])} AS a"


def test_a_select_column_is_refused_where_flinks_insert_refuses_its_type() -> None:
    for pair in CASTS["pairs"]:
        problem = declared_problem(_select(pair), parse_schema(f"a {pair['output']}"), COLUMNS)
        assert (problem is not None) == pair.get("refused", False), pair
    problem = declared_problem("L.c2 AS a", parse_schema("a STRING"), COLUMNS)
    assert problem == (
        "column a: the select list gives INT, which Flink does not cast to STRING on INSERT "
        "(write a CAST in the select list)"
    )
    # arithmetic typed as Flink types it: a DECIMAL and an INT add to a DECIMAL, no INT
    assert "gives DECIMAL, which Flink does not cast to INT" in declared_problem(
        "L.c6 + L.c2 AS a", parse_schema("a INT"), COLUMNS
    )
    assert "gives 2 columns, the output 1" in declared_problem(
        "L.c0 AS a, L.c1 AS b", parse_schema("a INT"), COLUMNS
    )


def _number_or_text(value: object) -> object:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


@pytest.mark.spark
def test_each_column_is_written_as_flinks_insert_writes_it(spark) -> None:
    """Cut to a VARCHAR(n), padded to a CHAR(n), rounded half up to a DECIMAL's scale, NULL
    beyond its digits, a time cut to TIMESTAMP(0) or to its DATE, a `Z` as a TIMESTAMP_LTZ:
    each value written as Flink's json format wrote it (numbers by their value: Flink writes a
    DECIMAL's 300 as `3E+2`)."""
    schema = T.StructType(
        [T.StructField("op", T.StringType()), T.StructField(KEY_COLUMN, T.BinaryType())]
        + [T.StructField(f"L_{name}", column.spark_type) for name, column in COLUMNS["L"].items()]
    )
    joined = spark.createDataFrame([("+I", b"{}", *VALUES)], schema)
    written = [pair for pair in CASTS["pairs"] if "written" in pair]
    for pair in written:
        select = declared_select(_select(pair), parse_schema(f"a {pair['output']}"), COLUMNS)
        rows = encode(project(joined, select, keep=[KEY_COLUMN]), "append")
        [record] = as_json(rows, zoned_selected(select, ZONED)).collect()
        ours, flinks = json.loads(record.value)["a"], json.loads(pair["written"])["a"]
        assert _number_or_text(ours) == _number_or_text(flinks), (pair, select)


def test_a_column_of_its_declared_type_is_not_cast() -> None:
    declared = parse_schema("a STRING, b TIMESTAMP(3), c DOUBLE")
    columns = {"L": {c.name: c for c in parse_schema("s VARCHAR(5), t TIMESTAMP(3), i INT")}}
    assert (
        declared_select("L.s AS a, L.t AS b, L.i AS c", declared, columns)
        == "L.s AS a, L.t AS b, CAST(L.i AS DOUBLE) AS `c`"
    )
    # bytes, which Flink casts from bytes alone, as they are, whatever computed them
    columns["L"]["y"] = parse_schema("y BYTES")[0]
    case = "CASE WHEN L.i > 0 THEN L.y END AS y"
    assert declared_select(case, parse_schema("y BYTES"), columns) == case
