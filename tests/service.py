"""Running `streamjoin` as operators do: a subprocess configured only by environment variables."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from app.run.session import worker_python
from ops.worker.forkserver import FORKSERVER
from tests.class_archive import driver_options

# Variables of the developer's own shell that must not leak into the service under test, nor
# the fork server of the tests' own session (the service starts its own).
_OWN_PREFIXES = ("KAFKA_", "SPARK_CONF_", "LEFT_", "RIGHT_", "JOIN_", "OUTPUT_", FORKSERVER)


def service_env(*, short_lived: bool = True, **variables: str) -> dict[str, str]:
    """The environment of a service run by a test: `short_lived` unless it carries a load."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)}
    env.update(PYSPARK_PYTHON=worker_python(), SPARK_MASTER="local[2]", METRICS_PORT="0")
    env.update(driver_options(short_lived))
    env.update(variables)
    return env


def user_folder_shadowing_the_service(folder: Path) -> Path:
    """`folder` as a user's directory may be: with folders named like the service's packages
    (a project's own `app`), each failing as it is imported."""
    for name in ("app", "serdes", "state", "ops"):
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text("raise ImportError('not the service')\n")
    return folder


def streamjoin_command() -> list[str]:
    return [sys.executable, "-m", "app.cli"]


class Service:
    """`streamjoin run` in its own process group, its output kept in a log file."""

    def __init__(
        self, env: dict[str, str], log_path: Path, command: list[str] | None = None
    ) -> None:
        """`command`: what starts it, if not `streamjoin run` (an earlier version, say)."""
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command or [*streamjoin_command(), "run"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def endpoint(self) -> str | None:
        """Where its metrics and health are served (METRICS_PORT=0 picks a free port, which
        its log tells), None before they are."""
        found = re.search(r"metrics served at http://0\.0\.0\.0:(\d+)/", self.log())
        return None if found is None else f"http://127.0.0.1:{found.group(1)}"

    def mapping(self, path: Path) -> bool:
        """Whether a process of the service's group has the file at `path` mapped."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                group = int(stat.read_text().rsplit(")", 1)[1].split()[2])
                if group == self.process.pid and str(path) in (stat.parent / "maps").read_text():
                    return True
            except (OSError, IndexError, ValueError):  # a process that ended while it was read
                continue
        return False

    def terminate(self, timeout_s: float = 120) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL the whole process group: driver, JVM and Python workers, as a pod kill does."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


def run_to_exit(env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*streamjoin_command(), "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )
