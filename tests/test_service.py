"""`streamjoin run` end to end against a real broker: delivery, restarts and start-up errors."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.kafka_io import Record, create_topics, output_topics, produce, read_topic, unique
from tests.service import Service, run_to_exit, service_env

pytestmark = pytest.mark.spark

PER_SIDE = 10_000


def three_topics(kafka: str) -> tuple[str, str, str]:
    left, right, out = unique("left"), unique("right"), unique("out")
    create_topics(kafka, [left, right], partitions=4)
    output_topics(kafka, out, partitions=4)
    return left, right, out


def fill_inputs(kafka: str, left: str, right: str) -> dict[bytes, Record]:
    """10,000 distinct records per side over 4 partitions, by value."""
    produced = produce(kafka, left, [b"L%05d" % i for i in range(PER_SIDE)], partitions=4)
    produced += produce(kafka, right, [b"R%05d" % i for i in range(PER_SIDE)], partitions=4)
    return {r.value: r for r in produced}


def wait_for(condition, timeout_s: float, what: str, service: Service) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if service.process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{what}; service log:\n{service.log()[-4000:]}")
        time.sleep(0.2)


def test_run_delivers_every_input_record_once_tagged_with_its_side_and_logs_json(
    kafka: str, tmp_path: Path
) -> None:
    left, right, out = three_topics(kafka)
    produced = fill_inputs(kafka, left, right)
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=left,
        RIGHT_TOPIC=right,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(tmp_path / "checkpoint"),
        TRIGGER_INTERVAL="200ms",
        JOIN_TYPE="forward",
        LOG_FORMAT="json",
    )
    service = Service(env, tmp_path / "service.log")
    try:
        records = read_topic(kafka, out, at_least=2 * PER_SIDE, timeout_s=240)
    finally:
        exit_code = service.terminate()
    assert exit_code == 0, service.log()[-4000:]
    # every line one JSON object, for a log shipper; those of the running query name it
    lines = [json.loads(line) for line in service.log().splitlines()]
    assert all({"ts", "level", "logger", "msg"} <= line.keys() for line in lines), lines
    assert not [line for line in lines if line["level"] != "INFO"]  # a graceful stop is quiet
    stopped = next(line for line in lines if line["msg"] == "query stopped")
    assert re.fullmatch(r"[0-9a-f-]{36}", stopped["query_id"]) and stopped["batch_id"] >= 0
    assert len(records) == 2 * PER_SIDE
    assert {r.value for r in records} == set(produced)
    for record in records:
        assert record.key == record.value  # unchanged
        side = b"left" if record.value.startswith(b"L") else b"right"
        assert record.header("streamjoin.side") == side


def committed_ends(checkpoint: Path) -> dict[str, dict[str, int]]:
    """End offsets of the last batch the checkpoint marks as committed (none: empty)."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")]
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    ends: dict[str, dict[str, int]] = {}
    for line in lines[2:]:
        ends.update(json.loads(line))
    return ends


def test_at_least_once_sigkill_and_restart_lose_nothing_and_rewrite_only_uncommitted(
    kafka: str, tmp_path: Path
) -> None:
    left, right, out = three_topics(kafka)
    produced = fill_inputs(kafka, left, right)
    checkpoint = tmp_path / "checkpoint"
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=left,
        RIGHT_TOPIC=right,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(checkpoint),
        TRIGGER_INTERVAL="0",
        MAX_RECORDS_PER_TRIGGER="1500",
        OUTPUT_DELIVERY="at-least-once",
        JOIN_TYPE="forward",
    )
    first = Service(env, tmp_path / "first.log")
    wait_for(lambda: len(committed_ends(checkpoint)) == 2, 240, "no batch committed", first)
    first.kill()
    at_kill = committed_ends(checkpoint)
    assert sum(o for parts in at_kill.values() for o in parts.values()) < 2 * PER_SIDE, (
        "the kill came after the whole input was committed: not mid-stream"
    )

    second = Service(env, tmp_path / "second.log")
    try:
        wait_for(
            lambda: len({r.value for r in read_topic(kafka, out)}) == len(produced),
            240,
            "not every input record reached the output",
            second,
        )
        records = read_topic(kafka, out)
    finally:
        assert second.terminate() == 0, second.log()[-4000:]

    values = [r.value for r in records]
    assert set(values) == set(produced)
    topic_of = {b"L": left, b"R": right}
    for value in {v for v in values if values.count(v) > 1}:
        source = produced[value]
        committed = at_kill[topic_of[value[:1]]][str(source.partition)]
        assert source.offset >= committed, f"{value!r} of a committed batch was read again"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"LEFT_TOPIC": "no-such-topic"}, "LEFT_TOPIC: Kafka topic 'no-such-topic' does not exist"),
        (
            {"OUTPUT_MARKER_TOPIC": "no-markers"},
            "OUTPUT_MARKER_TOPIC: Kafka topic 'no-markers' does not exist",
        ),
        ({"OUTPUT_DELIVERY": "twice"}, "OUTPUT_DELIVERY: expected one of"),
        ({"MAX_RECORDS_PER_TRIGGER": "lots"}, "MAX_RECORDS_PER_TRIGGER: expected a positive"),
        ({"KAFKA_NOT_A_PROPERTY": "1"}, "KAFKA_NOT_A_PROPERTY: not a usable Kafka client"),
    ],
)
def test_start_up_errors_are_one_line_naming_the_problem(
    kafka: str, tmp_path: Path, change: dict[str, str], expected: str
) -> None:
    left, right, out = three_topics(kafka)
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=left,
        RIGHT_TOPIC=right,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(tmp_path / "checkpoint"),
        JOIN_TYPE="forward",
    )
    result = run_to_exit({**env, **change})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("streamjoin: " + expected), lines[0]


def health(service: Service) -> tuple[int, str]:
    """`/healthz` of the running service: status and body (None before it serves)."""
    served = service.endpoint()
    if served is None:
        return 0, ""
    try:
        url = f"{served}/healthz"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_liveness_fails_while_a_micro_batch_runs_past_its_limit(kafka: str, tmp_path: Path) -> None:
    """A micro-batch running longer than READINESS_TIMEOUT (here 1s: the first batch, with
    every Python worker to start, runs longer) fails `/healthz`, which makes Kubernetes restart
    the pod; once batches finish in time again, it answers 200."""
    left, right, out = three_topics(kafka)
    fill_inputs(kafka, left, right)
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=left,
        RIGHT_TOPIC=right,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(tmp_path / "checkpoint"),
        JOIN_TYPE="forward",
        READINESS_TIMEOUT="1s",
        TRIGGER_INTERVAL="200ms",
    )
    service = Service(env, tmp_path / "service.log")
    answers: list[tuple[int, str]] = []
    try:
        wait_for(
            lambda: answers.append(health(service)) or answers[-1][0] == 503,
            240,
            "/healthz never failed during the long first batch",
            service,
        )
        assert answers[-1][1].startswith("not alive: no progress for "), answers[-1]
        wait_for(
            lambda: health(service) == (200, "ok\n"),
            240,
            "/healthz did not recover once batches ran in time",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
