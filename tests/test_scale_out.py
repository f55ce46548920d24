"""Scale-out and rescale on real separate executors: `streamjoin run` against a Spark
standalone cluster (a master and four workers on loopback), with RPC authentication and
encryption on, through Kafka, exactly once. A regular join grows from 2 state partitions to 4
(an executor SIGKILLed mid-run) and shrinks to 3, and nothing is lost or duplicated; a temporal
join's waiting rows and timers go through the same rescale (local mode: moving state is
Spark's, wherever its executors run). No secret (Spark's RPC secret, a Kafka password) appears
in a log, an endpoint, the checkpoint or a topic the service writes. A job on the wall clock,
rescaled, fires the timers its state held (local mode)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_io import (
    committed_output,
    create_topics,
    join_topics,
    produce,
    read_topic,
    unique,
)
from tests.service import Service, service_env
from tests.spark_cluster import StandaloneCluster
from tests.test_join_service import metric, produce_events, scrape
from tests.test_service import wait_for

pytestmark = pytest.mark.spark

# Master, workers and the application share one secret; every RPC is authenticated and
# encrypted (AES), as the Helm chart's scale-out sets it.
SECRET = "spark-rpc-0d1c8e"
SASL_PASSWORD = "kafka-sasl-7f3a2b"  # set, never used against this plaintext broker
AUTH = {
    "spark.authenticate": "true",
    "spark.authenticate.secret": SECRET,
    "spark.network.crypto.enabled": "true",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """One cluster for the module's jobs, one after the other (its start takes 45 s)."""
    daemon_opts = " ".join(f"-D{k}={v}" for k, v in AUTH.items())
    with StandaloneCluster(
        tmp_path_factory.mktemp("cluster"),
        workers=4,
        env={"SPARK_DAEMON_JAVA_OPTS": daemon_opts},
    ) as c:
        yield c


def scale_out_env(cluster: StandaloneCluster, **variables: str) -> dict[str, str]:
    spark = {
        **AUTH,
        "spark.executor.cores": "1",
        "spark.executor.memory": "1g",
        "spark.cores.max": "2",
        "spark.driver.host": "127.0.0.1",
    }
    return service_env(
        **{
            "SPARK_MASTER": cluster.url,
            "TRIGGER_INTERVAL": "500ms",
            "OUTPUT_ENCODING": "retract",
            **{f"SPARK_CONF_{k}": v for k, v in spark.items()},
            **variables,
        }
    )


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


def committed(kafka: str, out: str, *columns: str) -> Counter:
    """The output's committed changes as (op, *columns)."""
    records = committed_output(kafka, out, f"{out}.markers")
    return Counter(
        (v.get("op", "+I"), *(v[c] for c in columns))  # append: no op
        for v in (json.loads(r.value) for r in records)
    )


def offsets_conf(checkpoint: Path) -> dict[str, str]:
    """The Spark settings the checkpoint's newest batch was planned with."""
    batches = [int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    entry = (checkpoint / "offsets" / str(max(batches))).read_text().splitlines()
    return json.loads(entry[1])["conf"]


def left_repartitioning(partitions: int) -> Callable[[Path], None]:
    """The checkpoint as a run that died while repartitioning to `partitions` leaves it: a
    batch planned with the last one's offsets on those partitions, and not finished."""

    def interrupt(checkpoint: Path) -> None:
        batch = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
        metadata = json.loads(lines[1])
        metadata["conf"]["spark.sql.shuffle.partitions"] = str(partitions)
        text = "\n".join([lines[0], json.dumps(metadata, separators=(",", ":")), *lines[2:]])
        (checkpoint / "offsets" / str(batch + 1)).write_text(text)

    return interrupt


def grow_and_shrink(
    cluster: StandaloneCluster | None,
    env: dict[str, str],
    tmp_path: Path,
    phases: list[Callable[[], None]],
    output: Callable[[], Counter],
    expected: list[Counter],
    interrupt: Callable[[Path], None],
) -> str:
    """Run a job over three phases of its input: on 2 state partitions and 2 executors (an
    available-now trigger: the run ends by itself), then grown to 4 (on a `cluster`, an
    executor SIGKILLed mid-run; then a graceful stop), then, after `interrupt` has left the
    checkpoint as a crash would, shrunk to 3. After each phase the committed output is
    `expected[n]`, change for change. Returns the logs of the three runs and the pages the
    second served."""
    logs = ""
    for n, (phase, partitions) in enumerate(zip(phases, (2, 4, 3), strict=True)):
        run_env = {**env, "STATE_PARTITIONS": str(partitions)}
        if cluster is not None:
            run_env["SPARK_CONF_spark.cores.max"] = str(partitions)
        if n == 0:
            phase()  # there before it starts
            run_env["TRIGGER_INTERVAL"] = "available-now"
        service = Service(run_env, tmp_path / f"service-{partitions}.log")
        try:
            if n == 0:
                service.process.wait(300)
            else:
                phase()
            if n == 1 and cluster is not None:
                wait_for(lambda: output() != expected[0], 300, "no output", service)
                cluster.kill_executor()
            wait_for(
                lambda: sum(output().values()) >= sum(expected[n].values()),  # noqa: B023
                300,
                "the output never completed",
                service,
            )
            if n == 1:  # what it serves, for the secrets check
                logs += "".join(page(service, path) for path in ("/metrics", "/readyz", "/healthz"))
        finally:
            exit_code = service.terminate()
        assert exit_code == 0, service.log()[-3000:]
        assert output() == expected[n], service.log()[-3000:]
        assert offsets_conf(Path(env["CHECKPOINT_LOCATION"]))[
            "spark.sql.shuffle.partitions"
        ] == str(partitions)
        logs += service.log()
        if n == 1:
            interrupt(Path(env["CHECKPOINT_LOCATION"]))
    for before, after in ((2, 4), (4, 3)):
        assert f"state repartitioned from {before} to {after} partitions" in logs, logs[-3000:]
    return logs


def test_a_regular_join_grows_to_4_partitions_and_shrinks_to_3_through_a_lost_executor(
    kafka: str, tmp_path: Path, cluster: StandaloneCluster
) -> None:
    """A join of orders with a Debezium products table: the orders, the products and the
    normalizer's keys move with every rescale, and the product changes of later phases retract
    exactly what the earlier ones joined."""
    orders, products, out = join_topics(kafka, partitions=4)
    env = scale_out_env(
        cluster,
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=orders,
        RIGHT_TOPIC=products,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        LEFT_SCHEMA="order_id STRING, product_id STRING",
        RIGHT_FORMAT="debezium-json",
        RIGHT_PRIMARY_KEY="product_id",
        RIGHT_SCHEMA="product_id STRING, name STRING",
        JOIN_ON="L.product_id = R.product_id",
        JOIN_SELECT="L.order_id, R.name",
        KAFKA_SASL_PASSWORD=SASL_PASSWORD,
    )
    product = {i: f"p{i % 20}" for i in range(300)}  # order i's product

    def send_orders(ids: range) -> None:
        produce(
            kafka,
            orders,
            [json.dumps({"order_id": f"o{i}", "product_id": product[i]}).encode() for i in ids],
            4,
        )

    def send_products(ids: range, op: str, version: int) -> None:
        rows = [{"product_id": f"p{i}", "name": f"p{i}@{version}"} for i in ids]
        produce_events(
            kafka,
            products,
            [
                {"before": r if op == "d" else None, "after": None if op == "d" else r, "op": op}
                for r in rows
            ],
            "product_id",
        )

    # 1: products p0-p19 at version 1, orders o0-o99; 2: p0-p9 updated to version 2, then
    # orders o100-o199 of p10-p19; 3: p10-p19 deleted, orders o200-o299 of p0-p9 (each phase's
    # changes touch keys the same phase's other changes do not, so their order cannot matter)
    phases = [
        lambda: (send_products(range(20), "c", 1), send_orders(range(100))),
        lambda: (send_products(range(10), "u", 2), send_orders(range(100, 200))),
        lambda: (send_products(range(10, 20), "d", 1), send_orders(range(200, 300))),
    ]
    for i in range(100, 300):
        product[i] = f"p{10 + i % 10}" if i < 200 else f"p{i % 10}"
    name = {i: f"{product[i]}@1" for i in range(300)}
    first = Counter(("+I", f"o{i}", name[i]) for i in range(100))
    updated = [i for i in range(100) if int(product[i][1:]) < 10]
    second = first + Counter(("+I", f"o{i}", name[i]) for i in range(100, 200))
    second += Counter(("-U", f"o{i}", name[i]) for i in updated)
    second += Counter(("+U", f"o{i}", f"{product[i]}@2") for i in updated)
    deleted = [i for i in range(200) if int(product[i][1:]) >= 10]
    third = second + Counter(("-D", f"o{i}", name[i]) for i in deleted)
    third += Counter(("+I", f"o{i}", f"{product[i]}@2") for i in range(200, 300))
    logs = grow_and_shrink(
        cluster,
        env,
        tmp_path,
        phases,
        lambda: committed(kafka, out, "order_id", "name"),
        [first, second, third],
        left_repartitioning(3),
    )
    assert "finishing the state's repartitioning the last run began" in logs, logs[-3000:]
    assert_no_secret_in(logs, *everything_written(env, cluster))
    ran = cluster.executors_that_ran_tasks()
    assert len({r.split("/")[0] for r in ran}) == 4, ran  # tasks ran on every worker


def test_a_temporal_join_keeps_its_waiting_orders_through_a_rescale(
    kafka: str, tmp_path: Path
) -> None:
    """An event-time temporal join holds the orders newer than the table's watermark, each
    with a timer: those waiting at a stop join the versions that come after the rescale. An
    input's watermark is its partitions' least, as in Flink: the table's changelog is one
    partition, and the order that waits past the end is in each of the orders' four."""
    orders, _, out = join_topics(kafka, partitions=4)
    products = unique("products")
    create_topics(kafka, [products])
    env = service_env(
        TRIGGER_INTERVAL="500ms",
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=orders,
        RIGHT_TOPIC=products,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        OUTPUT_ENCODING="append",
        JOIN_TYPE="temporal",
        JOIN_KIND="left",
        LEFT_SCHEMA="order_id STRING, product_id STRING, ot TIMESTAMP(3)",
        LEFT_TIME="ot",
        RIGHT_FORMAT="debezium-json",
        RIGHT_PRIMARY_KEY="product_id",
        RIGHT_TIME="vt",
        RIGHT_SCHEMA="product_id STRING, name STRING, vt TIMESTAMP(3)",
        JOIN_ON="L.product_id = R.product_id",
        JOIN_SELECT="L.order_id, R.name",
    )

    def at(minute: int) -> str:
        return f"2026-11-26 {minute // 60:02d}:{minute % 60:02d}:00.000"

    def send_orders(minutes: dict[int, int]) -> None:  # order id -> minute
        produce(
            kafka,
            orders,
            [
                json.dumps({"order_id": f"o{i}", "product_id": f"p{i % 10}", "ot": at(m)}).encode()
                for i, m in minutes.items()
            ],
            4,
        )

    def send_versions(ids: range, hour: int) -> None:
        rows = [{"product_id": f"p{i}", "name": f"p{i}@{hour}", "vt": at(60 * hour)} for i in ids]
        produce_events(
            kafka,
            products,
            [{"before": None, "after": r, "op": "c" if hour == 0 else "u"} for r in rows],
            "product_id",
        )

    minute = {i: i for i in range(50)}  # o0-o49 at 00:00-00:49
    minute |= {i: 40 + i for i in range(50, 70)}  # o50-o69 at 01:30-01:49
    minute |= {i: 80 + i for i in range(70, 90)}  # o70-o89 at 02:30-02:49
    minute |= {i: 300 for i in range(96, 100)}  # 05:00, in each partition: waits past the end
    # 1: versions at 00:00 and p0's at 01:00; o0-o59 (o50-o59 wait: the table's watermark is
    # 01:00). 2: versions at 02:00 (o50-o59 join), o60-o79 (o70-o79 wait). 3: versions at
    # 03:00 (o70-o79 join), o80-o89 and o96-o99 (wait)
    phases = [
        lambda: (
            send_versions(range(10), 0),
            send_versions(range(1), 1),
            send_orders({i: minute[i] for i in range(60)}),
        ),
        lambda: (send_versions(range(10), 2), send_orders({i: minute[i] for i in range(60, 80)})),
        lambda: (
            send_versions(range(10), 3),
            send_orders({i: minute[i] for i in [*range(80, 90), *range(96, 100)]}),
        ),
    ]

    versions = {k: [0, 60 * (k == 0), 120, 180] for k in range(10)}  # p0's at 01:00 too

    def version(i: int) -> int:  # the hour of order i's product's version at its time
        return max(v for v in versions[i % 10] if v <= minute[i]) // 60

    def joined(ids: range) -> Counter:
        return Counter(("+I", f"o{i}", f"p{i % 10}@{version(i)}") for i in ids)

    expected = [joined(range(50)), joined(range(70)), joined(range(90))]
    logs = grow_and_shrink(
        None,
        env,
        tmp_path,
        phases,
        lambda: committed(kafka, out, "order_id", "name"),
        expected,
        left_repartitioning(3),
    )
    assert "finishing the state's repartitioning the last run began" in logs, logs[-3000:]


def test_a_wall_clock_job_rescaled_pads_what_waited_with_no_new_record(
    kafka: str, tmp_path: Path
) -> None:
    """A LEFT interval join on processing time pads an order by a timer on the wall clock, 40 s
    after the order came. 20 orders are held on 2 partitions and the service stops before any
    is due; restarted with STATE_PARTITIONS=4 and no record after, every order is padded once
    (local mode). Spark's repartitioning moves the timers with their keys, but a restarted query
    runs no batch before it reads something new, and without one no timer fires: the service
    plans one at every start of a job on the wall clock."""
    orders, shipments, out = join_topics(kafka, partitions=2)
    env = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=orders,
        RIGHT_TOPIC=shipments,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        TRIGGER_INTERVAL="200ms",
        LEFT_SCHEMA="order_id STRING",
        RIGHT_SCHEMA="ship_id STRING, order_id STRING",
        JOIN_TYPE="interval",
        JOIN_KIND="left",
        OUTPUT_ENCODING="append",
        JOIN_ON="L.order_id = R.order_id AND "
        "L.proctime BETWEEN R.proctime - INTERVAL '40' SECOND AND R.proctime",
        JOIN_SELECT="L.order_id, R.ship_id",
        STATE_PARTITIONS="2",
    )
    produce(kafka, orders, [json.dumps({"order_id": f"o{i}"}).encode() for i in range(20)], 2)
    service = Service(env, tmp_path / "service-2.log")
    try:
        wait_for(
            lambda: (
                metric(scrape(service), 'streamjoin_state_rows{operator="join",side="left"}') == 20
            ),
            60,
            "the orders were not held",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert not committed(kafka, out, "order_id", "ship_id")  # none was due yet
    service = Service({**env, "STATE_PARTITIONS": "4"}, tmp_path / "service-4.log")
    try:
        wait_for(
            lambda: sum(committed(kafka, out, "order_id", "ship_id").values()) >= 20,
            150,
            "the orders were not padded after the rescale",
            service,
        )
    finally:
        assert service.terminate() == 0, service.log()[-3000:]
    assert committed(kafka, out, "order_id", "ship_id") == Counter(
        ("+I", f"o{i}", None) for i in range(20)
    )
    assert "state repartitioned from 2 to 4 partitions" in service.log()
    assert offsets_conf(Path(env["CHECKPOINT_LOCATION"]))["spark.sql.shuffle.partitions"] == "4"
