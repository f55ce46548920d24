"""Every configuration mistake refused at start-up, against the test broker: exit 2, one line
per mistake naming its variable, no traceback, and nothing read or written."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from app.config.env import load_config
from app.demo import SCRIPT
from app.run.preflight import _unreachable
from tests.kafka_io import create_topics, join_topics, output_topics, produce, read_topic, unique
from tests.schema_registry import SchemaRegistry
from tests.service import run_to_exit, service_env, streamjoin_command

pytestmark = pytest.mark.spark

JOIN = {
    "LEFT_SCHEMA": "order_id STRING, product_id STRING, qty INT, order_ms BIGINT, "
    "order_time TIMESTAMP_LTZ(3), note STRING",
    "RIGHT_SCHEMA": "product_id STRING, price DECIMAL(10,2), updated TIMESTAMP(3)",
    "RIGHT_FORMAT": "debezium-json",
    "RIGHT_PRIMARY_KEY": "product_id",
    "JOIN_KIND": "left",
    "JOIN_ON": "L.product_id = R.product_id",
}
INTERVAL = {
    "JOIN_TYPE": "interval",
    "RIGHT_FORMAT": "json",
    "RIGHT_PRIMARY_KEY": "",
    "LEFT_TIME": "order_time",
    "RIGHT_TIME": "updated",
    "JOIN_KIND": "inner",
    "JOIN_ON": "L.product_id = R.product_id AND L.order_time BETWEEN R.updated - INTERVAL '1' "
    "HOUR AND R.updated",
    "OUTPUT_ENCODING": "append",
}


@pytest.fixture
def topics(kafka: str) -> tuple[str, str, str]:
    left, right, out = join_topics(kafka)
    produce(kafka, left, [b'{"order_id": "o1", "product_id": "p1", "qty": 1}'])
    return left, right, out


def env_for(kafka: str, topics: tuple[str, str, str], checkpoint: Path, **changes: str) -> dict:
    left, right, out = topics
    base = service_env(
        KAFKA_BOOTSTRAP_SERVERS=kafka,
        LEFT_TOPIC=left,
        RIGHT_TOPIC=right,
        OUTPUT_TOPIC=out,
        CHECKPOINT_LOCATION=str(checkpoint),
        **JOIN,
    )
    merged = {
        **base,
        **{k.replace("{left}", left): v.replace("{left}", left) for k, v in changes.items()},
    }
    return {k: v for k, v in merged.items() if v != ""}


def refused(kafka: str, topics: tuple[str, str, str], tmp_path: Path, **changes: str) -> list[str]:
    """The lines `streamjoin run` exits with (asserting exit 2 and that nothing happened)."""
    checkpoint = tmp_path / "checkpoint"
    result = run_to_exit(env_for(kafka, topics, checkpoint, **changes))
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert not checkpoint.exists(), "a refused start wrote its checkpoint"
    out = topics[2]
    assert read_topic(kafka, out) == [] and read_topic(kafka, f"{out}.dlq") == []
    return result.stderr.strip().splitlines()


def assert_one_line(lines: list[str], start: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"streamjoin: {start}"), lines[0]


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        # an epoch-millisecond BIGINT read as a time would put the bounds off by 1000x
        (
            {**INTERVAL, "LEFT_TIME": "order_ms"},
            "LEFT_TIME: expected a TIMESTAMP(3) or TIMESTAMP_LTZ(3) column",
        ),
        ({**INTERVAL, "LEFT_TIME": "note"}, "LEFT_TIME: expected a TIMESTAMP(3)"),
        (
            {"JOIN_ON": "L.qty = R.product_id"},
            "JOIN_ON: expected a condition Flink accepts (L.qty = R.product_id compares L.qty "
            "(INT) with R.product_id (STRING))",
        ),
        (
            {"JOIN_ON": "L.product_id = R.product_id AND L.qty = 'abc'"},
            "JOIN_ON: expected a condition Flink accepts (L.qty = 'abc' compares",
        ),
        (
            {"JOIN_ON": "L.product_id"},
            "JOIN_ON: expected a condition Flink accepts (L.product_id (STRING) is not a condition",
        ),
        ({"JOIN_ON": "1"}, "JOIN_ON: expected a condition Flink accepts (the number 1 is not"),
        (
            {"JOIN_ON": ""},
            "JOIN_ON: expected a join condition over L and R like 'L.id = R.id' "
            "(to forward both inputs unjoined, set JOIN_TYPE=forward)",
        ),
        ({"OUTPUT_TOPIC": "{left}"}, "OUTPUT_TOPIC: expected a topic other than the inputs'"),
        ({"DLQ_TOPIC": "{left}"}, "DLQ_TOPIC: expected a topic other than the inputs'"),
        ({"DLQ_TOPIC": "no-such-dlq"}, "DLQ_TOPIC: Kafka topic 'no-such-dlq' does not exist"),
        (
            {"STARTING_OFFSETS": '{"elsewhere": {"0": 1}}'},
            "STARTING_OFFSETS: expected offsets of the input topics",
        ),
        ({"STATE_TTL": "3600"}, "STATE_TTL: expected a duration with its unit"),
        ({**INTERVAL, "STATE_TTL": "1h"}, "STATE_TTL: expected 0 or unset: a interval join's"),
        (
            {"KAFKA_bootstrap.servers": "elsewhere:9092"},
            "KAFKA_bootstrap.servers: expected a client property other than bootstrap.servers "
            "(set KAFKA_BOOTSTRAP_SERVERS instead)",
        ),
        (
            {"JOIN_TPYE": "interval"},
            "JOIN_TPYE: expected a variable streamjoin reads (did you "
            "mean JOIN_TYPE?); streamjoin has no such variable",
        ),
        (
            {"LEFT_WATERMARK_DELAYS": "5s"},
            "LEFT_WATERMARK_DELAYS: expected a variable streamjoin "
            "reads (did you mean LEFT_WATERMARK_DELAY?)",
        ),
        ({"LOG_LEVEL": "chatty"}, "LOG_LEVEL: expected one of DEBUG|INFO|WARNING|ERROR|CRITICAL"),
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT: expected one of text|json"),
    ],
)
def test_what_was_silently_wrong_is_refused(
    kafka: str, topics, tmp_path: Path, changes: dict, start: str
) -> None:
    assert_one_line(refused(kafka, topics, tmp_path, **changes), start)


def test_a_topic_the_sql_names_that_does_not_exist_is_told_at_its_line(
    kafka: str, tmp_path: Path
) -> None:
    suffix = unique("-")
    create_topics(kafka, [f"orders{suffix}"])
    output_topics(kafka, f"orders_enriched{suffix}")
    script = SCRIPT.format(suffix=suffix)  # its product_changelog topic is not created
    line = 1 + script[: script.index("CREATE TABLE product_changelog")].count("\n")
    result = run_to_exit(
        service_env(
            KAFKA_BOOTSTRAP_SERVERS=kafka,
            STREAMJOIN_SQL=script,
            CHECKPOINT_LOCATION=str(tmp_path / "ck"),
        )
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert_one_line(
        result.stderr.strip().splitlines(),
        f"STREAMJOIN_SQL line {line} (RIGHT_TOPIC): Kafka topic "
        f"'product_changelog{suffix}' does not exist",
    )


def busy_port() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        (
            {"JOIN_ON": ";"},
            "JOIN_ON: expected a condition over L and R like 'L.id = R.id' "
            "(one condition, not 0 statements)",
        ),
        (
            {"LEFT_SCHEMA": "order_id STRING); --"},
            "LEFT_SCHEMA: expected a column list like "
            "'id STRING, ts TIMESTAMP(3)' (one list of columns, nothing after it)",
        ),
        (
            {"JOIN_SELECT": "L.order_id, R.colour"},
            "JOIN_SELECT: expected a select list over the "
            "output's columns (select list: 'R.colour': no such column)",
        ),
        ({"OUTPUT_KEY": "order_id"}, "OUTPUT_KEY: expected columns of the output (L_order_id, "),
        (
            {
                "RIGHT_FORMAT": "debezium-avro-confluent",
                "SCHEMA_REGISTRY_URL": "http://127.0.0.1:1",
            },
            "SCHEMA_REGISTRY_URL: no schema registry answered",
        ),
        (
            {"LEFT_SCHEMA": "order_id STRING, product_id STRING, tags ROW<x INT>"},
            "LEFT_SCHEMA: expected a column list like 'id STRING, ts TIMESTAMP(3)' (column tags: "
            "unsupported type ROW<x INT>)",
        ),
        (
            {"CHECKPOINT_LOCATION": "/etc/hostname/checkpoint"},
            "CHECKPOINT_LOCATION: /etc/hostname is a file, not a directory",
        ),
        # root may write anywhere by its permission bits, yet not into /proc
        (
            {"CHECKPOINT_LOCATION": "/proc/streamjoin-x"},
            "CHECKPOINT_LOCATION: cannot write to /proc/streamjoin-x (No such file or directory)",
        ),
        (
            {"CHECKPOINT_LOCATION": "gs://bucket/checkpoint"},
            "CHECKPOINT_LOCATION: expected a directory (a volume every executor mounts, when "
            "executors run elsewhere), an hdfs:// or an s3a:// URI; got gs://…, whose Hadoop "
            "filesystem is not installed",
        ),
    ],
)
def test_what_raised_a_traceback_is_one_line(
    kafka: str, topics, tmp_path: Path, changes: dict, start: str
) -> None:
    lines = refused(kafka, topics, tmp_path, **changes)
    assert_one_line(lines, start)


def test_a_metrics_port_in_use_and_a_bad_registry_property_are_named(
    kafka: str, topics, tmp_path: Path
) -> None:
    with busy_port() as listener, SchemaRegistry() as registry:
        lines = refused(
            kafka,
            topics,
            tmp_path,
            METRICS_PORT=str(listener.getsockname()[1]),
            RIGHT_FORMAT="debezium-avro-confluent",
            SCHEMA_REGISTRY_URL=registry.url,
            SCHEMA_REGISTRY_NOT_A_PROPERTY="1",
        )
    assert len(lines) == 2, lines
    assert lines[0].startswith("streamjoin: METRICS_PORT: port ")
    assert "cannot be served" in lines[0]
    assert lines[1] == (
        "streamjoin: SCHEMA_REGISTRY_NOT_A_PROPERTY: not a schema registry client property "
        "(Unrecognized properties: not.a.property)"
    ), lines[1]


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("spark.driver.memory", "Invalid maximum heap size: -Xmxlots"),  # the JVM's own words
        ("spark.sql.shuffle.partitions", "[INVALID_CONF_VALUE.TYPE_MISMATCH] The value 'lots'"),
    ],
)
def test_spark_refusing_its_configuration_is_one_line(
    kafka: str, topics, tmp_path: Path, key: str, reason: str
) -> None:
    lines = refused(kafka, topics, tmp_path, **{f"SPARK_CONF_{key}": "lots"})
    # every Spark variable given is named (the tests' JVM options are given as one)
    (line,) = lines
    named, said = line.removeprefix("streamjoin: ").split(": Spark did not start: ")
    assert f"SPARK_CONF_{key}" in named.split(" / "), line
    assert said.startswith(reason), line


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        (
            {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
            "KAFKA_BOOTSTRAP_SERVERS: cannot connect to 127.0.0.1:1 (",
        ),
        (
            {"KAFKA_BOOTSTRAP_SERVERS": "no-such-host.invalid:9092"},
            "KAFKA_BOOTSTRAP_SERVERS: a host of no-such-host.invalid:9092 is not known to DNS",
        ),
        # TLS against a plaintext listener: the handshake is refused (Apache Kafka), or nothing
        # answers in time (brokers that say nothing)
        ({"KAFKA_SECURITY_PROTOCOL": "SSL"}, "KAFKA_SECURITY_PROTOCOL: "),
        (
            {
                "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "KAFKA_SASL_MECHANISM": "PLAIN",
                "KAFKA_SASL_USERNAME": "streamjoin",
                "KAFKA_SASL_PASSWORD": "hunter2-secret",
            },
            "KAFKA_SASL_USERNAME / KAFKA_SASL_PASSWORD: the brokers at ",
        ),
        ({"KAFKA_NOT_A_PROPERTY": "1"}, "KAFKA_NOT_A_PROPERTY: not a usable Kafka client"),
    ],
)
def test_a_broker_that_does_not_answer_is_told_apart(
    kafka: str, topics, tmp_path: Path, changes: dict, start: str
) -> None:
    assert_one_line(refused(kafka, topics, tmp_path, **changes), start)


@pytest.mark.parametrize(
    "said",
    [
        "SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker listener?",
        # the broker's close seen before the handshake's failure: a loaded machine's order
        "Disconnected: SSL connection closed by peer (after 7ms in state SSL_HANDSHAKE)",
    ],
)
def test_tls_refused_by_a_plaintext_listener_names_the_security_protocol(said: str) -> None:
    config = load_config(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
            "KAFKA_SECURITY_PROTOCOL": "SSL",
            "LEFT_TOPIC": "orders",
            "RIGHT_TOPIC": "products",
            "OUTPUT_TOPIC": "out",
            "CHECKPOINT_LOCATION": "/var/lib/streamjoin",
        }
    )
    error = KafkaError(KafkaError._TRANSPORT, f"ssl://127.0.0.1:9092/bootstrap: {said}")
    failure = KafkaError(KafkaError._TRANSPORT, "Failed to get metadata")
    refusal = str(_unreachable(config, [error], failure))
    assert refusal.startswith("KAFKA_SECURITY_PROTOCOL: the brokers at 127.0.0.1:9092"), refusal


def test_every_mistake_is_reported_at_once(kafka: str, topics, tmp_path: Path) -> None:
    lines = refused(
        kafka,
        topics,
        tmp_path,
        JOIN_KIND="sideways",
        STATE_TTL="5",
        OUTPUT_DELIVERY="twice",
        JOIN_TPYE="regular",
    )
    assert sorted(line.split(":")[1].strip() for line in lines) == [
        "JOIN_KIND",
        "JOIN_TPYE",
        "OUTPUT_DELIVERY",
        "STATE_TTL",
    ]


def test_check_runs_every_start_up_check_and_prints_the_plan_with_secrets_masked(
    kafka: str, topics, tmp_path: Path
) -> None:
    env = env_for(
        kafka,
        topics,
        tmp_path / "checkpoint",
        JOIN_ON="L.product_id = R.product_id AND L.qty <= 3",
        KAFKA_SASL_PASSWORD="hunter2-secret",
        OUTPUT_ENCODING="upsert",
        OUTPUT_KEY="L_order_id",
        KAFKA_SECURITY_PROTOCOL="PLAINTEXT",
    )
    result = subprocess.run(
        [*streamjoin_command(), "check"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "join: regular LEFT" in out
    assert "join key: L.product_id = R.product_id" in out
    assert "residual condition: L.qty <= 3" in out
    assert "left state: a multiset of rows (row -> count) per join key" in out
    assert "right state: one row per join key (its unique key is in the join key)" in out
    assert "changelog +I -U +U -D, upsert" in out
    assert "upsert materializer: on" in out
    assert "KAFKA_SASL_PASSWORD=*********(redacted)" in out
    assert "hunter2" not in out + result.stderr
    assert not (tmp_path / "checkpoint").exists()
    bad = subprocess.run(
        [*streamjoin_command(), "check"],
        env={**env, "JOIN_ON": "L.x = R.y"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("streamjoin: JOIN_ON: ")


def test_help_lists_the_commands_and_variables_and_version_prints() -> None:
    help_text = subprocess.run(
        [*streamjoin_command(), "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    for word in ("run", "check", "demo", "replay", "JOIN_ON", "OUTPUT_KEY", "KAFKA_<PROPERTY>"):
        assert word in help_text
    version = subprocess.run(
        [*streamjoin_command(), "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    assert version.startswith("streamjoin ")


def test_a_forwarder_is_asked_for_and_takes_no_condition(
    kafka: str, topics, tmp_path: Path
) -> None:
    lines = refused(kafka, topics, tmp_path, JOIN_TYPE="forward")
    assert_one_line(lines, "JOIN_ON: expected no condition: JOIN_TYPE=forward joins nothing")
