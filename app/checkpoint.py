"""What an existing checkpoint fixed for the life of its query.

Spark records some settings in each batch's entry of the checkpoint's offsets log and uses
those on restart, whatever the session says now: `spark.sql.shuffle.partitions` among them (the
state is partitioned by it). Code that must know how many tasks the restarted query will run
reads it here, not from the session.
"""

from __future__ import annotations

import json

from pyspark.sql import SparkSession

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def _latest_offsets_entry(spark: SparkSession, location: str) -> str | None:
    """The text of the offsets log's newest entry, None for a new checkpoint.

    Read through Hadoop's FileSystem, so that any checkpoint URI Spark accepts (a local path,
    `s3a://`, `hdfs://`) is read the way Spark reads it.
    """
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    log = jvm.org.apache.hadoop.fs.Path(location, "offsets")
    fs = log.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
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
