"""The fork server of the driver's Python processes: one process, started with the session,
that has imported what they import, and forks each of them on request.

Spark starts the driver's Python processes one at a time, as a query is planned, each a new
interpreter: a source's runner and its data source's set-up, and for every stateful operator of
a new query run the processor's set-up (`transform_with_state_driver_worker`), which unpickles
the processor and so imports pyspark, pandas, pyarrow and the join's modules. Each paid that
import on the first micro-batch's path, and a query has several (`docs/performance.md`).
Forked from this server, they start with those modules imported.

`streamjoin-python` (`ops.worker.interpreter`) asks the server, when `FORKSERVER` names its
socket, for `-m <module>` of the modules below; it hands over its standard streams, environment
and directory and waits for the child's exit code, which it exits with. The child ends when its
`streamjoin-python` does, however that ends, as Spark stops a worker by ending that process.
Anything else, or a server that does not answer, runs as before: a new interpreter.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback

from ops.processes import python_module

# Not under a prefix of the service's own variables, which refuses those it does not read.
FORKSERVER = "DRIVER_FORKSERVER"

# What Spark runs as the driver's Python processes, as `-m <module> [argument]`: the modules
# it starts one by one, and pyspark's daemon for each of the data source API's workers (a
# daemon per worker module, in the driver).
SERVED = frozenset(
    {
        ("pyspark.sql.streaming.transform_with_state_driver_worker",),
        ("pyspark.sql.streaming.python_streaming_source_runner",),
        *(
            ("pyspark.daemon", f"pyspark.sql.worker.{worker}")
            for worker in (
                "lookup_data_sources",
                "create_data_source",
                "plan_data_source_read",
                "write_into_data_source",
                "commit_data_source_write",
                "python_streaming_sink_runner",
            )
        ),
    }
)

_LENGTH = struct.Struct("!I")
_STREAMS = 3  # stdin, stdout, stderr
_started: list[subprocess.Popen[bytes]] = []


def start(preload: tuple[str, ...] = ()) -> None:
    """Start this process's fork server, once, and name it to the processes it starts after
    (its JVM, and so Spark's Python processes), with `preload` imported besides what the served
    modules import. Not waited for: until it listens, they start as new interpreters. It ends
    when this process does (its standard input closes)."""
    if _started:
        return
    path = os.path.join(tempfile.mkdtemp(prefix="streamjoin-forkserver-"), "socket")
    _started.append(
        subprocess.Popen(
            python_module(__name__, path, *preload),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
    )
    os.environ[FORKSERVER] = path


def served(args: list[str]) -> bool:
    """Whether `args` (an interpreter's, after its name) are what the fork server runs."""
    return len(args) > 1 and args[0] == "-m" and tuple(args[1:]) in SERVED


def request(path: str, args: list[str], env: dict[str, str]) -> int | None:
    """Run `-m module [argument]` as a child of the server at `path`, with this process's
    streams and directory and `env`; its exit code, or None if the server could not take it."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        body = json.dumps({"args": args[1:], "env": env, "cwd": os.getcwd()})
        payload = body.encode()
        socket.send_fds(conn, [_LENGTH.pack(len(payload))], list(range(_STREAMS)))
        conn.sendall(payload)
    except OSError:
        return None
    # A line with the exit code; the connection may stay open after it in processes the
    # child forked (pyspark's daemon's workers). Without one, it died of a signal.
    answer = b""
    while not answer.endswith(b"\n") and (chunk := conn.recv(16)):
        answer += chunk
    return int(answer) if answer.endswith(b"\n") else 1


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _flags, _addr = socket.recv_fds(conn, _LENGTH.size, _STREAMS)
    (length,) = _LENGTH.unpack(head)
    payload = b""
    while len(payload) < length:
        chunk = conn.recv(length - len(payload))
        if not chunk:
            raise ConnectionError("the request ended early")
        payload += chunk
    return json.loads(payload), fds


def _end_with_requester(conn: socket.socket) -> None:
    """End, as Spark ending the process it started would, when the requesting
    `streamjoin-python` is gone: its end of `conn` closes. SIGTERM, so that a module that
    handles it (pyspark's daemon stops its workers) does."""

    def watch() -> None:
        while conn.recv(1):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def _run_child(conn: socket.socket, task: dict, fds: list[int]) -> None:
    """In the forked child: become the requested process, run it, report how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(task["cwd"])
    os.environ.clear()
    os.environ.update(task["env"])
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the standard streams, kept open
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    _end_with_requester(conn)
    module, *arguments = task["args"]
    sys.argv = [module, *arguments]  # the module's own path replaces the first
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as ended:
        code = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
    except BaseException:  # as the interpreter would: the traceback, exit code 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        conn.sendall(f"{code}\n".encode())
    finally:
        os._exit(code)


def serve(path: str, preload: list[str]) -> None:
    """Import what the served modules import and `preload`, then fork one per request on
    `path`'s socket, until this process's standard input closes (its session's process ended)."""
    modules = {module for command in SERVED for module in command}
    for module in (*modules, *preload):
        importlib.import_module(module)
    for module, *_ in SERVED:  # each child runs it as `__main__`, from what it imports
        sys.modules.pop(module, None)
    gc.freeze()  # the imported objects stay out of every collection: their pages stay shared
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            break
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        try:
            task, fds = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        if os.fork() == 0:
            listener.close()
            _run_child(conn, task, fds)
        for fd in fds:
            os.close(fd)
        conn.close()
    listener.close()
    os.unlink(path)
    os.rmdir(os.path.dirname(path))


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
