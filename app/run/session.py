"""The SparkSession every entry point shares: RocksDB state, changelog checkpoints, UTC.

`transformWithState` accepts only the RocksDB state store provider, and changelog checkpointing
makes each micro-batch's commit write the changes instead of a full snapshot.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from app.config.env import SHUFFLE_PARTITIONS
from app.config.redaction import SECRET_NAMES
from app.jars import s3a_jars
from app.run.worker_daemon import PRELOADED
from ops.jvm_console import filtered_stderr
from ops.logging import jvm_options
from ops.worker import forkserver
from serdes.kafka.datasource import KafkaDataSource

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

DEFAULT_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",
    # Workers forked with the modules they run already imported (`app.run.worker_daemon`).
    "spark.python.daemon.module": "app.run.worker_daemon",
    # Spark starts a daemon per distinct worker environment, and its Arrow UDFs (the sources'
    # decoding) add SPARK_SIMPLIFIED_TRACEBACK=1 where transformWithState adds nothing: set for
    # every worker, the stateful stages fork from the daemon the others use, already running,
    # instead of starting a second one (its imports, its idle workers) in the first batch.
    "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK": "1",
    # No byte limit on the Arrow batches sent to Python workers (the record limit stays): with
    # one, Spark asks the Arrow writer its size after every row, which for a column holding a
    # list (the Kafka headers) walks the whole batch so far: a large share of the JVM's time
    # (`docs/performance.md`).
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    # PySpark's DataFrame debugging records the Python call site of every Column function
    # in the JVM (about six calls to the JVM each: the active session, the setting, the
    # origin set and cleared), while the query is built. The call sites it would show in an
    # error are the service's own lines, not a user's: off, the query is built with far fewer
    # calls (`docs/performance.md`).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Adaptive execution cannot run in a streaming query; Spark warns and turns it off.
    "spark.sql.adaptive.enabled": "false",
    # Secrets (the Kafka clients' travel as data source options) masked in plans and logs.
    "spark.redaction.regex": SECRET_NAMES,
    "spark.sql.redaction.options.regex": SECRET_NAMES.replace("(?i)", "(?i)url|", 1),
}
# A select list computes as Flink's generated Java code does (`app.plan.flink_arithmetic`): a
# whole number's overflow wraps and a CAST narrows or is NULL, where ANSI mode fails the task
# (and the query, on every retry, on one row's value); an integer literal in DECIMAL arithmetic
# is an INT, as Flink types it, not a DECIMAL of its digits (`d / 3` of 13 decimals, not 6).
# Not a setting a user changes: the select list's results are Flink's.
FLINK_ARITHMETIC = {
    "spark.sql.ansi.enabled": "false",
    "spark.sql.legacy.literal.pickMinimumPrecision": "false",
}
# Loggers that warn about what a user can do nothing about: the Python state server at every
# absent value, the trigger at every batch longer than its interval (the service runs batches
# back to back when behind). What warns before they can be set is filtered by `jvm_console`.
QUIET_LOGGERS = (
    "org.apache.spark.sql.execution.python.streaming",
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
)


# A failed task is run again, up to this many attempts in all, as Spark does on a cluster
# (`spark.task.maxFailures`); a local master tries once unless its URL says otherwise
# (`local[N,F]`), so one task that met a broker in trouble (a read stalled, a transaction the
# broker could not commit) ended the query. A re-run task reads the same offsets, rebuilds its
# state from the checkpoint, and its transaction fences the failed attempt's.
TASK_ATTEMPTS = 4
_LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)\])?")


def with_task_attempts(master: str) -> str:
    """A local master URL that retries failed tasks (`TASK_ATTEMPTS`); others as they are."""
    local = _LOCAL_MASTER.fullmatch(master)
    return master if local is None else f"local[{local.group(1) or 1},{TASK_ATTEMPTS}]"


CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def checkpoint_conf(location: str) -> dict[str, str]:
    """What the checkpoint's file system needs in the session.

    A local path (a volume in Kubernetes): the file manager that renames with
    `FileSystem.rename`, an atomic rename(2) there. Spark's default goes through Hadoop's
    `FileContext`, whose local rename asks for the link status of the target by forking
    `readlink`, serially in every commit of offsets, commits and state files (counted in
    `docs/performance.md`).

    An object store (`s3a://`): hadoop-aws and the AWS SDK's modules it calls (`app/jars`),
    with Spark's default file manager, which writes each file whole under a temporary name and
    renames it (a copy on S3, where a name is written once and read consistently). Other file
    systems (HDFS's `FileSystem.rename` does not overwrite) keep Spark's defaults."""
    scheme = urlsplit(location).scheme
    if scheme in ("", "file"):
        return {CHECKPOINT_MANAGER: FILE_SYSTEM_MANAGER}
    if scheme == "s3a":
        return {"spark.jars": ",".join(map(str, s3a_jars()))}
    return {}


def quiet(spark: SparkSession, logger: str, level: str = "ERROR") -> None:
    """Raise one JVM logger to `level`."""
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(logger, getattr(log4j.Level, level))


@contextlib.contextmanager
def quieted(spark: SparkSession, logger: str) -> Iterator[None]:
    """One JVM logger raised to ERROR for a while, then back to its level."""
    was = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger(logger).getLevel()
    quiet(spark, logger)
    try:
        yield
    finally:
        quiet(spark, logger, was.name())


def quiet_shutdown(spark: SparkSession) -> None:
    """Just before a requested stop, once the query is drained: stopping a streaming query
    cancels its job group whether or not a job of it runs, and Spark's DAGScheduler warns each
    time it finds none ("Failed to cancel job group ... Cannot find active jobs for it"), twice
    at every graceful stop. The stop interrupts the query's thread as it leaves a trigger its
    drained sources held (`app.run.lifecycle`), and Hadoop may warn with the interrupt's stack
    while writing the offsets of a batch it then never runs. A stop that must interrupt a
    running batch (the drain's grace over) makes the broadcast of its plan log an error, each
    task it kills lost (warned of by the task set), and a write it interrupts log its abort (the
    task's error, then the writer's aborting and aborted); that batch is planned again after a
    restart, and its output was not committed. On a cluster, executors' last status messages
    reach a driver already stopping, which warns of each. Raised only now, so that a task
    failing while the query drains is still logged."""
    quiet(spark, "org.apache.spark.scheduler.DAGScheduler")
    quiet(spark, "org.apache.hadoop.util.Shell")
    quiet(spark, "org.apache.spark.broadcast.TorrentBroadcast", "OFF")
    quiet(spark, "org.apache.spark.scheduler.TaskSetManager")
    quiet(spark, "org.apache.spark.util.Utils", "OFF")
    quiet(spark, "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask", "OFF")
    quiet(spark, "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec", "OFF")
    quiet(spark, "org.apache.spark.rpc.netty.Dispatcher")


def task_slots(spark: SparkSession) -> int:
    """How many tasks the session runs at once: the default number of state partitions.

    State is partitioned by `spark.sql.shuffle.partitions` for a checkpoint's whole life, and
    every partition is a task per stateful stage and micro-batch, each with a fixed cost in its
    Python worker (the worker's set-up, its state store, its output), so more partitions than
    slots run slower (`docs/performance.md`). One partition per slot keeps every core busy; to
    scale out later, set it higher before the first run. The JVM counts a container's cores as
    its CPU limit allows.
    """
    context = spark.sparkContext
    if context.master.startswith("local"):
        return context.defaultParallelism
    conf = context.getConf()
    executors = int(conf.get("spark.executor.instances", "2") or 2)
    return max(executors * int(conf.get("spark.executor.cores", "1") or 1), 1)


def worker_python() -> str:
    """`streamjoin-python` beside this interpreter (see `ops.worker.interpreter`), else this one."""
    wrapper = Path(sys.executable).with_name("streamjoin-python")
    return str(wrapper) if wrapper.is_file() else sys.executable


def _passed_through(batches: Iterable) -> Iterator:
    yield from batches


def fork_workers_early(spark: SparkSession) -> None:
    """Have every task slot's Python worker started while the query is being set up.

    Spark starts a worker daemon, and forks workers from it, only when a stage first needs
    them: in the first micro-batch, on its critical path, after the query's set-up and
    planning, during which the cores are mostly idle. A tiny job of the SQL kind the query runs
    (its workers come from the same daemon, as the daemon is Spark's per worker environment)
    started now leaves the daemon up and a worker per slot idle for the first batch to take
    (`docs/performance.md`). It runs beside the set-up, in a thread; whatever it meets (the
    session stopped under it) is of no consequence and is not reported."""

    def run() -> None:
        with contextlib.suppress(Exception):
            slots = task_slots(spark)
            spark.range(slots, numPartitions=slots).mapInArrow(_passed_through, "id long").collect()

    threading.Thread(target=run, name="fork-workers-early", daemon=True).start()


class SparkStartError(RuntimeError):
    """Spark did not start; the message is the first line of why (the JVM's, or Spark's)."""


def build_session(
    master: str, conf: dict[str, str] | None = None, checkpoint: str | None = None
) -> SparkSession:
    """Create (or reuse) the session with the service's defaults, those of the `checkpoint`
    location's file system, overridden by `conf`."""
    # Python workers must run the interpreter that has this project installed.
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    # ... and so must the driver's (the streaming source runners, the state processor's set-up).
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", worker_python())
    # The driver's Python processes forked from a process that has their modules imported,
    # the service's among them, as the executors' worker daemon has.
    forkserver.start(PRELOADED)
    if master.startswith("local"):
        # Everything runs on this host: keep Spark's own sockets on loopback.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(with_task_attempts(master)).appName("streamjoin")
    local = checkpoint_conf(checkpoint) if checkpoint else {}
    merged = {**DEFAULT_CONF, **local, **(conf or {}), **FLINK_ARITHMETIC}
    if "spark.jars" in local and "spark.jars" in (conf or {}):  # the user's jars and these
        merged["spark.jars"] = f"{conf['spark.jars']},{local['spark.jars']}"  # type: ignore[index]
    for key, value in jvm_options(merged).items():
        builder = builder.config(key, value)
    try:
        with filtered_stderr(hold=True) as console:  # the JVM starts here, and keeps it
            spark = builder.getOrCreate()
            spark.conf.get(SHUFFLE_PARTITIONS)  # the SQL configuration, checked as it is built
        console.release()
    except Exception as err:  # Spark's JVM and gateway raise what they raise
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "JAVA_GATEWAY_EXITED" in reason:  # the JVM's own words say why
            reason = console.first_line() or reason
        raise SparkStartError(reason) from None
    if SHUFFLE_PARTITIONS not in (conf or {}):
        spark.conf.set(SHUFFLE_PARTITIONS, str(task_slots(spark)))
    spark.sparkContext.setLogLevel("WARN")
    for logger in QUIET_LOGGERS:
        quiet(spark, logger)
    spark.dataSource.register(KafkaDataSource)
    return spark
