"""What an existing checkpoint fixed for the life of its query.

Spark records some settings in each batch's entry of the checkpoint's offsets log and uses
those on restart, whatever the session says now: `spark.sql.shuffle.partitions` among them (the
state is partitioned by it). Code that must know how many tasks the restarted query will run
reads it here, not from the session.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from app.preflight import StartupError
from state.encoding import FORMAT

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
STATE_RECORD = "streamjoin-state.json"  # beside Spark's own logs in the checkpoint


def _filesystem(spark: SparkSession, path: Any) -> Any:
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[attr-defined]


def _latest_offsets_entry(spark: SparkSession, location: str) -> str | None:
    """The text of the offsets log's newest entry, None for a new checkpoint.

    Read through Hadoop's FileSystem, so that any checkpoint URI Spark accepts (a local path,
    `s3a://`, `hdfs://`) is read the way Spark reads it.
    """
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    log = jvm.org.apache.hadoop.fs.Path(location, "offsets")
    fs = _filesystem(spark, log)
    if not fs.exists(log):
        return None
    batches = [s.getPath().getName() for s in fs.listStatus(log)]
    numbered = [int(name) for name in batches if name.isdigit()]
    if not numbered:
        return None
    stream = fs.open(jvm.org.apache.hadoop.fs.Path(log, str(max(numbered))))
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def shuffle_partitions(spark: SparkSession, location: str) -> int:
    """The shuffle partitions the query at `location` runs with: the checkpoint's if it has
    one, else the session's (a new checkpoint takes the session's)."""
    entry = _latest_offsets_entry(spark, location)
    # An entry is "v1", then the batch's metadata (watermark, timestamp, conf), then offsets.
    recorded = json.loads(entry.splitlines()[1])["conf"] if entry else {}
    return int(recorded.get(SHUFFLE_PARTITIONS) or spark.conf.get(SHUFFLE_PARTITIONS) or 0)


def check_state_record(spark: SparkSession, location: str, settings: dict[str, Any]) -> None:
    """Resume only state this code can read, partitioned as the configuration says.

    The checkpoint records the state format (`state.encoding.FORMAT`) and the variables that
    decide how the state is laid out (`settings`, by variable name) while its query has planned
    no batch yet (a first start that failed early may be retried with other values); a later
    start with another format or another value is refused with StartupError, before any record
    is read. A checkpoint with batches but no record was written before the format was recorded
    (format 1, pickled objects).
    """
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(location, STATE_RECORD)
    fs = _filesystem(spark, path)
    wanted = {"state_format": FORMAT, **settings}
    if _latest_offsets_entry(spark, location) is None:
        stream = fs.create(path, True)
        try:
            stream.write(bytearray(json.dumps(wanted, sort_keys=True).encode()))
        finally:
            stream.close()
        return
    if not fs.exists(path):
        _refuse_format(1)
    stream = fs.open(path)
    try:
        recorded = json.loads(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()
    if recorded.get("state_format") != FORMAT:
        _refuse_format(recorded.get("state_format"))
    for variable, value in settings.items():
        if recorded.get(variable) != value:  # a setting recorded later than others was None
            raise StartupError(
                f"{variable}: {_shown(value)}, but the checkpoint at CHECKPOINT_LOCATION holds "
                f"state made with {variable}={_shown(recorded.get(variable))}: set it back, or "
                "give a new CHECKPOINT_LOCATION"
            )


def _shown(value: Any) -> Any:
    return "(none)" if value is None else value


def _refuse_format(found: Any) -> None:
    raise StartupError(
        f"CHECKPOINT_LOCATION: its join state is in format {found}, written by an earlier "
        f"streamjoin; this one reads format {FORMAT}. Give a new CHECKPOINT_LOCATION (with "
        "STARTING_OFFSETS=earliest the join state is rebuilt from the topics), or run the "
        "version that wrote it"
    )
