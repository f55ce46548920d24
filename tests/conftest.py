"""Session-wide fixtures: one Kafka-protocol broker and one SparkSession for the whole run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.class_archive import SHORT_LIVED, record_once
from tests.kafka_broker import broker_for_tests

_broker_kind: list[str] = []


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """Bootstrap servers of a real Kafka-protocol broker on loopback."""
    with broker_for_tests() as (bootstrap, kind):
        _broker_kind.append(kind)
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


def pytest_terminal_summary(terminalreporter) -> None:
    if _broker_kind:
        terminalreporter.write_line(f"Kafka broker used: {_broker_kind[0]}")
