"""Run one of the shared end-to-end benches (`../shared/bench/`) on Apache Kafka instead of
Tansu: they start their broker through `side_by_side.start_tansu`, which this replaces, for the
run, with an Apache Kafka node of the project's own (`app.broker.ApacheKafka`).

    python -m bench.on_apache_kafka ../shared/bench/live_latency.py --rate 1000 \\
        --candidate "exec streamjoin run"
"""

from __future__ import annotations

import atexit
import runpy
import subprocess
import sys
from pathlib import Path

from app.broker import ApacheKafka


def start_kafka(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """What `side_by_side.start_tansu` returns: the broker's process and its address."""
    broker = ApacheKafka().__enter__()
    atexit.register(broker.__exit__, None, None, None)
    print(f"{broker.name} at {broker.bootstrap} (log: {broker.log_path})", flush=True)
    assert broker.process is not None
    return broker.process, broker.bootstrap


def main() -> None:
    script = Path(sys.argv[1]).resolve()
    sys.path.insert(0, str(script.parent))
    import side_by_side

    side_by_side.start_tansu = start_kafka
    sys.argv = [str(script), *sys.argv[2:]]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
