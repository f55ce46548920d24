"""The container image, built from the Dockerfile and run as an operator runs it: as its non-root
user, on a read-only root filesystem with a scratch /tmp, against the test broker.

Needs a Docker engine (CI starts one) and mmdebstrap the first time (see
`tests/container_image.py`); without either the tests are skipped, saying why.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.container_image import ImageUnavailable, service_image
from tests.kafka_broker import docker_engine
from tests.kafka_io import committed_output, create_topics, output_topics, unique
from tests.object_store import ObjectStore

pytestmark = pytest.mark.spark

# What the Helm chart mounts: the root filesystem read-only, /tmp writable (Spark's scratch and
# RocksDB's native library, which is loaded from there: /tmp must allow exec), the checkpoint.
HARDENED = [
    "--network",
    "host",
    "--read-only",
    "--tmpfs",
    "/tmp:exec",
    "--tmpfs",
    "/var/lib/streamjoin:uid=10001",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
]


@pytest.fixture(scope="module")
def image() -> str:
    if docker_engine() is None:
        pytest.skip("no Docker engine answers")
    try:
        return service_image()
    except ImageUnavailable as missing:
        pytest.skip(str(missing))


def test_the_image_runs_the_demo_against_a_broker(image: str, kafka: str) -> None:
    result = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            *HARDENED,
            "-e",
            f"KAFKA_BOOTSTRAP_SERVERS={kafka}",
            image,
            "demo",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  o_002 00:03:00 basketball 00:02:00 23.11" in result.stdout.splitlines()
    assert "  o_005 18:00:00 NULL       NULL     NULL" in result.stdout.splitlines()


def _produce_json(kafka: str, topic: str, rows: list[dict]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka})
    for row in rows:
        producer.produce(topic, json.dumps(row).encode())
    assert producer.flush(30) == 0


@pytest.fixture
def container(image: str) -> Iterator[str]:
    name = f"streamjoin-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)


@pytest.mark.parametrize("checkpoint", ["volume", "s3a"])
def test_the_image_joins_two_topics_as_a_non_root_user_under_tini(
    image: str, kafka: str, container: str, checkpoint: str
) -> None:
    """Its checkpoint on the volume the chart mounts, or on an object store through the jars
    the image carries (its root filesystem is read-only: nothing could be fetched)."""
    with contextlib.ExitStack() as stack:
        place = {}
        if checkpoint == "s3a":
            store = stack.enter_context(ObjectStore("image"))
            place = store.s3a_env() | {"CHECKPOINT_LOCATION": "s3a://image/join"}
        _join_in_container(image, kafka, container, place)
        if checkpoint == "s3a":
            assert store.names("join/commits/"), "no batch was committed to the object store"


def _join_in_container(image: str, kafka: str, container: str, place: dict[str, str]) -> None:
    orders, products, out = unique("orders"), unique("products"), unique("out")
    create_topics(kafka, [orders, products])
    output_topics(kafka, out)
    _produce_json(kafka, products, [{"product_id": f"p{i}", "name": f"n{i}"} for i in range(5)])
    _produce_json(
        kafka, orders, [{"order_id": f"o{i}", "product_id": f"p{i % 7}"} for i in range(40)]
    )
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka,
        "LEFT_TOPIC": orders,
        "RIGHT_TOPIC": products,
        "OUTPUT_TOPIC": out,
        "SPARK_MASTER": "local[2]",
        "METRICS_PORT": "0",
        "LEFT_SCHEMA": "order_id STRING, product_id STRING",
        "RIGHT_SCHEMA": "product_id STRING, name STRING",
        "JOIN_ON": "L.product_id = R.product_id",
        "JOIN_SELECT": "L.order_id, R.name",
        # spelled as a variable name: read through Spark's key list, which the image must ship
        "SPARK_CONF_SPARK_SQL_SHUFFLE_PARTITIONS": "2",
        **place,
    }
    flags = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    started = subprocess.run(
        ["docker", "run", "--detach", "--name", container, *HARDENED, *flags, image],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr

    def logs() -> str:
        shown = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        return (shown.stdout + shown.stderr)[-4000:]

    expected = sorted(("+I", f"o{i}", f"n{i % 7}") for i in range(40) if i % 7 < 5)
    records = committed_output(kafka, out, f"{out}.markers", at_least=len(expected))
    values = [json.loads(record.value) for record in records]
    assert sorted((v["op"], v["order_id"], v["name"]) for v in values) == expected, logs()

    processes = subprocess.run(
        ["docker", "exec", container, "ps", "-o", "pid=,uid=,args=", "-p", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split()
    assert processes == ["1", "10001", "tini", "--", "streamjoin", "run"]
    # the driver's JVM maps the class archive the image was built with; nothing records one

    def in_container(command: str) -> str:
        return subprocess.run(
            ["docker", "exec", container, "sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout

    (archive,) = in_container("ls -A /opt/streamjoin/jvm").split()
    assert re.fullmatch(r"driver-[0-9a-f]{16}\.jsa", archive)
    assert f"/opt/streamjoin/jvm/{archive}" in in_container("cat /proc/[0-9]*/maps")
    stopped = subprocess.run(["docker", "stop", "--time", "60", container], capture_output=True)
    assert stopped.returncode == 0
    exit_code = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.ExitCode}}", container],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert exit_code == "0", logs()
