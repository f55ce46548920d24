"""Output encodings of a changelog, run by Spark on a small batch of changes."""

from __future__ import annotations

import json

import pytest

from serdes.records.encode import KEY_COLUMN, as_json, encode

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
        ("+I", 1, "+I"), ("-U", 1, "-U"), ("+U", 2, "+U"), ("-D", 2, "-D")
    ]  # fmt: skip


def test_upsert_drops_update_befores_and_deletes_with_tombstones(spark) -> None:
    assert encoded(spark, "upsert") == [
        ("a", {"id": "a", "v": 1}, "+I"), ("a", {"id": "a", "v": 2}, "+U"), ("a", None, "-D")
    ]  # fmt: skip


def test_debezium_json_is_what_flink_writes(spark) -> None:
    values = [v for _k, v, _h in encoded(spark, "debezium-json")]
    assert values == [
        {"before": None, "after": {"id": "a", "v": 1}, "op": "c"},
        {"before": {"id": "a", "v": 1}, "after": None, "op": "d"},
        {"before": None, "after": {"id": "a", "v": 2}, "op": "c"},
        {"before": {"id": "a", "v": 2}, "after": None, "op": "d"},
    ]


def test_append_writes_the_row(spark) -> None:
    assert encoded(spark, "append")[0][1] == {"id": "a", "v": 1}
