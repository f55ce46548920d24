"""How soon a restarted service writes its first joined row: `streamjoin run` on a checkpoint,
stopped (SIGTERM), a new pair of records written, started again; the seconds from the new
process's start to the pair's joined row readable by a `read_committed` consumer.

    python -m bench.restart [--join interval|ttl] [K=V ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from bench.idle import prepared, service_arguments
from tests.kafka_io import produce, read_topic


def pair(bootstrap: str, left: str, right: str, key: int) -> None:
    """A left and a right record that join: the same key, the wall clock's time."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "")
    for topic in (left, right):
        produce(bootstrap, topic, [json.dumps({"id": key, "k": key, "t": now}).encode()])


def main() -> None:
    args = service_arguments(argparse.ArgumentParser())
    with ExitStack() as stack:
        where, env = prepared(stack, args.join, args.settings)
        bootstrap, out = where["bootstrap"], where["out"]
        log = (Path(where["work"]) / "service.log").open("a")
        firsts = []
        for run in (1, 2):
            pair(bootstrap, where["left"], where["right"], run)
            began = time.monotonic()
            service = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "run"], env=env, stdout=log, stderr=log
            )
            try:
                read_topic(bootstrap, out, at_least=run, timeout_s=300)
                firsts.append(round(time.monotonic() - began, 2))
            finally:
                service.terminate()
                service.wait(120)
        print(json.dumps({"join": args.join, "first_start_s": firsts[0], "restart_s": firsts[1]}))


if __name__ == "__main__":
    main()
