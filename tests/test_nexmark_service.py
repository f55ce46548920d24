"""Nexmark's join queries as its repository writes them (`bench/nexmark/`: the Kafka table of
nested rows, its views, the queries), through `streamjoin run` from a topic of the bench's
generator's events (and its closing ones, on which q8's last windows fire, as on Flink's end of
input): the rows equal Flink 2.3's on the same events (their count and checksum,
`tests/fixtures/nexmark/flink.json`, from `bench/nexmark_flink.py --check`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.nexmark_check import checksum
from bench.nexmark_service import fill, make_topics, rows_of, script, sink_columns
from tests.kafka_io import produce, read_topic, unique
from tests.service import run_to_exit, service_env

pytestmark = pytest.mark.spark

FLINK = json.loads((Path(__file__).parent / "fixtures" / "nexmark" / "flink.json").read_text())


@pytest.fixture(scope="module")
def nexmark_topic(kafka: str) -> str:
    """The topic of the events Flink's results were taken over, and one record that is no
    JSON, which joins nothing."""
    topic = unique("nexmark")
    events = FLINK["events"]
    fill(kafka, topic, events["events"], events["base_ms"], events["seed"])
    produce(kafka, topic, [UNREADABLE])
    return topic


UNREADABLE = b"not an event"


@pytest.mark.parametrize("query", ["q3", "q20", "q23", "q8"])
def test_a_nexmark_join_query_as_written_gives_flinks_rows(
    kafka: str, nexmark_topic: str, query: str, tmp_path: Path
) -> None:
    out = unique(query)
    make_topics(kafka, out, f"{out}.dlq")
    make_topics(kafka, f"{out}.markers", compact=True)
    env = service_env(
        STREAMJOIN_SQL=script(query, kafka, nexmark_topic, out),
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        TRIGGER_INTERVAL="available-now",
    )
    result = run_to_exit(env, timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert checksum(rows_of(kafka, out, sink_columns(query))) == FLINK["results"][query]


def test_a_blackhole_sink_runs_the_query_to_its_end_without_an_output_topic(
    kafka: str, nexmark_topic: str, tmp_path: Path
) -> None:
    """Flink's `blackhole` connector, as Nexmark's sinks are: the rows are made and dropped;
    neither the output topic (`nexmark_q3`) nor its markers' exist. The record no view of the
    topic can read is dead-lettered once, not once per view (q3 has two)."""
    dead_letters = unique("q3-dlq")
    make_topics(kafka, dead_letters)
    env = service_env(
        STREAMJOIN_SQL=script("q3", kafka, nexmark_topic),
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        TRIGGER_INTERVAL="available-now",
        DLQ_TOPIC=dead_letters,
    )
    result = run_to_exit(env, timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    [letter] = read_topic(kafka, dead_letters)
    assert letter.value == UNREADABLE
