"""`streamjoin` command line: `run` the service from environment variables, `check` what it
would run, `replay` oracle cases, the `demo`, or a Kubernetes `executor` pod's JVM."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from app.config.env import Config, ConfigError, load_config
from app.config.registry import VARIABLES
from app.plan.planner import check_plan, multi_way_refused, multi_way_spec, with_declared_output
from app.run.preflight import StartupError, check_environment, check_kafka
from ops.logging import QUERY, setup_logging

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

VARIABLES_HELP = "\n".join(
    [
        "variables (docs/configuration.md):",
        *(f"  {variable.help}" for variable in VARIABLES.values()),
        "  KAFKA_<PROPERTY>: a Kafka client property (KAFKA_SASL_MECHANISM: sasl.mechanism)",
        "  SCHEMA_REGISTRY_<PROPERTY>: a schema registry client property",
        "  SPARK_CONF_<KEY>: a Spark property (SPARK_CONF_SPARK_EXECUTOR_MEMORY)",
    ]
)


def _refused(err: Exception) -> int:
    """Print each problem on a line of its own, and exit 2."""
    for line in str(err).splitlines():
        print(f"streamjoin: {line}", file=sys.stderr)
    return 2


def planned(env: Mapping[str, str]) -> Config:
    """The configuration whose plan holds: the variables (or the SQL), a lookup join's table."""
    config = load_config(env)
    if config.lookup is not None or any(c.lookup for c in config.chain):  # the tables' columns
        from app.run.lookups import with_table

        config = with_table(config)
    check_plan(config)
    return with_declared_output(config)


def checked(env: Mapping[str, str]) -> Config:
    """The configuration, once every start-up check has passed: the variables, a lookup join's
    table, the plan, Kafka and its topics, the metrics port, the checkpoint directory, the
    schema registry."""
    config = planned(env)
    check_kafka(config)
    check_environment(config)
    return config


def check(env: Mapping[str, str], checkpoint: str | None = None) -> int:
    """`streamjoin check`: every start-up check, then the plan; nothing is read or written.
    With `checkpoint` (for CHECKPOINT_LOCATION): whether the job resumes on it, its state
    meaning what this configuration says, or why not (`app.run.checkpoint.check_state_record`,
    exit 2), its data and record untouched."""
    from app.plan.explain import describe

    if checkpoint is not None:
        env = {**env, "CHECKPOINT_LOCATION": checkpoint}
    try:
        config = checked(env)
    except (ConfigError, StartupError) as err:
        return _refused(err)
    print(
        "streamjoin check: the configuration, Kafka and its topics, the metrics port, the "
        "checkpoint directory and the schema registry are usable"
    )
    for line in describe(config, env):
        print(line)
    if checkpoint is None:
        return 0
    from app.run.checkpoint import last_batch
    from app.run.evolution import column_changes
    from app.run.pipeline import resumed_plan

    try:
        with _checkpoint_session(checkpoint) as spark:
            plan = resumed_plan(spark, config, write=False)
            new = last_batch(spark, checkpoint) is None
    except StartupError as err:
        return _refused(err)
    for change in column_changes(config, plan.config) if plan is not None else []:
        print(f"streamjoin check: {change}")
    print(
        "streamjoin check: a new checkpoint, which this configuration starts"
        if new
        else "streamjoin check: resumes on the checkpoint: its state means what this "
        "configuration says"
    )
    return 0


@contextlib.contextmanager
def _checkpoint_session(location: str) -> Iterator[SparkSession]:
    """A Spark session to read the checkpoint at `location` in: this process's own, if it has
    one already (a test's, left running), else one that reads its state and is stopped after."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from app.run.lifecycle import stop_session
    from app.run.session import SparkStartError, build_session
    from app.state_report import READ_ONLY_STATE

    if SparkContext._active_spark_context is not None:
        yield SparkSession.builder.getOrCreate()  # the owner's, with no setting of ours
        return
    try:
        spark = build_session("local[2]", READ_ONLY_STATE, checkpoint=location)
    except SparkStartError as err:
        raise StartupError(f"Spark did not start: {err}") from None
    try:
        yield spark
    finally:
        stop_session(spark, 0)


def explain(env: Mapping[str, str]) -> int:
    """`streamjoin explain`: the plan the variables or the SQL compile to; Kafka not asked."""
    from app.plan.explain import describe

    try:
        config = planned(env)
    except (ConfigError, StartupError) as err:
        return _refused(err)
    for line in describe(config, env):
        print(line)
    return 0


def run(env: Mapping[str, str]) -> int:
    """The service: validate everything, then stream until the query ends or SIGTERM."""
    try:
        config = checked(env)
    except (ConfigError, StartupError) as err:
        return _refused(err)
    # Spark is imported only now: a configuration error costs no JVM start.
    from app import class_archive
    from app.run import pipeline
    from app.run.checkpoint import HeldRowsRecord, check_writable, last_batch
    from app.run.lifecycle import install_stop_signals, stop_session, supervise
    from app.run.operators import on_wall_clock
    from app.run.session import (
        SparkStartError,
        build_session,
        fork_workers_early,
        quiet_shutdown,
    )
    from ops.metrics import ServiceMetrics
    from serdes.kafka.group_offsets import GroupCommitter
    from state.spark.pipelined import untested_pyspark

    if config.multi_way and multi_way_spec(config) is None:
        log.warning("%s", multi_way_refused(config))
    if (unpipelined := untested_pyspark()) is not None:
        log.warning("%s", unpipelined)
    stop = install_stop_signals()
    archive = class_archive.for_setting(env.get("JVM_CLASS_ARCHIVE_DIR"))
    session_conf = config.session_conf()
    try:
        spark = build_session(
            config.spark_master,
            session_conf if archive is None else archive.conf(session_conf),
            checkpoint=config.checkpoint_location,
        )
    except SparkStartError as err:
        named = [f"SPARK_CONF_{k}" for k in config.spark_conf] or ["SPARK_MASTER"]
        return _refused(StartupError(f"{' / '.join(named)}: Spark did not start: {err}"))
    if urlsplit(config.checkpoint_location).scheme not in ("", "file"):
        try:
            check_writable(spark, config.checkpoint_location)
        except StartupError as err:
            return stop_session(spark, _refused(err))
    fork_workers_early(spark)
    if archive is not None:  # the next start's, if this one had none
        archive.record_later()
    exit_code = 1
    committer = (  # the offsets read, committed to the consumer group, as Flink does
        GroupCommitter(
            config.kafka_client_config(),
            config.group_id,
            {source.topic for source in config.inputs()},
        )
        if config.group_id
        else None
    )
    with tempfile.TemporaryDirectory(prefix="streamjoin-") as runtime:
        drain_marker = Path(runtime) / "draining"
        try:
            metrics = ServiceMetrics(
                spark.sparkContext,
                config.readiness_timeout_ms / 1000,
                config.join.state_ttl_ms / 1000,
                pipelined=unpipelined is None,
            )
            metrics.serve(config.metrics_port)
            held = HeldRowsRecord(spark, config.checkpoint_location)
            query = pipeline.start(spark, config, metrics, drain_marker, held)
            QUERY.query_id = str(query.id)
            until_dry_from = None  # available-now on the wall clock: see `supervise`
            if config.trigger_interval_ms is None and on_wall_clock(config):
                # the first batch this run plans, read once the query runs: a batch it planned
                # meanwhile is only left uncounted, one read before may be a rescale's
                last_planned = last_batch(spark, config.checkpoint_location)
                until_dry_from = 0 if last_planned is None else last_planned + 1

            def poll() -> None:
                metrics.watch(query)
                if committer is not None:
                    committer.commit_progress(query.lastProgress)
                QUERY.batch_id = (query.lastProgress or {}).get("batchId")
                held.save(QUERY.batch_id, dict(metrics.held_rows.accumulator.value))

            metrics.readiness.started()
            exit_code = supervise(
                query,
                stop,
                drain_marker,
                on_poll=poll,
                on_stop=lambda: quiet_shutdown(spark),
                until_dry_from=until_dry_from,
            )
        except StartupError as err:  # found once Spark runs: what the checkpoint holds
            exit_code = _refused(err)
        finally:
            if committer is not None:
                committer.close()
            stop_session(spark, exit_code)
    return exit_code


def executor(env: Mapping[str, str]) -> int:
    """`streamjoin executor`: becomes the executor's JVM; returns only if it cannot."""
    from app.run.executor import run_executor

    try:
        run_executor(env)
    except ConfigError as err:
        return _refused(err)


def state(
    env: Mapping[str, str], checkpoint: str | None, key: list[str] | None, top: int, as_json: bool
) -> int:
    """`streamjoin state`: what the join's checkpoint holds, read as the job's own variables
    plan it; a stopped job's checkpoint, or a copy of a running one's (`checkpoint`, which
    stands for CHECKPOINT_LOCATION when that is not set)."""
    if checkpoint is not None:
        env = {"CHECKPOINT_LOCATION": checkpoint, **env}
    try:
        config = planned(env)
    except (ConfigError, StartupError) as err:
        return _refused(err)
    import json

    from app.config.redaction import without_user_info
    from app.run.checkpoint import state_record
    from app.run.evolution import evolved
    from app.run.operators import stateful_operators
    from app.state_report import NoStateError, report, table

    location = checkpoint or config.checkpoint_location
    shown = without_user_info(location)  # an object store's URL may carry credentials
    try:
        with _checkpoint_session(location) as spark:
            # the inputs' columns as the state's rows hold them (`app.run.evolution`)
            config = evolved(config, state_record(spark, location) or {})
            result = report(spark, location, stateful_operators(config), key, top)
    except NoStateError as err:
        return _refused(NoStateError(str(err).replace(location, shown)))
    except StartupError as err:
        return _refused(err)
    result["checkpoint"] = shown
    print(json.dumps(result, indent=2) if as_json else "\n".join(table(result)))
    return 0


def run_replay(cases: list[Path], output: Path | None, materialize: bool, parallel: int) -> int:
    from app.replay import replay
    from app.run.session import build_session

    spark = build_session(
        os.environ.get("SPARK_MASTER", "local[2]"), {"spark.sql.shuffle.partitions": "2"}
    )
    try:
        if output is None:
            return replay(spark, cases, sys.stdout, materialize, parallel)
        with output.open("w") as out:
            return replay(spark, cases, out, materialize, parallel)
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="streamjoin",
        description=__doc__,
        epilog=VARIABLES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"streamjoin {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the service, configured by environment variables")
    check_command = commands.add_parser(
        "check", help="run every start-up check and print the plan; exit 0 or 2"
    )
    check_command.add_argument(
        "--checkpoint",
        help="a stopped job's checkpoint: say whether this configuration resumes on it, or why not",
    )
    commands.add_parser("explain", help="print the plan the variables or the SQL compile to")
    commands.add_parser(
        "demo",
        help="Flink's temporal join example (orders priced as of their "
        "time from a product changelog), self-contained",
    )
    commands.add_parser("executor", help="a Spark executor (what Spark on Kubernetes runs)")
    inspect = commands.add_parser(
        "state", help="what a stopped job's checkpoint holds: rows per side, largest keys"
    )
    inspect.add_argument("--checkpoint", help="a checkpoint (default: CHECKPOINT_LOCATION)")
    inspect.add_argument(
        "--key",
        action="append",
        metavar="VALUE",
        help="one key's rows (once per key column, in order)",
    )
    inspect.add_argument("--top", type=int, default=5, help="largest keys shown per side")
    inspect.add_argument("--json", action="store_true", help="one JSON object")
    replay = commands.add_parser("replay", help="run oracle case files through the pipeline")
    replay.add_argument("cases", nargs="+", type=Path, help="case files (oracle format)")
    replay.add_argument("-o", "--output", type=Path, help="JSON-lines output (default: stdout)")
    replay.add_argument("--materialize", action="store_true", help="add each final table")
    replay.add_argument("--parallel", type=int, default=1, help="cases run at once (queries)")
    args = parser.parse_args(argv)
    setup_logging()
    if args.command == "demo":
        from app.demo import demo

        return demo(os.environ)
    if args.command == "replay":
        return run_replay(args.cases, args.output, args.materialize, args.parallel)
    if args.command == "check":
        return check(os.environ, args.checkpoint)
    if args.command == "explain":
        return explain(os.environ)
    if args.command == "executor":
        return executor(os.environ)
    if args.command == "state":
        return state(os.environ, args.checkpoint, args.key, args.top, args.json)
    return run(os.environ)


def _version() -> str:
    try:
        return version("streamjoin")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
