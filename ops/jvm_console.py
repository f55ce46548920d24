"""The JVM's console, without the lines that tell a user nothing.

Spark's JVM (and every Python worker it starts) inherits the driver's stderr. Some of what they
print there is not logged, so no log level silences it: pyspark's `transformWithState` driver
worker `print`s five banners when a query starts (its UDF's repr, its state server's port), and
Spark's log4j set-up prints how to change the log level; other lines come before any logger can
be set (Hadoop's native library), or warn of what Spark does by design at every start (adaptive
execution is off in a stateful query). Those lines are dropped here, line by line; every other
line passes unchanged. Spark's per-batch warnings are quietened by logger (`app.run.session`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

NOISE = (  # parts of the lines dropped
    b"Streaming TransformWithStateInPandas Python worker",
    b"Using Spark's default log4j profile",
    b'Setting default log level to "',
    b"To adjust logging level use sc.setLogLevel",
    b"WARNING: Using incubator modules",
    # Spark's own lines by their message alone: the same text in either log layout
    b"Unable to load native-hadoop library for your platform",
    b"Disabling AQE since AQE is not supported in stateful workloads",
)


class Console:
    """Where the filtered lines go: the console, or, while the JVM starts (`holding`), a list
    kept for the one line a failed start is reported in (`first_line`)."""

    def __init__(self, target: int, holding: bool) -> None:
        self.target = target
        self.holding = holding
        self.held: list[bytes] = []
        self.lock = threading.Lock()

    def write(self, line: bytes) -> None:
        with self.lock:
            if self.holding:
                self.held.append(line)
                return
        # Never stop reading: a JVM whose stderr pipe fills up blocks on its next line.
        with contextlib.suppress(OSError):
            os.write(self.target, line)

    def release(self) -> None:
        """Started: what was held goes to the console, and what follows too."""
        with self.lock:
            self.holding = False
            held, self.held = self.held, []
        for line in held:
            self.write(line)

    def first_line(self) -> str | None:
        """The first line held (a failed JVM's reason), if any."""
        return next(
            (line.decode(errors="replace").strip() for line in self.held if line.strip()), None
        )


def _copy(source: int, console: Console) -> None:
    """Copy lines from `source` to `console`, less the noise and the blank line after each."""
    after_noise = False
    with os.fdopen(source, "rb") as lines:
        for line in lines:
            text = line.strip()
            if any(part in text for part in NOISE) or (after_noise and not text):
                after_noise = bool(text)
                continue
            after_noise = False
            console.write(line)


@contextlib.contextmanager
def filtered_stderr(hold: bool = False) -> Iterator[Console]:
    """While inside, processes started (the JVM) get a stderr that drops the noise; this
    process's own stderr is restored on leaving. With `hold`, lines are held until the
    console is released; a failure inside waits for every line its processes wrote."""
    read_end, write_end = os.pipe()
    console = Console(os.dup(2), hold)  # the filtered lines' way out, as long as the JVM writes
    copier = threading.Thread(
        target=_copy, args=(read_end, console), name="jvm-console", daemon=True
    )
    copier.start()
    sys.stderr.flush()
    own = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    failed = False
    try:
        yield console
    except BaseException:
        failed = True
        raise
    finally:
        sys.stderr.flush()
        os.dup2(own, 2)
        os.close(own)
        if failed:  # a JVM that did not start holds no end of the pipe: read it to its end
            copier.join(5)
