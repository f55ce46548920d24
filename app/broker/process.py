"""What every embedded broker shares: a child process on a free loopback port, its log in a
file, readiness as a metadata answer, a crash and a restart for the fault tests."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

START_TIMEOUT_S = 60.0


class BrokerNotInstalled(RuntimeError):
    """No embedded broker can be started on this machine."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_ready(bootstrap: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Block until the broker answers a metadata request naming a broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if admin.list_topics(timeout=1).brokers:
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"no Kafka broker answered at {bootstrap}")


class BrokerProcess:
    """A broker for the lifetime of a `with` block; `bootstrap` is its address. Subclasses say
    how it is started (`command`) and what it needs once before its first start (`prepare`)."""

    name = "a Kafka-protocol broker"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.env = env
        self.work = Path(tempfile.mkdtemp(prefix="streamjoin-broker-"))
        self.log_path = self.work / "broker.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._prepared = False

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running broker's process, None while it is down."""
        return self._process

    def prepare(self) -> None:
        """What the first start needs (storage to format); nothing by default."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def crash(self) -> None:
        """SIGKILL the broker."""
        assert self._process is not None
        self._process.kill()
        self._process.wait()
        self._process = None

    def crash_and_restart(self) -> None:
        """SIGKILL the broker and start it again on the same port (what it stored stays if
        its storage outlives the process)."""
        self.crash()
        self.__enter__()

    def __enter__(self) -> BrokerProcess:
        if not self._prepared:
            self.prepare()
            self._prepared = True
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        try:
            wait_until_ready(self.bootstrap)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
