"""`streamjoin` command line: `run` the service from environment variables, or the `demo`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

from app.config import ConfigError, load_config
from app.preflight import StartupError, check_kafka
from ops.logging import setup_logging


def run(env: Mapping[str, str]) -> int:
    """The service: validate everything, then stream until the query ends or SIGTERM."""
    try:
        config = load_config(env)
        check_kafka(config)
    except (ConfigError, StartupError) as err:
        print(f"streamjoin: {err}", file=sys.stderr)
        return 2
    # Spark is imported only now: a configuration error costs no JVM start.
    from app import pipeline
    from app.lifecycle import install_stop_signals, supervise
    from app.spark import build_session

    stop = install_stop_signals()
    spark = build_session(config.spark_master, config.spark_conf)
    try:
        return supervise(pipeline.start(spark, config), stop)
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamjoin", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the service, configured by environment variables")
    commands.add_parser("demo", help="the seed's orders/product_changelog demo, self-contained")
    args = parser.parse_args(argv)
    setup_logging()
    if args.command == "demo":
        from app.demo import demo

        return demo(os.environ)
    return run(os.environ)


if __name__ == "__main__":
    sys.exit(main())
