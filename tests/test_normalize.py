"""Changelog normalization (Flink's ChangelogNormalize) and the upsert format, without Spark."""

from __future__ import annotations

from pyspark.sql import Row
from pyspark.sql.streaming.tws_tester import TwsTester

from serdes.formats import UpsertJsonFormat
from serdes.schema import parse_schema
from state.normalize import NormalizeProcessor, normalize

A1, A2 = ("a", 1), ("a", 2)


def run(changes: list[tuple[str, tuple]]) -> list[tuple[str, tuple]]:
    last, out = None, []
    for op, row in changes:
        emitted, last = normalize(last, op, row)
        out += emitted
    return out


def test_upserts_become_a_full_changelog() -> None:
    assert run([("+U", A1), ("+U", A2), ("-D", ("a", None))]) == [
        ("+I", A1), ("-U", A1), ("+U", A2), ("-D", A2)
    ]  # fmt: skip


def test_an_update_without_before_image_retracts_the_real_old_row() -> None:
    assert run([("+I", A1), ("+U", A2)]) == [("+I", A1), ("-U", A1), ("+U", A2)]


def test_repeats_and_unknown_deletes_emit_nothing() -> None:
    assert run([("-D", A1), ("+I", A1), ("+U", A1)]) == [("+I", A1)]


def test_a_retraction_deletes_the_stored_row_as_flink_does() -> None:
    assert run([("+I", A1), ("-U", A1), ("+U", A2)]) == [("+I", A1), ("-D", A1), ("+I", A2)]


def test_the_processor_keeps_the_last_row_between_batches() -> None:
    tester = TwsTester(NormalizeProcessor(["id", "v"]))
    In = Row("op", "seq", "ts", "row")
    first = tester.test(
        ("a",), [In("+U", 4, 20, Row(id="a", v=2)), In("+U", 2, 10, Row(id="a", v=1))]
    )
    # an update's -U and +U carry the time of the update
    assert [(r.op, r.ts, tuple(r.row.values())) for r in first] == [
        ("+I", 10, A1), ("-U", 20, A1), ("+U", 20, A2)
    ]  # fmt: skip
    second = tester.test(("a",), [In("-D", 6, 30, Row(id="a", v=None))])
    assert [(r.op, r.ts, tuple(r.row.values())) for r in second] == [("-D", 30, A2)]
    assert tester.peekValueState("last", ("a",)) is None


def test_upsert_records_decode_from_key_and_value() -> None:
    fmt = UpsertJsonFormat(parse_schema("id STRING, v INT"), ["id"])
    assert fmt.decode(b'{"id": "a"}', b'{"v": 1}') == [("+U", A1)]
    assert fmt.decode(b"a", b'{"id": "a", "v": 2}') == [("+U", A2)]
    assert fmt.decode(b'"a"', None) == [("-D", ("a", None))]
