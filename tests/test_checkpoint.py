"""A restarted query keeps its checkpoint's shuffle partitions, and start-up fences every task
id that query will write with, not the ids the session's setting would give; a new query has
one state partition per task slot; a checkpoint whose state this code cannot read, or that was
laid out with other settings, is refused before the query starts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from app.config.env import load_config
from app.run import checkpoint as checkpoints
from app.run.checkpoint import (
    SHUFFLE_PARTITIONS,
    STATE_RECORD,
    check_state_record,
    read_tasks,
    shuffle_partitions,
    state_buckets,
)
from app.run.joins import bucketed_join
from app.run.key_buckets import spread_ids
from app.run.pipeline import writers
from app.run.preflight import StartupError
from app.run.rescale import rescale
from app.run.session import CHECKPOINT_MANAGER, FILE_SYSTEM_MANAGER, checkpoint_conf, task_slots
from serdes.kafka.transactions import ExactlyOnce
from state.joins.specs import RegularJoinSpec, SideSpec
from state.store.encoding import FORMAT
from tests.kafka_io import committed_output, died_mid_transaction, join_topics


def checkpoint_of_a_stateful_query(
    spark: SparkSession, tmp_path: Path, partitions: int, checkpoint: str | None = None
) -> str:
    """The checkpoint of a counting query run once with `partitions` shuffle partitions (at
    `checkpoint`, if given, to run what it holds again)."""
    source = tmp_path / "in"
    source.mkdir(exist_ok=True)
    (source / "words.txt").write_text("a\nb\na\n")
    checkpoint = checkpoint or str(tmp_path / "checkpoint")
    session = spark.conf.get(SHUFFLE_PARTITIONS)
    spark.conf.set(SHUFFLE_PARTITIONS, str(partitions))
    try:
        counts = spark.readStream.text(str(source)).groupBy("value").count()
        query = (
            counts.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    finally:
        spark.conf.set(SHUFFLE_PARTITIONS, session)
    return checkpoint


def test_a_new_checkpoint_takes_the_sessions_shuffle_partitions(
    spark: SparkSession, tmp_path: Path
) -> None:
    assert shuffle_partitions(spark, str(tmp_path / "new")) == 2


def test_an_existing_checkpoint_keeps_its_own_shuffle_partitions(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = checkpoint_of_a_stateful_query(spark, tmp_path, partitions=5)
    assert shuffle_partitions(spark, checkpoint) == 5


def test_start_up_fences_the_task_ids_of_the_checkpoints_partitions(
    kafka: str, spark: SparkSession, tmp_path: Path
) -> None:
    """The checkpoint runs 4 state partitions, the session says 2; with one partition per
    input, the restarted query's tasks are 0-5. Task 5 of the crashed run died mid-transaction;
    unless start-up aborts it, task 1's commit is held back (see `ExactlyOnce.fence`)."""
    left, right, out = join_topics(kafka)
    config = load_config(
        {
            "KAFKA_BOOTSTRAP_SERVERS": kafka,
            "LEFT_TOPIC": left,
            "RIGHT_TOPIC": right,
            "OUTPUT_TOPIC": out,
            "CHECKPOINT_LOCATION": checkpoint_of_a_stateful_query(spark, tmp_path, partitions=4),
        }
    )
    sink = ExactlyOnce(config.output.transactional_id, config.output.marker_topic)
    died_mid_transaction(kafka, sink, 5, out)

    tasks = writers(spark, config)
    assert (tasks.count, tasks.first) == (6, {"left": 4, "right": 5})
    sink.fence({"bootstrap.servers": kafka}, tasks.count)
    assert sink.write({"bootstrap.servers": kafka}, 1, 5, [(out, b"k", b"whole", None)])
    assert [r.value for r in committed_output(kafka, out, config.output.marker_topic)] == [b"whole"]


def test_a_new_query_has_one_state_partition_per_task_slot(spark: SparkSession) -> None:
    assert task_slots(spark) == 2  # local[2]


def test_a_failed_task_is_run_again_on_a_local_master_as_on_a_cluster(spark: SparkSession) -> None:
    """A task that met a broker in trouble once must not end the query: Spark's local master
    gives up at the first failure unless told otherwise."""

    def fails_once(rows):
        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("the broker was away")
        yield from rows

    assert spark.sparkContext.parallelize([1, 2, 3], 1).mapPartitions(fails_once).collect() == [
        1,
        2,
        3,
    ]


def test_a_checkpoint_keeps_the_state_layout_its_first_batch_was_planned_with(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Hashing keys into other buckets would look the old keys up in the wrong place; until a
    batch is planned there is no state, and a first start that failed may retry otherwise."""
    checkpoint = str(tmp_path / "checkpoint")
    layout = {"JOIN_TYPE": "temporal", "JOIN_STATE_BUCKETS": 128}
    check_state_record(spark, checkpoint, {**layout, "JOIN_STATE_BUCKETS": 64})
    check_state_record(spark, checkpoint, layout)  # no batch yet: retried with other buckets
    checkpoint_of_a_stateful_query(spark, tmp_path, partitions=2)
    check_state_record(spark, checkpoint, layout)  # a restart as configured
    with pytest.raises(StartupError, match=r"^JOIN_STATE_BUCKETS: 64, .*JOIN_STATE_BUCKETS=128"):
        check_state_record(spark, checkpoint, {**layout, "JOIN_STATE_BUCKETS": 64})
    # an upsert materializer's state, keyed by the output key, would be new to this checkpoint
    with pytest.raises(StartupError, match=r"^OUTPUT_KEY: id, .*OUTPUT_KEY=\(none\): set it"):
        check_state_record(spark, checkpoint, {**layout, "OUTPUT_KEY": "id"})


def test_a_checkpoint_made_before_what_its_state_means_was_recorded_takes_it_at_a_restart(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An earlier version recorded no join kind, keys nor columns: its checkpoint resumes and
    records them, and from then on a change of them is refused."""
    checkpoint = str(tmp_path / "checkpoint")
    layout = {"JOIN_TYPE": "regular", "JOIN_STATE_BUCKETS": 32}
    check_state_record(spark, checkpoint, layout)  # as the earlier version recorded it
    checkpoint_of_a_stateful_query(spark, tmp_path, partitions=2)
    meaning = {"JOIN_KIND": "left", "LEFT_PRIMARY_KEY": "order_id"}
    check_state_record(spark, checkpoint, layout, meaning=meaning)
    check_state_record(spark, checkpoint, layout, meaning=meaning)
    with pytest.raises(StartupError, match=r"^JOIN_KIND: inner, .*JOIN_KIND=left: set it back"):
        check_state_record(spark, checkpoint, layout, meaning=meaning | {"JOIN_KIND": "inner"})


def test_a_record_whose_replacement_a_kill_cut_between_its_two_steps_is_read_whole(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A record is replaced in two steps: the new one written to a file of its own, the old one
    removed, the new renamed into place. Killed between the last two, the checkpoint had no
    record and every later start was refused; the new one is now taken from where it was
    written."""
    checkpoint = tmp_path / "checkpoint"
    layout = {"JOIN_TYPE": "regular", "JOIN_STATE_BUCKETS": 32}
    check_state_record(spark, str(checkpoint), layout)
    checkpoint_of_a_stateful_query(spark, tmp_path, partitions=2, checkpoint=str(checkpoint))
    record = checkpoint / STATE_RECORD
    (checkpoint / f"{STATE_RECORD}.tmp").write_text(record.read_text())  # the first step done
    record.unlink()  # the second: the kill comes before the third
    check_state_record(spark, str(checkpoint), layout)
    assert state_buckets(spark, str(checkpoint)) == 32
    assert json.loads(record.read_text())["JOIN_STATE_BUCKETS"] == 32


def test_a_temporal_join_made_behind_a_versioned_table_normalizer_keeps_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A versioned table's changes reach a new temporal join as they come; a checkpoint made
    while a normalizer stood in front of it holds that normalizer's state, and the join's
    deletes rely on it: it keeps the plan it was made with."""
    layout = {"JOIN_TYPE": "temporal", "JOIN_STATE_BUCKETS": 16}
    new = str(tmp_path / "new" / "checkpoint")
    assert not checkpoints.normalizes_versions(spark, new)
    check_state_record(spark, new, layout | checkpoints.VERSIONS_AS_IS)
    checkpoint_of_a_stateful_query(spark, tmp_path / "new", partitions=2)
    assert not checkpoints.normalizes_versions(spark, new)
    check_state_record(spark, new, layout | checkpoints.VERSIONS_AS_IS)  # a restart

    old = str(tmp_path / "old" / "checkpoint")
    check_state_record(spark, old, layout)  # recorded by an earlier version
    checkpoint_of_a_stateful_query(spark, tmp_path / "old", partitions=2)
    assert checkpoints.normalizes_versions(spark, old)
    check_state_record(spark, old, layout)  # a restart with the normalizer


def test_a_new_checkpoint_groups_its_buckets_by_spread_ids_an_old_one_by_their_index(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Buckets grouped by the ids of `app.run.key_buckets` land in other state partitions than
    by their index: a checkpoint made before the ids keeps its state where it is."""
    layout = {"JOIN_TYPE": "regular", "JOIN_STATE_BUCKETS": 16}
    new = str(tmp_path / "new" / "checkpoint")
    assert checkpoints.spreads_buckets(spark, new)
    check_state_record(spark, new, layout | checkpoints.SPREAD_BUCKETS)
    checkpoint_of_a_stateful_query(spark, tmp_path / "new", partitions=2)
    assert checkpoints.spreads_buckets(spark, new)
    check_state_record(spark, new, layout | checkpoints.SPREAD_BUCKETS)  # a restart

    old = str(tmp_path / "old" / "checkpoint")
    check_state_record(spark, old, layout)  # recorded by an earlier version
    checkpoint_of_a_stateful_query(spark, tmp_path / "old", partitions=2)
    assert not checkpoints.spreads_buckets(spark, old)
    check_state_record(spark, old, layout)  # a restart, grouped by the index


@pytest.mark.parametrize("buckets", [32, 48, 128])
def test_spread_bucket_ids_fill_every_state_partition_alike(
    spark: SparkSession, buckets: int
) -> None:
    """Spark places a bucket in partition `pmod(hash(id), partitions)`: every partition count
    that divides the buckets gets as many buckets in each partition (by the index, 32 buckets
    on 2 partitions are 12 and 20)."""
    ids = spark.createDataFrame([(i,) for i in spread_ids(buckets)], "id BIGINT")
    counts = [n for n in range(1, buckets + 1) if buckets % n == 0]
    placed = ids.select(*[F.pmod(F.hash("id"), F.lit(n)).alias(str(n)) for n in counts]).collect()
    for n in counts:
        assert Counter(row[str(n)] for row in placed) == dict.fromkeys(range(n), buckets // n)


def test_a_join_s_rows_reach_its_two_state_partitions_in_halves(spark: SparkSession) -> None:
    """Through the join's own wiring (32 buckets, 2 partitions): its stateful stage's tasks
    take half of 4,000 keys each, give or take the keys' own spread over the buckets (by the
    buckets' index, 1,504 and 2,496)."""
    left = StructType([StructField("id", StringType())])
    right = StructType([StructField("id", StringType()), StructField("v", IntegerType())])
    key = F.concat(F.lit("k"), F.col("id").cast("string"))
    changes = spark.range(4000).select(
        F.lit(0).cast("byte").alias("side"),
        F.lit("+I").alias("op"),
        F.col("id").alias("seq"),
        F.lit(None).cast("long").alias("ts"),
        F.struct(key.alias("id")).alias("left"),
        F.lit(None).cast(right).alias("right"),
    )
    spec = RegularJoinSpec(
        "left", "L.id = R.id", SideSpec(("id",)), SideSpec(("id", "v")), buckets=32
    )
    joined = bucketed_join(changes, spec, left, right)
    per_task = joined.groupBy(F.spark_partition_id().alias("task")).count().collect()
    assert sorted(row["task"] for row in per_task) == [0, 1]
    assert all(1900 <= row["count"] <= 2100 for row in per_task)


def test_a_checkpoint_written_before_the_state_format_was_recorded_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = checkpoint_of_a_stateful_query(spark, tmp_path, partitions=2)
    with pytest.raises(StartupError, match=r"^CHECKPOINT_LOCATION: .* format 1, .*new CHECKPOINT"):
        check_state_record(spark, checkpoint, {"JOIN_TYPE": "regular"})


def test_a_new_checkpoint_takes_16_buckets_per_partition_an_old_one_keeps_its_own(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Unset, JOIN_STATE_BUCKETS is what the checkpoint was made with (128, or 8 per partition,
    before this default), so that a checkpoint of an earlier version resumes as it is."""
    checkpoint = str(tmp_path / "checkpoint")
    assert state_buckets(spark, checkpoint) == 16 * 2  # the session's 2 shuffle partitions
    check_state_record(spark, checkpoint, {"JOIN_TYPE": "regular", "JOIN_STATE_BUCKETS": 128})
    assert state_buckets(spark, checkpoint) == 128


def test_a_record_a_crash_cut_short_before_the_first_batch_is_written_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A service killed while writing the record left it empty, and every later start failed
    on it; a record is now written whole, and an empty one (no batch yet) is written again."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "streamjoin-state.json").write_text("")
    assert state_buckets(spark, str(checkpoint)) == 16 * 2
    check_state_record(spark, str(checkpoint), {"JOIN_TYPE": "regular", "JOIN_STATE_BUCKETS": 16})
    assert state_buckets(spark, str(checkpoint)) == 16
    assert sorted(p.name for p in checkpoint.iterdir() if not p.name.endswith(".crc")) == [
        "streamjoin-state.json"
    ]


def test_a_new_checkpoint_is_read_by_a_task_per_state_partition_an_old_one_per_kafka_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A micro-batch re-run after a restart must be read by the tasks that read it before: the
    pass-through writes it exactly-once under those tasks' indices."""
    checkpoint = str(tmp_path / "new")
    check_state_record(spark, checkpoint, {"JOIN_TYPE": "regular"}, inputs=2)
    assert read_tasks(spark, checkpoint) == 1  # the session's 2 shuffle partitions, 2 inputs
    lookup = str(tmp_path / "lookup")
    check_state_record(spark, lookup, {"JOIN_TYPE": "lookup"}, inputs=1)
    assert read_tasks(spark, lookup) == 2
    old = checkpoint_of_a_stateful_query(spark, tmp_path, partitions=2)
    record = {"state_format": FORMAT, "JOIN_TYPE": "regular"}  # as recorded before
    (Path(old) / STATE_RECORD).write_text(json.dumps(record))
    check_state_record(spark, old, {"JOIN_TYPE": "regular"})
    assert read_tasks(spark, old) is None


def test_a_local_checkpoint_renames_its_files_itself_and_others_keep_sparks_manager() -> None:
    """A local path or file: URL (a volume in Kubernetes) gets the manager whose rename is the
    file system's own; HDFS keeps Spark's default, whose rename may overwrite; S3 keeps it too,
    with hadoop-aws's jars on the classpath."""
    local = {CHECKPOINT_MANAGER: FILE_SYSTEM_MANAGER}
    assert checkpoint_conf("/var/lib/streamjoin/checkpoint") == local
    assert checkpoint_conf("file:///var/lib/streamjoin/checkpoint") == local
    assert checkpoint_conf("hdfs://namenode:8020/streamjoin") == {}
    s3a = checkpoint_conf("s3a://bucket/streamjoin")
    assert list(s3a) == ["spark.jars"]
    assert any(Path(jar).name == "hadoop-aws-3.5.0.jar" for jar in s3a["spark.jars"].split(","))


def test_a_rescale_finishes_a_pending_batch_first_and_stops_at_the_key_buckets(
    spark: SparkSession, tmp_path: Path
) -> None:
    """STATE_PARTITIONS past the buckets is refused; within them, a batch the last run left
    pending runs first, then Spark moves the state, and the tasks that read each input follow."""
    checkpoint = checkpoint_of_a_stateful_query(spark, tmp_path, partitions=2)
    checkpoints._write_record(spark, checkpoint, {"JOIN_STATE_BUCKETS": 4, "read_tasks": 1})
    with pytest.raises(StartupError, match=r"^STATE_PARTITIONS: 8, but .* into 4 key buckets"):
        rescale(spark, checkpoint, 8, 2, finish=lambda: pytest.fail("nothing to finish"))
    last = checkpoints.last_batch(spark, checkpoint)
    (Path(checkpoint) / "commits" / str(last)).unlink()  # as a run that died in it leaves it
    finished = []
    assert rescale(
        spark,
        checkpoint,
        4,
        2,
        finish=lambda: finished.append(
            checkpoint_of_a_stateful_query(spark, tmp_path, 2, checkpoint)
        ),
    )
    assert finished and shuffle_partitions(spark, checkpoint) == 4
    assert checkpoints.read_tasks(spark, checkpoint) == 2  # 4 partitions, 2 inputs
    assert not rescale(spark, checkpoint, 4, 2, finish=lambda: pytest.fail("nothing pending"))
