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
    out = _finished(kafka, nexmark_topic, query, tmp_path)
    assert checksum(rows_of(kafka, out, sink_columns(query))) == FLINK["results"][query]


def test_q23_as_one_multi_way_join_gives_flinks_rows(
    kafka: str, nexmark_topic: str, tmp_path: Path
) -> None:
    """Flink's `table.optimizer.multi-join.enabled` set before q23: its two joins on the
    bidder run as one operator (one stateful operator in the checkpoint, not two), with the
    rows of the chain as written."""
    out = unique("q23-multi")
    make_topics(kafka, out, f"{out}.dlq")
    make_topics(kafka, f"{out}.markers", compact=True)
    options = [("table.optimizer.multi-join.enabled", "true")]
    env = service_env(
        STREAMJOIN_SQL=script("q23", kafka, nexmark_topic, out, options),
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        TRIGGER_INTERVAL="available-now",
    )
    result = run_to_exit(env, timeout_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert checksum(rows_of(kafka, out, sink_columns("q23"))) == FLINK["results"]["q23"]
    assert [p.name for p in (tmp_path / "ck" / "state").iterdir()] == ["0"]


_runs: dict[str, tuple[Path, str]] = {}


def _finished(kafka: str, topic: str, query: str, work: Path) -> str:
    """The output topic of `query` run to its end over `topic`, with its checkpoint in
    `work` (the run of an earlier test, if one ran it: `_runs`)."""
    if query not in _runs:
        out = unique(query)
        make_topics(kafka, out, f"{out}.dlq")
        make_topics(kafka, f"{out}.markers", compact=True)
        env = service_env(
            STREAMJOIN_SQL=script(query, kafka, topic, out),
            CHECKPOINT_LOCATION=str(work / "ck"),
            TRIGGER_INTERVAL="available-now",
        )
        result = run_to_exit(env, timeout_s=600)
        assert result.returncode == 0, result.stderr[-3000:]
        _runs[query] = (work / "ck", out)
    return _runs[query][1]


@pytest.mark.parametrize(
    ("query", "old", "new", "refusal"),
    [
        (
            "q3",
            "A.category = 10",
            "A.category = 11",
            "JOIN_ON's filter of LEFT: L.category = 11, but the checkpoint at "
            "CHECKPOINT_LOCATION holds state made with JOIN_ON's filter of LEFT=L.category = 10",
        ),
        (
            "q3",
            "FROM kafka WHERE event_type = 0",
            "FROM kafka WHERE event_type = 2",
            "RIGHT_WHERE: event_type=2, but the checkpoint at CHECKPOINT_LOCATION holds state "
            "made with RIGHT_WHERE=event_type=0",
        ),
        (
            "q8",
            "INTERVAL '10' SECOND",
            "INTERVAL '20' SECOND",
            "JOIN_WINDOW: TUMBLE(20000ms), but the checkpoint at CHECKPOINT_LOCATION holds state "
            "made with JOIN_WINDOW=TUMBLE(10000ms)",
        ),
    ],
    ids=["filter-pushed-below-the-join", "view-where", "window"],
)
def test_a_restart_that_changes_what_a_view_or_a_filter_kept_in_the_state_is_refused(
    kafka: str, nexmark_topic: str, tmp_path: Path, query: str, old: str, new: str, refusal: str
) -> None:
    """The state holds only the rows a view's records, a filter pushed below the join and the
    windows let in: a restart that changes them would join rows the new query never kept
    against rows it would have. It is refused, exit 2, in one line naming the change."""
    out = _finished(kafka, nexmark_topic, query, tmp_path)
    changed = script(query, kafka, nexmark_topic, out)
    assert old in changed
    env = service_env(
        STREAMJOIN_SQL=changed.replace(old, new),
        CHECKPOINT_LOCATION=str(_runs[query][0]),
        TRIGGER_INTERVAL="available-now",
    )
    result = run_to_exit(env, timeout_s=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if " INFO " not in line] == [
        f"streamjoin: {refusal}: set it back, or give a new CHECKPOINT_LOCATION"
    ]


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
