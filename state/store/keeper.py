"""The keeper: one process per Spark executor holding the warm copies of its Python workers.

Spark hands a bucket's next visit to whichever Python worker is free, so copies kept in a
worker's own memory are found by the next visit only by chance. The keeper holds them for all
the workers of its executor: the worker daemon (`app.run.worker_daemon`) starts it and tells the
workers it forks where it listens (`KEEPER_SOCKET`); it ends when the daemon does.

A visit costs one exchange to recall (the names a micro-batch wants, the bucket's token) and
one message to settle, not waited for: what the copies hold is proved current by the tokens
(`state.store.warm`) whatever order the keeper gets messages from several workers in. A settle
is larger than the socket's buffer (every entry the visit wrote), so a worker's messages go out
from a thread of its own: the visit goes on to the next bucket while the keeper, another
process on a busy machine, reads it; a recall follows the settles before it, in order. Messages
are `marshal`led plain data over a Unix socket in a directory only this user can open:
`marshal` builds data, never runs code. A worker that cannot reach the keeper reads the store,
as without copies.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import queue
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from ops.processes import python_module
from state.store.warm import Owner, Seen, Token, WarmStore

KEEPER_SOCKET = "STREAMJOIN_KEEPER_SOCKET"
# What a worker's messages may hold of its memory while the keeper has not read them. Past it (a
# keeper that stopped reading) a settle is dropped, not queued: the keeper's copy of that bucket
# then carries a token the store no longer holds, and the bucket's next visit reads the store.
QUEUED_LIMIT_BYTES = 64 << 20
_LENGTH = struct.Struct("!I")
_RECALL, _SETTLE = 0, 1

log = logging.getLogger(__name__)


def _frame(message: Any) -> bytes:
    body = marshal.dumps(message)
    return _LENGTH.pack(len(body)) + body


def _send(conn: socket.socket, message: Any) -> None:
    conn.sendall(_frame(message))


def _receive(stream: Any) -> Any:
    """One message from a buffered reader of the socket; None at its end."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    return marshal.loads(stream.read(_LENGTH.unpack(head)[0]))


def start() -> str:
    """Start a keeper for this process (the worker daemon), ending with it; the path of its
    socket, which it listens on once this returns."""
    folder = tempfile.mkdtemp(prefix="streamjoin-keeper-")  # mode 0700: this user's only
    path = os.path.join(folder, "socket")
    keeper = subprocess.Popen(
        python_module("state.store.keeper", path, str(os.getpid())),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,  # its word that it listens (the daemon's own talks to Spark)
        close_fds=True,
    )
    assert keeper.stdout is not None
    keeper.stdout.readline()
    keeper.stdout.close()
    return path


class Keeper:
    """The copies, and the workers' connections to them, one thread each."""

    def __init__(self) -> None:
        self.copies = WarmStore()
        self.lock = threading.Lock()

    def serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as stream:
            while (message := _receive(stream)) is not None:
                kind, owner, token, *rest = message
                with self.lock:
                    if kind == _RECALL:
                        found = self.copies.recall(owner, token, rest[0])
                    else:
                        self.copies.settle(owner, token, *rest)
                if kind == _RECALL:
                    _send(conn, found)


def _watch(parent: int, folder: str) -> None:
    """End when the daemon that started the keeper does."""
    while os.getppid() == parent:
        time.sleep(1)
    _remove(folder)
    os._exit(0)


def _remove(folder: str) -> None:
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)


def main(path: str, parent: int) -> None:
    keeper = Keeper()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    sys.stdout.write("listening\n")
    sys.stdout.close()
    threading.Thread(target=_watch, args=(parent, os.path.dirname(path)), daemon=True).start()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=keeper.serve, args=(conn,), daemon=True).start()


class KeeperCopies:
    """A worker's way to the keeper at `path` (`Copies`); once it fails, no copies at all.

    Its messages are sent in order by a thread of its own (`outbox`, `queued` bytes of them, a
    settle dropped past `queued_limit`); a recall waits for its answer, which the keeper gives
    once it has taken every message sent before."""

    def __init__(self, path: str, queued_limit: int = QUEUED_LIMIT_BYTES) -> None:
        self.path = path
        self.conn: socket.socket | None = None
        self.stream: Any = None
        self.outbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self.queued, self.queued_limit = 0, queued_limit
        self.queue_lock = threading.Lock()
        self.broken = False

    def _connected(self) -> socket.socket | None:
        if self.conn is None and not self.broken:
            try:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.connect(self.path)
            except OSError as error:
                self._break(error)
                return None
            self.conn, self.stream = conn, conn.makefile("rb")
            threading.Thread(
                target=self._send_all, args=(conn,), name="keeper-sender", daemon=True
            ).start()
        return self.conn

    def _send_all(self, conn: socket.socket) -> None:
        try:
            while True:
                message = self.outbox.get()
                conn.sendall(message)
                with self.queue_lock:
                    self.queued -= len(message)
        except OSError as error:
            self._break(error)
            # a recall waiting for its answer gets the end of the stream instead
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _break(self, error: OSError) -> None:
        if self.broken:
            return
        log.warning(
            "warm state: the keeper at %s does not answer (%s): reading the store", self.path, error
        )
        self.broken = True
        self.conn = None

    def recall(self, owner: Owner, token: Token, names: list[bytes]) -> Seen:
        conn = self._connected()
        if conn is None:
            return {}
        self._post(_frame((_RECALL, owner, token, names)))
        try:
            found = _receive(self.stream)
        except OSError as error:
            self._break(error)
            return {}
        if found is None:
            self._break(ConnectionError("closed"))
            return {}
        return found

    def settle(self, owner: Owner, token: Token, new: Token, kept: Seen, budget: int) -> None:
        if self._connected() is not None:
            self._post(_frame((_SETTLE, owner, token, new, kept, budget)), droppable=True)

    def _post(self, message: bytes, droppable: bool = False) -> None:
        with self.queue_lock:
            if droppable and self.queued + len(message) > self.queued_limit:
                return
            self.queued += len(message)
        self.outbox.put(message)


_PROCESS_COPIES: Any = None


def worker_copies() -> Any:
    """This worker process's copies: the keeper's where the daemon started one, else its own."""
    global _PROCESS_COPIES
    if _PROCESS_COPIES is None:
        path = os.environ.get(KEEPER_SOCKET)
        _PROCESS_COPIES = KeeperCopies(path) if path else WarmStore()
    return _PROCESS_COPIES


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
