"""A checkpoint on an object store (`s3a://`, here moto's S3 on loopback): the join killed,
stopped and restarted on it writes what one uninterrupted run writes, change for change; a
store that cannot be written is one line at start."""

from __future__ import annotations

import random
import secrets
from pathlib import Path

import pytest

from tests.kafka_io import join_topics
from tests.object_store import ObjectStore
from tests.service import Service, run_to_exit
from tests.test_faults import FEW_PARTITIONS, changelog, killed_runs, produced_inputs
from tests.test_join_service import join_env
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

BUCKET = "checkpoints"


@pytest.fixture(scope="module")
def store():
    with ObjectStore(BUCKET) as running:
        yield running


def batch_commits(store: ObjectStore, prefix: str) -> int:
    return sum(name.rsplit("/", 1)[-1].isdigit() for name in store.names(f"{prefix}/commits/"))


def test_a_join_killed_and_restarted_on_an_s3a_checkpoint_writes_each_change_once(
    kafka: str, store: ObjectStore, tmp_path: Path
) -> None:
    rng = random.Random(7)
    orders, products, out = produced_inputs(kafka, rng, 150, 30, 2)
    secret = f"s3a-{secrets.token_hex(8)}"

    def env(topic: str, checkpoint: str) -> dict[str, str]:
        return (
            join_env(kafka, orders, products, topic, Path("unused"))
            | FEW_PARTITIONS
            | store.s3a_env()
            | {
                "CHECKPOINT_LOCATION": checkpoint,
                "TRIGGER_INTERVAL": "available-now",
                "MAX_RECORDS_PER_TRIGGER": "120",
                "AWS_SECRET_ACCESS_KEY": secret,
            }
        )

    _, _, reference = join_topics(kafka)
    local = env(reference, str(tmp_path / "reference"))
    done = run_to_exit(local, timeout_s=600)
    assert done.returncode == 0, done.stderr[-3000:]

    prefix = "join"
    on_store = env(out, f"s3a://{BUCKET}/{prefix}")
    killed = killed_runs(on_store, lambda: batch_commits(store, prefix), [2], rng, tmp_path)
    assert killed == 1, "the run ended before it was killed"
    stopped = Service(on_store, tmp_path / "stopped.log")
    wait_for(lambda: batch_commits(store, prefix) >= 4, 300, "too few batches", stopped)
    assert stopped.terminate() == 0, stopped.log()[-3000:]
    last = run_to_exit(on_store, timeout_s=600)
    assert last.returncode == 0, last.stderr[-3000:]

    assert changelog(kafka, out) == changelog(kafka, reference)
    logs = [stopped.log(), last.stdout, last.stderr, (tmp_path / "run0.log").read_text()]
    assert not [log for log in logs if secret in log]


def test_an_s3a_checkpoint_in_a_bucket_that_does_not_exist_is_refused_in_one_line_unrevealed(
    kafka: str, store: ObjectStore, tmp_path: Path
) -> None:
    orders, products, out = join_topics(kafka)
    env = (
        join_env(kafka, orders, products, out, Path("unused"))
        | store.s3a_env()
        | {"CHECKPOINT_LOCATION": "s3a://streamjoin:hunter2@no-such-bucket/join"}
    )
    done = run_to_exit(env, timeout_s=300)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "streamjoin: CHECKPOINT_LOCATION: cannot write to s3a://*********(redacted)@"
            "no-such-bucket/join ("
        )
    ), done.stderr[-2000:]
    assert "hunter2" not in done.stdout + done.stderr
