"""`streamjoin` command line: `run` the service from environment variables, or the `demo`."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from app.config import ConfigError, load_config
from app.plan import check_plan
from app.preflight import StartupError, check_kafka
from ops.logging import setup_logging


def run(env: Mapping[str, str]) -> int:
    """The service: validate everything, then stream until the query ends or SIGTERM."""
    try:
        config = load_config(env)
        check_plan(config)
        check_kafka(config)
    except (ConfigError, StartupError) as err:
        print(f"streamjoin: {err}", file=sys.stderr)
        return 2
    # Spark is imported only now: a configuration error costs no JVM start.
    from app import pipeline
    from app.lifecycle import install_stop_signals, stop_session, supervise
    from app.spark import build_session
    from ops.metrics import ServiceMetrics

    stop = install_stop_signals()
    spark = build_session(config.spark_master, config.spark_conf)
    exit_code = 1
    with tempfile.TemporaryDirectory(prefix="streamjoin-") as runtime:
        drain_marker = Path(runtime) / "draining"
        try:
            metrics = ServiceMetrics(spark.sparkContext, config.readiness_timeout_ms / 1000)
            metrics.serve(config.metrics_port)
            metrics.listen(spark)
            query = pipeline.start(spark, config, metrics, drain_marker)
            metrics.readiness.started()
            exit_code = supervise(query, stop, drain_marker, on_poll=lambda: metrics.watch(query))
        except StartupError as err:  # found once Spark runs: what the checkpoint holds
            print(f"streamjoin: {err}", file=sys.stderr)
            exit_code = 2
        finally:
            stop_session(spark, exit_code)
    return exit_code


def run_replay(cases: list[Path], output: Path | None, materialize: bool) -> int:
    from app.replay import replay
    from app.spark import build_session

    spark = build_session(
        os.environ.get("SPARK_MASTER", "local[2]"), {"spark.sql.shuffle.partitions": "2"}
    )
    try:
        if output is None:
            return replay(spark, cases, sys.stdout, materialize)
        with output.open("w") as out:
            return replay(spark, cases, out, materialize)
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamjoin", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the service, configured by environment variables")
    commands.add_parser("demo", help="the seed's orders/product_changelog demo, self-contained")
    replay = commands.add_parser("replay", help="run oracle case files through the pipeline")
    replay.add_argument("cases", nargs="+", type=Path, help="case files (oracle format)")
    replay.add_argument("-o", "--output", type=Path, help="JSON-lines output (default: stdout)")
    replay.add_argument("--materialize", action="store_true", help="add each final table")
    args = parser.parse_args(argv)
    setup_logging()
    if args.command == "demo":
        from app.demo import demo

        return demo(os.environ)
    if args.command == "replay":
        return run_replay(args.cases, args.output, args.materialize)
    return run(os.environ)


if __name__ == "__main__":
    sys.exit(main())
