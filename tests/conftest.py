"""Session-wide fixtures: one Kafka-protocol broker and one SparkSession for the whole run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.class_archive import SHORT_LIVED, record_once
from tests.kafka_broker import broker_for_tests

# Spark's Python workers import what the tests hand them (functions and classes of the tests'
# modules) by name. They do not import from their working directory (`ops.processes`), so the
# suite names its own folder to them, and to every process it starts.
ROOT = Path(__file__).resolve().parent.parent
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

_broker_kind: list[str] = []


@pytest.fixture(scope="session")
def kafka(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap servers of a real Kafka-protocol broker on loopback: one per process of the
    suite (`tests/run.sh` runs pytest-xdist's workers side by side), each on a port of its own."""
    with broker_for_tests() as (bootstrap, kind):
        _broker_kind.append(kind)
        if hasattr(request.config, "workeroutput"):  # a worker: told to the controller at its end
            request.config.workeroutput["kafka_broker"] = kind
        yield bootstrap


@pytest.fixture(scope="session")
def class_archive(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The services' JVM class archive (`tests/class_archive.py`), recorded once."""
    record_once(tmp_path_factory.mktemp("classes"))


@pytest.fixture(autouse=True)
def _services_start_from_the_archive(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("spark"):
        request.getfixturevalue("class_archive")


@pytest.fixture(scope="session")
def spark():
    from app.run.session import build_session

    # its queries checkpoint under pytest's temporary directories: local, as the service's; its
    # JVM, like a test's service's, without the optimizing compiler: each of its hundreds of
    # queries is new code (its plan, its generated classes) run over a few rows
    conf = {"spark.sql.shuffle.partitions": "2", "spark.driver.extraJavaOptions": SHORT_LIVED}
    session = build_session("local[2]", conf, checkpoint="/tmp")
    yield session
    session.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Under CI (`CI=true`) a test that skips fails: `.ci/run` installs every tool a test
    needs, so a skip there is a missing install, which a green run would hide."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where nothing may be: {reason}"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controller: the broker a worker's tests used."""
    kind = getattr(node, "workeroutput", {}).get("kafka_broker")
    if kind:
        _broker_kind.append(kind)


def pytest_terminal_summary(terminalreporter) -> None:
    if _broker_kind:
        terminalreporter.write_line(f"Kafka broker used: {_broker_kind[0]}")
