"""What an idle service costs: `streamjoin run` on empty topics, its process tree's CPU sampled
after it settled.

    python -m bench.idle [--seconds 30] [--settle 45] [--join interval|ttl] [K=V ...]

`interval`: the live bench's interval join (event time: nothing to do without records);
`ttl`: a regular LEFT join under a 2-minute `STATE_TTL`, whose clock is the wall clock (Spark
plans a batch at every trigger, records or none). `K=V` sets the service's variables
(`TRIGGER_INTERVAL=0`). It prints the cores used over the sample and the micro-batches run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from bench.harness import service_topics
from bench.kafka_sources import tree_cpu_s
from tests.kafka_io import output_topics, unique

SCHEMA = "id BIGINT, k BIGINT, t TIMESTAMP(3)"
JOINS = {
    "interval": {
        "JOIN_TYPE": "interval",
        "JOIN_KIND": "inner",
        "JOIN_ON": "L.k = R.k AND L.t BETWEEN R.t - INTERVAL '10' SECOND AND R.t + INTERVAL "
        "'10' SECOND",
        "LEFT_TIME": "t",
        "RIGHT_TIME": "t",
        "LEFT_WATERMARK_DELAY": "5 seconds",
        "RIGHT_WATERMARK_DELAY": "5 seconds",
    },
    "ttl": {
        "JOIN_TYPE": "regular",
        "JOIN_KIND": "left",
        "JOIN_ON": "L.k = R.k",
        "STATE_TTL": "2 minutes",
    },
}
METRICS_PORT = 9471


def service_env(
    bootstrap: str, work: Path, topics: tuple[str, str, str, str], join: str, settings: list[str]
) -> dict[str, str]:
    """The service's variables: `topics` (left, right, output, dead letters), one of `JOINS`,
    its checkpoint in `work`, then `settings` (`K=V`)."""
    left, right, out, dlq = topics
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "LEFT_TOPIC": left,
        "RIGHT_TOPIC": right,
        "OUTPUT_TOPIC": out,
        "DLQ_TOPIC": dlq,
        "CHECKPOINT_LOCATION": str(work / "checkpoint"),
        "LEFT_FORMAT": "json",
        "RIGHT_FORMAT": "json",
        "LEFT_SCHEMA": SCHEMA,
        "RIGHT_SCHEMA": SCHEMA,
        "OUTPUT_ENCODING": "retract",
        "METRICS_PORT": str(METRICS_PORT),
        **JOINS[join],
        **dict(s.split("=", 1) for s in settings),
    }


def batches() -> int:
    """The micro-batches the service ran so far, from its `/metrics`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("streamjoin_batch_duration_seconds_count"):
                return int(float(line.split()[-1]))
    return -1


def service_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The command line's `--join` and `K=V` settings, with what `parser` has besides."""
    parser.add_argument("--join", choices=sorted(JOINS), default="interval")
    parser.add_argument("settings", nargs="*", metavar="K=V")
    return parser.parse_args()


def prepared(
    stack: ExitStack, join: str, settings: list[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """A broker and fresh topics (`bench.harness.service_topics`, 4 partitions, stopped with
    `stack`), and the service's variables for them: ({bootstrap, left, right, out, work}, env)."""
    bootstrap, work, left, right, out = service_topics(stack)
    dlq = unique("dlq")
    output_topics(bootstrap, dlq, 1)
    where = {"bootstrap": bootstrap, "left": left, "right": right, "out": out, "work": str(work)}
    return where, service_env(bootstrap, work, (left, right, out, dlq), join, settings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--settle", type=float, default=45)
    args = service_arguments(parser)
    with ExitStack() as stack:
        where, env = prepared(stack, args.join, args.settings)
        work = Path(where["work"])
        log = (work / "service.log").open("w")
        service = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "run"], env=env, stdout=log, stderr=log
        )
        try:
            time.sleep(args.settle)
            assert service.poll() is None, (work / "service.log").read_text()[-3000:]
            cpu, runs, began = tree_cpu_s(service.pid), batches(), time.monotonic()
            time.sleep(args.seconds)
            cores = (tree_cpu_s(service.pid) - cpu) / (time.monotonic() - began)
            ran = batches() - runs
        finally:
            service.terminate()
            service.wait(60)
        result = {"join": args.join, "settings": args.settings, "cores": round(cores, 4)}
        print(json.dumps({**result, "micro_batches": ran, "seconds": args.seconds}))


if __name__ == "__main__":
    main()
