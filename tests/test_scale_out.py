"""Scale-out on real separate executors: `streamjoin run` against a Spark standalone cluster
(a master and two workers on loopback), with RPC authentication and encryption on, through
Kafka, exactly once; one executor is SIGKILLed mid-run and nothing is lost or duplicated. No
secret (Spark's RPC secret, a Kafka password) appears in a log, an endpoint, the checkpoint
or a topic the service writes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_io import committed_output, join_topics, produce, read_topic
from tests.service import Service, service_env
from tests.spark_cluster import StandaloneCluster
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

# Master, workers and the application share one secret; every RPC is authenticated and
# encrypted (AES), as the Helm chart's scale-out sets it.
SECRET = "spark-rpc-0d1c8e"
SASL_PASSWORD = "kafka-sasl-7f3a2b"  # set, never used against this plaintext broker
AUTH = {"spark.authenticate": "true", "spark.authenticate.secret": SECRET,
        "spark.network.crypto.enabled": "true"}  # fmt: skip
ORDERS = 400


@pytest.fixture
def cluster(tmp_path: Path):
    daemon_opts = " ".join(f"-D{k}={v}" for k, v in AUTH.items())
    with StandaloneCluster(tmp_path / "cluster", env={"SPARK_DAEMON_JAVA_OPTS": daemon_opts}) as c:
        yield c


def scale_out_env(cluster: StandaloneCluster, **variables: str) -> dict[str, str]:
    spark = {**AUTH, "spark.executor.cores": "1", "spark.executor.memory": "1g",
             "spark.cores.max": "2", "spark.driver.host": "127.0.0.1",
             "spark.sql.shuffle.partitions": "4"}  # fmt: skip
    return service_env(**{
        "SPARK_MASTER": cluster.url, "TRIGGER_INTERVAL": "500ms", "OUTPUT_ENCODING": "retract",
        **{f"SPARK_CONF_{k}": v for k, v in spark.items()}, **variables,
    })  # fmt: skip


def page(service: Service, path: str) -> str:
    served = service.endpoint()
    assert served, service.log()[-3000:]
    try:
        with urllib.request.urlopen(f"{served}{path}", timeout=5) as r:
            return r.read().decode()
    except urllib.error.HTTPError as answer:  # /readyz may answer 503 between batches
        return answer.read().decode()


def everything_written(env: dict[str, str], cluster: StandaloneCluster) -> list[str]:
    """Every file of the checkpoint and the cluster (executor and worker logs), and every
    record of the output, dead-letter and marker topics, keys and headers included."""
    files = [*Path(env["CHECKPOINT_LOCATION"]).rglob("*"), *cluster.work.rglob("*")]
    texts = [f.read_bytes().decode(errors="replace") for f in files if f.is_file()]
    out, kafka = env["OUTPUT_TOPIC"], env["KAFKA_BOOTSTRAP_SERVERS"]
    for topic in (out, f"{out}.dlq", f"{out}.markers"):
        texts += [repr((r.key, r.value, r.headers)) for r in read_topic(kafka, topic)]
    return texts


def assert_no_secret_in(*texts: str) -> None:
    for text in texts:
        for secret in (SECRET, SASL_PASSWORD):
            assert secret not in text, text[max(0, text.find(secret) - 300) :][:600]


def run_through_a_lost_executor(
    cluster: StandaloneCluster, env: dict[str, str], log: Path,
    first_half: Callable[[], None], second_half: Callable[[], None],
    output: Callable[[], Counter], expected: Counter,
) -> None:  # fmt: skip
    """Run the service over the first half, SIGKILL an executor once some of it is out, then
    the second half: the committed output must be exactly `expected`."""
    first_half()
    service = Service(env, log)
    try:
        wait_for(lambda: sum(output().values()) > 0, 300, "no output", service)
        killed = cluster.kill_executor()
        second_half()
        wait_for(lambda: sum(output().values()) >= sum(expected.values()), 300,
                 "the output never completed", service)  # fmt: skip
        assert output() == expected, service.log()[-3000:]
        pages = [page(service, path) for path in ("/metrics", "/readyz", "/healthz")]
    finally:
        exit_code = service.terminate()
    assert exit_code == 0, service.log()[-3000:]
    assert_no_secret_in(service.log(), *pages, *everything_written(env, cluster))
    ran = cluster.executors_that_ran_tasks()
    assert len({r.split("/")[0] for r in ran}) == 2, ran  # tasks ran on both workers
    assert killed not in cluster.executor_pids()


def test_a_regular_join_survives_an_executor_killed_mid_run(
    kafka: str, tmp_path: Path, cluster: StandaloneCluster
) -> None:
    orders, products, out = join_topics(kafka, partitions=4)
    env = scale_out_env(
        cluster, KAFKA_BOOTSTRAP_SERVERS=kafka, LEFT_TOPIC=orders, RIGHT_TOPIC=products,
        OUTPUT_TOPIC=out, CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        LEFT_SCHEMA="order_id STRING, product_id STRING",
        RIGHT_SCHEMA="product_id STRING, name STRING",
        JOIN_ON="L.product_id = R.product_id", JOIN_SELECT="L.order_id, R.name",
        KAFKA_SASL_PASSWORD=SASL_PASSWORD,
    )  # fmt: skip

    def orders_from(first: int, last: int) -> Callable[[], None]:
        rows = [{"order_id": f"o{i}", "product_id": f"p{i % 20}"} for i in range(first, last)]
        return lambda: produce(kafka, orders, [json.dumps(r).encode() for r in rows], 4)

    def output() -> Counter:
        records = committed_output(kafka, out, f"{out}.markers")
        return Counter((v["op"], v["order_id"], v["name"])
                       for v in (json.loads(r.value) for r in records))  # fmt: skip

    produce(kafka, products, [json.dumps({"product_id": f"p{i}", "name": f"n{i}"}).encode()
                              for i in range(20)], 4)  # fmt: skip
    expected = Counter(("+I", f"o{i}", f"n{i % 20}") for i in range(ORDERS))
    run_through_a_lost_executor(
        cluster, env, tmp_path / "service.log", orders_from(0, ORDERS // 2),
        orders_from(ORDERS // 2, ORDERS), output, expected,
    )  # fmt: skip


def test_an_interval_join_survives_an_executor_killed_mid_run(
    kafka: str, tmp_path: Path, cluster: StandaloneCluster
) -> None:
    orders, shipments, out = join_topics(kafka, partitions=4)
    env = scale_out_env(
        cluster, KAFKA_BOOTSTRAP_SERVERS=kafka, LEFT_TOPIC=orders, RIGHT_TOPIC=shipments,
        OUTPUT_TOPIC=out, CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        LEFT_SCHEMA="order_id STRING, ot TIMESTAMP(3)", LEFT_TIME="ot",
        RIGHT_SCHEMA="ship_id STRING, order_id STRING, st TIMESTAMP(3)", RIGHT_TIME="st",
        JOIN_TYPE="interval", OUTPUT_ENCODING="append",
        JOIN_ON="L.order_id = R.order_id AND L.ot BETWEEN R.st - INTERVAL '1' HOUR AND R.st",
        JOIN_SELECT="L.order_id, R.ship_id",
    )  # fmt: skip

    def minute(i: int) -> str:
        return f"2026-11-22 {i // 60:02d}:{i % 60:02d}:00.000"

    def both_sides(first: int, last: int) -> Callable[[], None]:
        def send() -> None:
            produce(kafka, orders, [json.dumps({"order_id": f"o{i}", "ot": minute(i)}).encode()
                                    for i in range(first, last)], 4)  # fmt: skip
            produce(kafka, shipments, [json.dumps(
                {"ship_id": f"s{i}", "order_id": f"o{i}", "st": minute(i + 30)}).encode()
                for i in range(first, last)], 4)  # fmt: skip

        return send

    def output() -> Counter:
        records = committed_output(kafka, out, f"{out}.markers")
        return Counter((v["order_id"], v["ship_id"])
                       for v in (json.loads(r.value) for r in records))  # fmt: skip

    expected = Counter((f"o{i}", f"s{i}") for i in range(ORDERS))
    run_through_a_lost_executor(
        cluster, env, tmp_path / "service.log", both_sides(0, ORDERS // 2),
        both_sides(ORDERS // 2, ORDERS), output, expected,
    )  # fmt: skip
