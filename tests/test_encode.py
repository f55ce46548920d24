"""Output encodings of a changelog, run by Spark on a small batch of changes."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from app.plan.projection import filtered, project
from serdes.records.encode import (
    CAST_ERROR,
    KEY_COLUMN,
    as_json,
    divert_failed_casts,
    encode,
    json_text,
)
from tests import flink_readings as readings

pytestmark = pytest.mark.spark

CHANGES = [("+I", "a", 1), ("-U", "a", 1), ("+U", "a", 2), ("-D", "a", 2)]


def encoded(spark, encoding: str) -> list[tuple[str, dict | None, str]]:
    frame = spark.createDataFrame(
        [(op, json.dumps({"id": i}).encode(), i, v) for op, i, v in CHANGES],
        f"op string, {KEY_COLUMN} binary, id string, v int",
    )
    rows = as_json(encode(frame, encoding)).collect()
    return [
        (json.loads(r.key)["id"], r.value and json.loads(r.value), dict(r.headers)["op"].decode())
        for r in rows
    ]


def test_retract_carries_the_kind_in_value_and_header(spark) -> None:
    assert [(v["op"], v["v"], h) for _k, v, h in encoded(spark, "retract")] == [
        ("+I", 1, "+I"),
        ("-U", 1, "-U"),
        ("+U", 2, "+U"),
        ("-D", 2, "-D"),
    ]


def test_upsert_drops_update_befores_and_deletes_with_tombstones(spark) -> None:
    assert encoded(spark, "upsert") == [
        ("a", {"id": "a", "v": 1}, "+I"),
        ("a", {"id": "a", "v": 2}, "+U"),
        ("a", None, "-D"),
    ]


def test_after_a_filter_an_upsert_tombstones_the_row_an_update_took_out_of_it(spark) -> None:
    """`JOIN_WHERE R.v < 2`: the update to 2 leaves the filter's rows, so its `+U` is dropped;
    its `-U` must then delete the key's row, as Flink's upsert-kafka sink writes a before-image
    where a filter keeps one, or the topic would keep `v = 1` for good."""
    frame = spark.createDataFrame(
        [(op, json.dumps({"id": i}).encode(), i, v) for op, i, v in CHANGES[:3]],
        f"op string, {KEY_COLUMN} binary, L_id string, R_v int",
    )
    rows = as_json(encode(filtered(frame, "R.v < 2"), "upsert", filtered=True)).collect()
    assert [(r.value and json.loads(r.value), dict(r.headers)["op"].decode()) for r in rows] == [
        ({"L_id": "a", "R_v": 1}, "+I"),
        (None, "-U"),
    ]


def test_debezium_json_is_what_flink_writes(spark) -> None:
    values = [v for _k, v, _h in encoded(spark, "debezium-json")]
    assert values == [
        {"before": None, "after": {"id": "a", "v": 1}, "op": "c"},
        {"before": {"id": "a", "v": 1}, "after": None, "op": "d"},
        {"before": None, "after": {"id": "a", "v": 2}, "op": "c"},
        {"before": {"id": "a", "v": 2}, "after": None, "op": "d"},
    ]


# Timestamps as Flink 2.3's JSON format wrote them (a filesystem sink, 'format' = 'json'):
# the fraction digits the value needs, microseconds kept.
FLINK_TIMESTAMP_TEXTS = [
    (datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "2024-01-02 03:04:05"),
    (datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC), "2024-01-02 03:04:05.5"),
    (datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=UTC), "2024-01-02 03:04:05.12"),
    (datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), "2024-01-02 03:04:05.123456"),
    (datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), "1969-12-31 23:59:59.999"),
]


def test_timestamps_are_written_as_flinks_json_format_writes_them(spark) -> None:
    frame = spark.createDataFrame(
        [("+I", b"{}", t, None) for t, _ in FLINK_TIMESTAMP_TEXTS],
        f"op string, {KEY_COLUMN} binary, t timestamp, k string",
    )
    texts = [text for _, text in FLINK_TIMESTAMP_TEXTS]
    for encoding, row_of in [("append", lambda v: v), ("debezium-json", lambda v: v["after"])]:
        values = [json.loads(r.value) for r in as_json(encode(frame, encoding)).collect()]
        assert [row_of(v) for v in values] == [{"t": text, "k": None} for text in texts]
    # a record key (OUTPUT_KEY) too, a NULL column in it kept as Flink's key format keeps it
    keys = frame.select(json_text(frame, F.struct("t", "k")).alias("key")).collect()
    assert [json.loads(r.key) for r in keys] == [{"t": text, "k": None} for text in texts]


def test_timestamp_ltz_columns_are_written_with_flinks_z(spark) -> None:
    """Flink's JSON writes a TIMESTAMP_LTZ as its TIMESTAMP text and a `Z`, and reads one back
    only so: in a value, a Debezium envelope's before and after, and a record key."""
    frame = spark.createDataFrame(
        [("+I", b"{}", t, t) for t, _ in FLINK_TIMESTAMP_TEXTS]
        + [("-D", b"{}", t, t) for t, _ in FLINK_TIMESTAMP_TEXTS[:1]],
        f"op string, {KEY_COLUMN} binary, t timestamp, z timestamp",
    )
    zoned = frozenset({"z"})
    texts = [text for _, text in FLINK_TIMESTAMP_TEXTS]
    rows = [{"t": text, "z": f"{text}Z"} for text in texts]
    values = [json.loads(r.value) for r in as_json(encode(frame, "debezium-json"), zoned).collect()]
    assert [v["after"] or v["before"] for v in values] == [*rows, rows[0]]
    keys = frame.select(json_text(frame, F.struct("t", "z"), zoned).alias("key")).collect()
    assert [json.loads(r.key) for r in keys] == [*rows, rows[0]]


def test_append_writes_the_row(spark) -> None:
    assert encoded(spark, "append")[0][1] == {"id": "a", "v": 1}


def test_a_row_a_cast_fails_on_goes_to_the_dead_letter_topic_with_the_reason(spark) -> None:
    """Flink fails the job on a CAST that cannot convert a value (a crash loop for a service):
    the row goes to the dead-letter topic instead, as it was joined, and the others flow. A
    CAST a CASE does not evaluate on the row does not fail, a NULL casts to NULL, and TRY_CAST
    stays NULL."""
    joined = spark.createDataFrame(
        [
            ("+I", b"1", "1", "12", "n", "p1"),
            ("+I", b"2", "2", "abc", "n", "p2"),
            ("+I", b"3", "3", "abc", "text", "p3"),
            ("-D", b"4", "4", None, "n", "p4"),
        ],
        f"op string, {KEY_COLUMN} binary, L_id string, L_qty string, L_kind string, R_name string",
    )
    select = (
        "L.id, CASE WHEN L.kind = 'n' THEN CAST(L.qty AS INT) END AS q, "
        "TRY_CAST(L.qty AS INT) AS t, R.name"
    )
    records = divert_failed_casts(
        as_json(encode(project(joined, select, keep=[KEY_COLUMN]), "retract")), "out.dlq"
    ).collect()
    written = {r.key.decode(): (r.topic, json.loads(r.value), dict(r.headers)) for r in records}
    assert {k: v for k, (topic, v, _h) in written.items() if topic is None} == {
        "1": {"op": "+I", "id": "1", "q": 12, "t": 12, "name": "p1"},
        "3": {"op": "+I", "id": "3", "q": None, "t": None, "name": "p3"},
        "4": {"op": "-D", "id": "4", "q": None, "t": None, "name": "p4"},
    }
    topic, letter, headers = written["2"]
    assert topic == "out.dlq"
    assert letter == {"op": "+I", "L": {"id": "2", "qty": "abc", "kind": "n"}, "R": {"name": "p2"}}
    assert headers["streamjoin.error"] == b"CAST(L.qty AS INT) failed on the value abc"
    assert headers["streamjoin.error.reason"] == b"cast"
    assert headers["op"] == b"+I"


def test_a_select_list_computes_as_flink_does(spark) -> None:
    """What Flink 2.3 computes on a row of a INT = -7, b INT = 2, x DOUBLE = -7.5, d
    DECIMAL(10,2) = -7.45, g BIGINT = 2^63-1, t TIMESTAMP(3) = 2024-03-05 06:07:08, where
    Spark's SQL computes otherwise: a whole number's quotient truncated, its overflow wrapped
    (Spark failed the task on it, and the query on every retry), a narrowing CAST, a DECIMAL
    divided by an INT literal to 13 places, a DOUBLE divided by zero, FLOOR and SIGN of their
    argument's type, a boolean's and a time's text, whole seconds, a negative length, INITCAP
    of ASCII words, a REPLACE of '', a CAST to TIMESTAMP(p) cut to p digits, GREATEST and LEAST
    NULL where an argument is (Spark's skipped it), a CAST to VARCHAR(n) cut to n characters
    and to CHAR(n) padded to n; a time moved by an interval (refused before)."""
    t = datetime(2024, 3, 5, 6, 7, 8, tzinfo=UTC)
    joined = spark.createDataFrame(
        [("+I", -7, 2, -7.5, Decimal("-7.45"), 2**63 - 1, t)],
        "op string, L_a int, L_b int, L_x double, L_d decimal(10,2), L_g bigint, L_t timestamp",
    )
    flink = {
        "L.a / L.b": -3,
        "L.a / L.b * 2": -6,
        "L.g + 1": -(2**63),
        "L.g * 2": -2,
        "-(L.a * 306783379)": -2147483643,
        "CAST(L.g AS INT)": -1,
        "TRY_CAST(L.g AS INT)": -1,
        "CAST('1.5' AS INT)": 1,
        "L.d / 3": Decimal("-2.4833333333333"),
        "L.x / 0": float("-inf"),
        "FLOOR(L.x)": -8.0,
        "SIGN(L.a)": -1,
        "SIGN(L.d)": Decimal("-1.00"),
        "CAST(L.a > L.b AS STRING)": "FALSE",
        "CAST(L.t AS STRING)": "2024-03-05 06:07:08.000",
        "EXTRACT(SECOND FROM L.t)": 8,
        "SUBSTR('abc', 2, L.b - 3)": None,
        "CAST(L.d * 1000 AS DECIMAL(4, 2))": None,
        readings.FLINK_INITCAP[0]: readings.FLINK_INITCAP[1],
        "REPLACE('abc', '', 'x')": "xaxbxcx",
        "REPLACE('', '', 'y')": "y",
        "REPLACE('abc', 'b', '')": "ac",
        "CAST(L.a AS VARCHAR(1))": "-",
        "CAST(L.d AS CHAR(7)) || '|'": "-7.45  |",
        "CAST(L.a > L.b AS VARCHAR(3))": "FAL",
        "L.t + INTERVAL '1' HOUR": datetime(2024, 3, 5, 7, 7, 8),
        "L.t - INTERVAL '1.5' SECOND": datetime(2024, 3, 5, 6, 7, 6, 500000),
        "L.t + INTERVAL '-1.5' SECOND": datetime(2024, 3, 5, 6, 7, 6, 500000),
        "GREATEST(L.a, L.b, 0)": 2,
        "LEAST(L.d, 1)": Decimal("-7.45"),
        "GREATEST(L.a, CAST(NULL AS INT))": None,
        "CAST('2024-03-05 06:07:08.999' AS TIMESTAMP(0))": datetime(2024, 3, 5, 6, 7, 8),
        "CAST('2024-03-05 06:07:08.123456' AS TIMESTAMP(3))": datetime(2024, 3, 5, 6, 7, 8, 123000),
        "CAST(CAST('1969-12-31 23:59:59.999' AS TIMESTAMP(3)) AS TIMESTAMP(0))": datetime(
            1969, 12, 31, 23, 59, 59
        ),
        "CAST(CAST('2024-03-05 06:07:08.999' AS TIMESTAMP(3)) AS TIMESTAMP(1))": datetime(
            2024, 3, 5, 6, 7, 8, 900000
        ),
    }
    select = ", ".join(f"{expression} AS e{i}" for i, expression in enumerate(flink))
    [row] = project(joined, select).collect()
    # a number's, a literal's and a CAST to a text never fail: no check for the dead letters
    assert CAST_ERROR not in row.asDict()
    computed = {expression: row[f"e{i}"] for i, expression in enumerate(flink)}
    assert computed == flink
    assert {e: type(v) for e, v in computed.items()} == {e: type(v) for e, v in flink.items()}


# A text with whitespace other than spaces around a whole number (`\t8\n`) is NULL in Flink,
# read in Spark; no other text to a whole number differs
_SPARK_READS_WHITESPACE = "\t8\n"


def test_a_select_lists_try_cast_of_a_text_to_a_whole_number_is_flinks(spark) -> None:
    """TRY_CAST of a text to TINYINT, INT and BIGINT as Flink 2.3 reads it: its fraction
    dropped (`1.9` and `1.00` are 1, Spark's TRY_CAST read both as NULL), beyond the type
    NULL; and, in a `JOIN_WHERE`, with an INT divided by an INT beside it (refused as a CAST)."""
    casts = readings.FLINK_TEXT_CASTS
    whole = [to for to in casts["results"] if to in ("TINYINT", "INT", "BIGINT")]
    rows = [("+I", i, text, 1) for i, text in enumerate(casts["values"])]
    joined = spark.createDataFrame(rows, "op string, L_i int, L_s string, L_b int")
    select = ", ".join(f"TRY_CAST(L.s AS {to}) AS `{to}`" for to in whole)
    for row in project(joined, f"L.i AS i, {select}").collect():
        text = casts["values"][row["i"]]
        if text != _SPARK_READS_WHITESPACE:
            assert {to: row[to] for to in whole} == {
                to: casts["results"][to][row["i"]] for to in whole
            }, repr(text)
    kept = filtered(joined, "TRY_CAST(L.s AS INT) IS NOT NULL AND L.b / 2 = 0")
    assert sorted(r.L_s for r in kept.collect() if r.L_s != _SPARK_READS_WHITESPACE) == sorted(
        text
        for text, flink in zip(casts["values"], casts["results"]["INT"], strict=True)
        if flink is not None
    )


def test_a_where_moves_a_time_by_an_interval(spark) -> None:
    """`JOIN_WHERE L.t + INTERVAL '1' SECOND > R.t`, as Flink's WHERE takes it, beside a
    TIMESTAMP literal (both refused: the literal as a CAST)."""
    t = datetime(2024, 3, 5, 6, 7, 8, tzinfo=UTC)
    joined = spark.createDataFrame(
        [("+I", "near", t, t.replace(second=9)), ("+I", "far", t, t.replace(second=10))],
        "op string, L_id string, L_t timestamp, R_t timestamp",
    )
    kept = filtered(
        joined,
        "L.t + INTERVAL '1.5' SECOND > R.t AND L.t - INTERVAL '1' MINUTE < R.t "
        "AND R.t > TIMESTAMP '2024-01-01 00:00:00'",
    )
    assert [r.L_id for r in kept.collect()] == ["near"]


def test_a_select_lists_time_functions_compute_as_flinks(spark) -> None:
    """FLOOR and CEIL of a time TO each unit and EXTRACT of each unit, on a TIMESTAMP and a
    DATE, as Flink 2.3 computed them (`tests.flink_readings`): Spark refused FLOOR(t TO unit)
    and 9 of EXTRACT's 19 units (MILLISECOND among them)."""
    values = readings.FLINK_TIME["values"]
    days = readings.FLINK_TIME["results"]["CAST(t AS DATE)"]
    rows = [
        ("+I", i, datetime.fromisoformat(t).replace(tzinfo=UTC), date.fromisoformat(d))
        for i, (t, d) in enumerate(zip(values, days, strict=True))
        if t != readings.FLINK_MISCOUNTS
    ]
    joined = spark.createDataFrame(rows, "op string, L_i int, L_t timestamp, L_d date")
    select = ", ".join(
        f"{readings.qualified(e)} AS e{n}" for n, e in enumerate(readings.EXPRESSIONS)
    )
    computed = project(joined, f"L.i AS i, {select}").collect()
    for row in computed:
        for n, expression in enumerate(readings.EXPRESSIONS):
            flink = readings.FLINK_TIME["results"][expression][row["i"]]
            assert readings.as_flink_prints(row[f"e{n}"]) == flink, (expression, values[row["i"]])
