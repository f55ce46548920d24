"""The driver JVM's class archive: which options a start gets, and where the archive is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from app.class_archive import (
    JAVA_OPTIONS,
    ClassArchive,
    abandoned,
    archive_name,
    for_setting,
)


def gone_pid() -> int:
    """The process id of a process that ran and is gone."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    return ended.pid


def test_a_start_maps_the_archive_once_there_is_one(tmp_path: Path) -> None:
    path = tmp_path / "driver.jsa"
    given = {JAVA_OPTIONS: "-Xss4m", "spark.ui.enabled": "false"}
    assert ClassArchive(path).conf(given) == given  # none yet: recorded apart, not by this JVM
    path.write_bytes(b"archive")
    mapped = ClassArchive(path).conf(given)
    assert mapped[JAVA_OPTIONS].startswith(f"-Xss4m -XX:SharedArchiveFile={path} -Xshare:auto")
    assert mapped["spark.ui.enabled"] == "false"


@pytest.mark.parametrize(
    "chosen", ["-XX:SharedArchiveFile=/a.jsa", "-XX:ArchiveClassesAtExit=/b.jsa", "-Xshare:off"]
)
def test_an_archive_the_user_chose_is_kept(tmp_path: Path, chosen: str) -> None:
    (tmp_path / "driver.jsa").write_bytes(b"archive")
    given = {JAVA_OPTIONS: f"-Xss4m {chosen}"}
    assert ClassArchive(tmp_path / "driver.jsa").conf(given) == given


def test_a_recording_under_way_or_done_is_not_started_again(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path / "driver.jsa")
    archive.marker.write_text("")
    made = archive.marker.stat().st_mtime_ns
    assert archive.record_later() is None  # a recorder is at work; its marker kept
    assert archive.marker.stat().st_mtime_ns == made and not archive.path.exists()
    archive.marker.unlink()
    archive.path.write_bytes(b"archive")
    assert archive.record_later() is None  # recorded: nothing to do
    assert not archive.marker.exists()


def test_a_killed_recorders_marker_and_half_archive_do_not_hold_off_the_next(
    tmp_path: Path,
) -> None:
    """A supervisor that stops a service's whole process tree stops its recorder too."""
    archive = ClassArchive(tmp_path / "driver.jsa")
    archive.marker.write_text(str(gone_pid()))
    recorder = archive.record_later()
    assert recorder is not None  # taken over at once, not after RECORDING_LIMIT_S
    try:
        assert archive.marker.read_text() == str(recorder.pid)
        assert not abandoned(archive.marker)  # this one is at work
    finally:
        os.killpg(recorder.pid, signal.SIGKILL)
        recorder.wait(30)
    assert abandoned(archive.marker)
    half = tmp_path / f".driver.jsa.{gone_pid()}"
    half.write_bytes(b"\x00half an archive")
    assert abandoned(half)
    recording = tmp_path / f".driver.jsa.{os.getpid()}"
    recording.write_bytes(b"\x00being written")
    assert not abandoned(recording)


def test_a_folder_that_cannot_be_made_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert ClassArchive(tmp_path / "file" / "jvm" / "driver.jsa").record_later() is None
    assert (tmp_path / "file").read_text() == ""


def test_the_setting_names_the_folder_turns_it_off_or_takes_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert for_setting("off") is None and for_setting("OFF") is None
    name = archive_name()
    assert name is not None and name.startswith("driver-") and name.endswith(".jsa")
    named = for_setting(str(tmp_path / "archives"))
    assert named is not None and named.path == tmp_path / "archives" / name
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = for_setting(None)
    assert cached is not None and cached.path == tmp_path / "streamjoin" / "jvm" / name


def test_another_java_or_spark_records_an_archive_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = archive_name()
    monkeypatch.setattr(pyspark, "__version__", "9.9.9")
    assert archive_name() != name


def test_a_start_with_no_archive_has_one_recorded_by_a_process_of_its_own(tmp_path: Path) -> None:
    """The recorder itself runs once per test run: it records the tests' archive."""
    archive = ClassArchive(tmp_path / "jvm" / "driver.jsa")
    recorder = archive.record_later()
    assert recorder is not None
    try:
        assert recorder.args == [
            sys.executable,
            "-P",
            "-m",
            "app.class_archive",
            str(tmp_path / "jvm"),
        ]
        assert archive.marker.exists()  # a second start finds it at work
        assert os.getsid(recorder.pid) == recorder.pid  # the service's stop leaves it be
    finally:
        os.killpg(recorder.pid, signal.SIGKILL)
        recorder.wait(30)
