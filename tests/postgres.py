"""A private PostgreSQL 15 cluster for the change-data-capture test: `wal_level=logical`.

PostgreSQL refuses to run as root, so when the tests run as root the cluster belongs to the
`postgres` system user (`runuser`); its data directory is a temporary folder of its own (the
test's folder is private to root), removed when the cluster stops.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from app.broker import free_port


def _as_cluster_owner(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


class PostgresCluster:
    def __init__(self, settings: str = "") -> None:
        """`settings`: more lines for postgresql.conf (`log_statement = 'all'`, …)."""
        self.settings = settings
        self.base = Path(tempfile.mkdtemp(prefix="streamjoin-pg-"))
        self.data = self.base / "pgdata"
        self.port = free_port()
        self.log = self.base / "postgres.log"

    @staticmethod
    def available() -> bool:
        return all(shutil.which(tool) for tool in ("initdb", "pg_ctl", "psql"))

    def __enter__(self) -> PostgresCluster:
        self.data.mkdir(parents=True)
        if os.geteuid() == 0:
            for path in (self.base, self.data):
                shutil.chown(path, "postgres", "postgres")
        initdb = ["initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust"]
        subprocess.run(_as_cluster_owner(initdb), check=True, capture_output=True)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nwal_level = logical\n"
                f"unix_socket_directories = '{self.data}'\nmax_wal_senders = 4\n"
                "max_replication_slots = 4\n" + self.settings
            )
        start = ["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "start"]
        subprocess.run(_as_cluster_owner(start), check=True, capture_output=True)
        return self

    def sql(self, statement: str) -> str:
        deadline = time.monotonic() + 30
        while True:
            result = subprocess.run(
                [
                    "psql",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-Atc",
                    statement,
                ],
                capture_output=True,
                text=True,
            )
            if result.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert result.returncode == 0, result.stderr
        return result.stdout

    @contextmanager
    def locked(self, table: str) -> Iterator[None]:
        """`table` locked by another session (ACCESS EXCLUSIVE: reads wait) until the block
        ends: a query on it waits as on an overloaded server."""
        session = subprocess.Popen(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-q",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert session.stdin is not None
        session.stdin.write(f"BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;\n")
        session.stdin.flush()
        held = (
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            f"WHERE c.relname = '{table}' AND l.mode = 'AccessExclusiveLock' AND l.granted"
        )
        deadline = time.monotonic() + 30
        while self.sql(held).strip() != "1":
            assert time.monotonic() < deadline and session.poll() is None, "the lock never came"
        try:
            yield
        finally:
            session.stdin.write("ROLLBACK;\n")
            session.stdin.close()
            session.wait(30)

    def _ctl(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        command = ["pg_ctl", "-D", str(self.data), *args]
        return subprocess.run(_as_cluster_owner(command), capture_output=True)

    def crash(self) -> None:
        """Stop the server at once: clients lose their connections, new ones are refused."""
        self._ctl("-m", "immediate", "stop").check_returncode()

    def start(self) -> None:
        """Start the server unless it runs."""
        if self._ctl("status").returncode != 0:
            self._ctl("-l", str(self.log), "-w", "start").check_returncode()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stop = ["pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"]
        subprocess.run(_as_cluster_owner(stop), capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)
