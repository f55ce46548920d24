"""The JVM's console, without the lines that tell a user nothing.

Spark's JVM (and every Python worker it starts) inherits the driver's stderr. Some of what they
print there is not logged, so no log level silences it: pyspark's `transformWithState` driver
worker `print`s five banners when a query starts (its UDF's repr, its state server's port), and
Spark's log4j set-up prints how to change the log level; other lines come before any logger can
be set (Hadoop's native library), or warn of what Spark does by design at every start (adaptive
execution is off in a stateful query). Those lines are dropped here, line by line; every other
line passes unchanged. Spark's per-batch warnings are quietened by logger (`app.spark`).
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
    b"WARN NativeCodeLoader: Unable to load native-hadoop library",
    b"WARN MicroBatchExecution: Disabling AQE since AQE is not supported in stateful workloads",
)


def _copy(source: int, target: int) -> None:
    """Copy lines from `source` to `target`, less the noise and the blank line after each."""
    after_noise = False
    with os.fdopen(source, "rb") as lines:
        for line in lines:
            text = line.strip()
            if any(part in text for part in NOISE) or (after_noise and not text):
                after_noise = bool(text)
                continue
            after_noise = False
            # Never stop reading: a JVM whose stderr pipe fills up blocks on its next line.
            with contextlib.suppress(OSError):
                os.write(target, line)


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """While inside, processes started (the JVM) get a stderr that drops the noise; this
    process's own stderr is restored on leaving."""
    read_end, write_end = os.pipe()
    console = os.dup(2)  # where the filtered lines go, for as long as the JVM writes
    threading.Thread(target=_copy, args=(read_end, console), name="jvm-console",
                     daemon=True).start()  # fmt: skip
    sys.stderr.flush()
    own = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(own, 2)
        os.close(own)
