"""What an existing checkpoint fixed for the life of its query.

Spark records some settings in each batch's entry of the checkpoint's offsets log and uses
those on restart, whatever the session says now: `spark.sql.shuffle.partitions` among them (the
state is partitioned by it). Code that must know how many tasks the restarted query will run
reads it here, not from the session.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, NoReturn

from pyspark.sql import SparkSession

from app.config.env import SHUFFLE_PARTITIONS
from app.config.redaction import without_user_info
from app.plan.planner import StateLayout
from app.run.preflight import StartupError
from state.store.encoding import FORMAT

STATE_RECORD = "streamjoin-state.json"  # beside Spark's own logs in the checkpoint
HELD_ROWS = "streamjoin-held-rows.json"  # see `HeldRowsRecord`
READ_TASKS = "read_tasks"  # in the state record, see `read_tasks`
JOB = "job"  # in the state record, see `job_id`


def _filesystem(spark: SparkSession, path: Any) -> Any:
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[attr-defined]


# The probe's own retries: S3A's defaults retry a refused connection for about two minutes
# before a start could be refused. The query itself keeps S3A's defaults.
PROBE_RETRIES = {"fs.s3a.attempts.maximum": "2", "fs.s3a.retry.limit": "1"}


def check_writable(spark: SparkSession, location: str) -> None:
    """A checkpoint on a remote file system (`s3a://`, `hdfs://`) proven writable before the
    query starts, by a probe directory made and removed in it: a wrong endpoint, bucket or
    credentials is then one line naming CHECKPOINT_LOCATION and the store's own reason, not a
    stack trace from the query's first batch. (A local one is proven before Spark starts,
    `app.run.preflight`.)"""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    hadoop = jvm.org.apache.hadoop
    probe = hadoop.fs.Path(location, f".streamjoin-probe-{uuid.uuid4().hex}")
    conf = hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    for key, value in PROBE_RETRIES.items():
        conf.set(key, value)
    try:
        fs = hadoop.fs.FileSystem.newInstance(probe.toUri(), conf)
        try:
            fs.mkdirs(probe)
            fs.delete(probe, True)
        finally:
            fs.close()
    except Exception as err:  # py4j's error, carrying the JVM's
        shown = without_user_info(location)  # a URI may carry credentials
        reason = _root_cause(err).replace(location, shown)
        raise StartupError(f"CHECKPOINT_LOCATION: cannot write to {shown} ({reason})") from None


def _root_cause(err: Exception) -> str:
    """The innermost Java exception's class and message, without the AWS SDK's request ids."""
    cause = getattr(err, "java_exception", None)
    if cause is None:
        return str(err).strip().splitlines()[0]
    while cause.getCause() is not None:
        cause = cause.getCause()
    message = str(cause.getMessage() or "").split(" (Service:")[0].split(" (SDK Attempt")[0]
    return f"{cause.getClass().getSimpleName()}: {message}".rstrip(": ")


def _last_entry(spark: SparkSession, location: str, name: str) -> tuple[int, Any] | None:
    """The newest batch of the checkpoint's log `name` (offsets, commits) and its path.

    Read through Hadoop's FileSystem, so that any checkpoint URI Spark accepts (a local path,
    `s3a://`, `hdfs://`) is read the way Spark reads it.
    """
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    log = jvm.org.apache.hadoop.fs.Path(location, name)
    fs = _filesystem(spark, log)
    if not fs.exists(log):
        return None
    batches = [s.getPath().getName() for s in fs.listStatus(log)]
    numbered = [int(name) for name in batches if name.isdigit()]
    if not numbered:
        return None
    return max(numbered), jvm.org.apache.hadoop.fs.Path(log, str(max(numbered)))


def last_batch(spark: SparkSession, location: str) -> int | None:
    """The newest batch planned at `location` (None for a new checkpoint)."""
    entry = _last_entry(spark, location, "offsets")
    return None if entry is None else entry[0]


def last_committed_batch(spark: SparkSession, location: str) -> int | None:
    """The newest batch that finished at `location` (None if none did)."""
    entry = _last_entry(spark, location, "commits")
    return None if entry is None else entry[0]


def _offsets_entry(spark: SparkSession, location: str, batch: int | None = None) -> str | None:
    """The text of the offsets log's entry of `batch` (the newest if None), None if there is
    none (a new checkpoint)."""
    entry = _last_entry(spark, location, "offsets")
    if entry is None:
        return None
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    path = (
        entry[1]
        if batch is None
        else jvm.org.apache.hadoop.fs.Path(entry[1].getParent(), str(batch))
    )
    fs = _filesystem(spark, path)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def shuffle_partitions(spark: SparkSession, location: str, batch: int | None = None) -> int:
    """The shuffle partitions the query at `location` runs with (or its `batch` ran with): the
    checkpoint's if it has one, else the session's (a new checkpoint takes the session's)."""
    entry = _offsets_entry(spark, location, batch)
    # An entry is "v1", then the batch's metadata (watermark, timestamp, conf), then offsets.
    recorded = json.loads(entry.splitlines()[1])["conf"] if entry else {}
    return int(recorded.get(SHUFFLE_PARTITIONS) or spark.conf.get(SHUFFLE_PARTITIONS) or 0)


def _record(spark: SparkSession, location: str, name: str = STATE_RECORD) -> Any:
    """The checkpoint's state record (or its file `name`), None if it has none. A record
    found only as the new one `_write_record` had written whole (a kill came between its
    removing the old and renaming the new) is renamed into place and read."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(location, name)
    fs = _filesystem(spark, path)
    if not fs.exists(path):
        written = jvm.org.apache.hadoop.fs.Path(location, f"{name}.tmp")
        if not fs.exists(written) or not fs.rename(written, path):
            return None
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    # Empty: a crash cut its writing short (before records were written whole, by rename), which
    # only happens before a first batch: a start then writes it again.
    return json.loads(text) if text.strip() else None


def state_record(spark: SparkSession, location: str) -> dict[str, Any] | None:
    """What the checkpoint's record says its state is and means (None: no record yet)."""
    return _record(spark, location)


def _write_record(
    spark: SparkSession, location: str, record: Any, name: str = STATE_RECORD
) -> None:
    """Write the record (or the file `name`) whole or not at all: to a file of its own, then
    renamed over the old one, so a crash leaves the old record or the new one whole (read from
    where it was written, `_record`), never a part of one, nor none (either made every later
    start fail)."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(location, name)
    written = jvm.org.apache.hadoop.fs.Path(location, f"{name}.tmp")
    fs = _filesystem(spark, path)
    stream = fs.create(written, True)
    try:
        stream.write(bytearray(json.dumps(record, sort_keys=True).encode()))
    finally:
        stream.close()
    fs.delete(path, False)  # Hadoop's rename does not replace a file
    if not fs.rename(written, path):
        raise OSError(f"could not rename {written} to {path}")


# Key buckets per state partition, for a new checkpoint when JOIN_STATE_BUCKETS is unset. The
# buckets are the most partitions a job can grow to (`app.run.rescale`): 16 let it grow 16-fold.
# Spark charges every bucket of a micro-batch a group of its own (a pandas frame, a state
# handle, a round trip per state call), so many small buckets cost more than few large ones;
# 16 cost no more than 8 did (measured in `docs/performance.md`).
BUCKETS_PER_PARTITION = 16


def state_buckets(spark: SparkSession, location: str) -> int:
    """The key buckets of the query at `location`: those its checkpoint was made with, else
    `BUCKETS_PER_PARTITION` per state partition."""
    recorded = (_record(spark, location) or {}).get("JOIN_STATE_BUCKETS")
    if isinstance(recorded, int):
        return recorded
    return BUCKETS_PER_PARTITION * shuffle_partitions(spark, location)


# Recorded by checkpoints whose temporal join takes its versioned table's changes as they come;
# one made before keeps the changelog normalizer it was made with (`JoinConfig`).
VERSIONS_AS_IS = {"VERSIONED_TABLE": "as-is"}


def normalizes_versions(spark: SparkSession, location: str) -> bool:
    """Whether the checkpoint at `location` was made with a normalizer in front of a temporal
    join's versioned table: one with batches that does not record `VERSIONS_AS_IS`."""
    if last_batch(spark, location) is None:
        return False
    record = _record(spark, location) or {}
    return all(record.get(k) != v for k, v in VERSIONS_AS_IS.items())


# Recorded by checkpoints whose buckets are grouped by their ids (`app.run.key_buckets`); one
# made before keeps grouping by the bucket's index.
SPREAD_BUCKETS = {"KEY_BUCKET_IDS": "spread"}


def spreads_buckets(spark: SparkSession, location: str) -> bool:
    """Whether the checkpoint at `location` groups its buckets by their ids: a new one, or one
    that records `SPREAD_BUCKETS`."""
    if last_batch(spark, location) is None:
        return True
    record = _record(spark, location) or {}
    return all(record.get(k) == v for k, v in SPREAD_BUCKETS.items())


def state_layout(spark: SparkSession, location: str, buckets: int | None) -> StateLayout:
    """How the checkpoint at `location` lays its state out (a new one as this version does);
    `buckets`: JOIN_STATE_BUCKETS, None for the checkpoint's (`state_buckets`)."""
    return StateLayout(
        buckets if buckets is not None else state_buckets(spark, location),
        spread_buckets=spreads_buckets(spark, location),
        versions_normalized=normalizes_versions(spark, location),
    )


def check_state_record(
    spark: SparkSession,
    location: str,
    settings: dict[str, Any],
    inputs: int = 1,
    meaning: dict[str, str] | None = None,
    write: bool = True,
    grown: dict[str, str] | None = None,
) -> None:
    """Resume only state this code can read, partitioned and meaning what the configuration
    says; `write`: record what is not recorded yet (False: only check, as `streamjoin check`).

    The checkpoint records the state format (`state.store.encoding.FORMAT`), the variables that
    decide how the state is laid out (`settings`, by variable name) and what its rows mean
    (`meaning`: the joins' kinds and keys, the inputs' keys and columns) while its query has
    planned no batch yet (a first start that failed early may be retried with other values); a
    later start with another format or another value is refused with StartupError, before any
    record is read. A checkpoint with batches but no record was written before the format was
    recorded (format 1, pickled objects); one whose record lacks what the state means was made
    before that was recorded, and takes it from this start. `grown`: what the record says from
    this start on, in place of what it said (an input's columns grown, `app.run.evolution`).
    """
    tasks = max(1, shuffle_partitions(spark, location) // inputs)  # see `read_tasks`
    meaning = meaning or {}
    wanted = {"state_format": FORMAT, READ_TASKS: tasks, **settings, **meaning}
    if last_batch(spark, location) is None:
        if write:
            _write_record(spark, location, {**(_record(spark, location) or {}), **wanted})
        return
    recorded = _record(spark, location)
    if recorded is None:
        _refuse_format(1)
    if recorded.get("state_format") != FORMAT:
        _refuse_format(recorded.get("state_format"))
    grew = bool(grown) and any(recorded.get(what) != value for what, value in grown.items())
    recorded = {**recorded, **(grown or {})}
    for variable, value in settings.items():
        if recorded.get(variable) != value:  # a setting recorded later than others was None
            _refuse_change(variable, value, recorded.get(variable))
    for what, value in meaning.items():
        if what in recorded and recorded[what] != value:
            _refuse_change(what, value, recorded[what])
    if write and (grew or any(what not in recorded for what in meaning)):
        _write_record(spark, location, {**meaning, **recorded})


def _refuse_change(variable: str, value: Any, recorded: Any) -> NoReturn:
    raise StartupError(
        f"{variable}: {_shown(value)}, but the checkpoint at CHECKPOINT_LOCATION holds state made "
        f"with {variable}={_shown(recorded)}: set it back, or give a new CHECKPOINT_LOCATION"
    )


def read_tasks(spark: SparkSession, location: str) -> int | None:
    """How many tasks read each input's partitions in a micro-batch (`serdes.kafka.source.
    task_ranges`), fixed when the checkpoint's record was made (`check_state_record`): the
    state's partitions (a task slot each) shared among the `inputs`, so that one wave of tasks
    reads a micro-batch. None, one task per partition, for a checkpoint made before it was
    recorded: a micro-batch re-run after a restart must be read by the same tasks as before,
    since its records are written exactly-once under its tasks' indices."""
    return (_record(spark, location) or {}).get(READ_TASKS)


def set_read_tasks(spark: SparkSession, location: str, tasks: int) -> None:
    """Record how many tasks read each input from now on: after a rescale, whose batch leaves
    no batch pending that the old tasks would have to re-run (`read_tasks`)."""
    _write_record(spark, location, {**(_record(spark, location) or {}), READ_TASKS: tasks})


def job_id(spark: SparkSession, location: str) -> str:
    """The id of the job whose checkpoint is at `location`: made with its state record and
    kept for its life, so that what the job keeps outside the checkpoint (each input
    partition's largest event time, `serdes.kafka.event_times`) is never an earlier job's."""
    record = _record(spark, location) or {}
    if not isinstance(record.get(JOB), str):
        record[JOB] = uuid.uuid4().hex[:16]
        _write_record(spark, location, record)
    return record[JOB]


def _shown(value: Any) -> Any:
    return "(none)" if value is None else value


def _refuse_format(found: Any) -> NoReturn:
    raise StartupError(
        f"CHECKPOINT_LOCATION: its join state is in format {found}, written by an earlier "
        f"streamjoin; this one reads format {FORMAT}. Give a new CHECKPOINT_LOCATION (with "
        "STARTING_OFFSETS=earliest the join state is rebuilt from the topics), or run the "
        "version that wrote it"
    )


Reports = dict[tuple[str, str, int], tuple[float, tuple]]  # `state.spark.frame.HeldRows`


class HeldRowsRecord:
    """What each bucket's state held at its last visit (`streamjoin_state_rows`), kept in the
    checkpoint after every micro-batch, so that a restart reports every bucket at once, not
    only those its batches have visited since. A report saved after the last committed batch
    (a crash between the two) is replaced when the batch runs again and its buckets report."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        self.spark, self.location = spark, location
        self.saved: Reports = {}
        self.batch: int | None = None

    def restored(self) -> Reports:
        """The reports the last run saved (none for a new checkpoint)."""
        saved = _record(self.spark, self.location, HELD_ROWS) or []
        self.saved = {
            (operator, side, bucket): (when, tuple((expires, n) for expires, n in counts))
            for operator, side, bucket, when, counts in saved
        }
        return dict(self.saved)

    def save(self, batch: int | None, reports: Reports) -> None:
        """Keep `reports` if a batch has run since the last save and they changed."""
        if batch == self.batch:
            return
        self.batch = batch
        if reports == self.saved:
            return
        rows = [
            [*key, when, [list(c) for c in counts]]
            for key, (when, counts) in sorted(reports.items())
        ]
        _write_record(self.spark, self.location, rows, HELD_ROWS)
        self.saved = dict(reports)
