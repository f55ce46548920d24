"""`streamjoin replay` against Flink's own answers (committed fixtures; no Flink in CI)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from app.replay import load_cases, replay

pytestmark = pytest.mark.spark

FIXTURES = Path(__file__).parent / "fixtures" / "oracle"


def flink_finals(name: str) -> dict[str, list]:
    lines = (json.loads(line) for line in (FIXTURES / name).read_text().splitlines())
    return {d["case"]: d["final"] for d in lines if "final" in d}


def cases_of_type(join_type: str) -> list[dict]:
    found = []
    for name in ("golden_cases.json", "a_regular.json", "regular_more.json", "b_interval.json",
                 "c_temporal.json"):  # fmt: skip
        found += [c for c in load_cases(FIXTURES / name) if c["join"]["type"] == join_type]
    return found


def run(spark, cases: list[dict], tmp_path: Path) -> tuple[int, list[dict]]:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    out = io.StringIO()
    code = replay(spark, [path], out, materialize=True)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_regular_joins_end_in_flinks_final_tables(spark, tmp_path: Path) -> None:
    cases = cases_of_type("regular")
    assert {c["join"]["kind"] for c in cases} == {"INNER", "LEFT", "RIGHT", "FULL"}
    code, lines = run(spark, cases, tmp_path)
    assert code == 0, [line for line in lines if "error" in line]
    ours = {d["case"]: d["final"] for d in lines if "final" in d}
    flink = (
        flink_finals("golden_flink.jsonl")
        | flink_finals("a_regular.jsonl")
        | flink_finals("regular_more.jsonl")
    )
    assert set(ours) == {c["id"] for c in cases}
    for case_id, final in ours.items():
        assert final == flink[case_id], case_id


def test_a_case_that_cannot_run_gets_an_error_line_and_a_failing_exit(spark, tmp_path) -> None:
    case = {"id": "by_sql", "streams": {}, "sql": "SELECT 1"}
    code, lines = run(spark, [case], tmp_path)
    assert code == 1
    assert lines == [
        {"case": "by_sql", "error": "only structured `join` cases can be replayed, not `sql`"}
    ]
