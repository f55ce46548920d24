"""Configuration: what operators set, what the service understands, and what it refuses."""

from __future__ import annotations

import json

import pytest

from app.config.env import ConfigError, ConfigErrors, load_config
from app.config.parsers import duration_ms as parse_duration_ms

BASE = {
    "KAFKA_BOOTSTRAP_SERVERS": "broker-1:9092,broker-2:9092",
    "LEFT_TOPIC": "orders",
    "RIGHT_TOPIC": "product_changelog",
    "OUTPUT_TOPIC": "enriched",
    "CHECKPOINT_LOCATION": "/var/lib/streamjoin",
}


def config_error(**changes: str | None) -> str:
    env = {**BASE, **changes}
    with pytest.raises(ConfigError) as caught:
        load_config({k: v for k, v in env.items() if v is not None})
    return str(caught.value)


def test_defaults_make_a_runnable_service() -> None:
    config = load_config(BASE)
    assert config.bootstrap_servers == "broker-1:9092,broker-2:9092"
    assert (config.left.topic, config.right.topic) == ("orders", "product_changelog")
    assert config.output.dlq_topic == "enriched.dlq"
    assert config.spark_master == "local[*]"
    assert config.trigger_interval_ms == 0  # back to back
    assert config.starting_offsets == "earliest"
    assert config.max_records_per_trigger is None
    assert (config.join.type, config.join.kind, config.output.encoding) == (
        "regular",
        "inner",
        "retract",
    )


def test_a_time_to_start_from_is_one_mode_for_every_input() -> None:
    """`timestamp:<epoch ms>`, Flink's `timestamp` startup mode, for every input topic."""
    config = load_config({**BASE, "STARTING_OFFSETS": "timestamp:1700000000000"})
    assert config.starting_offsets == "timestamp:1700000000000"


def test_every_variable_is_read() -> None:
    config = load_config(
        {
            **BASE,
            "DLQ_TOPIC": "dead",
            "SPARK_MASTER": "k8s://https://kubernetes.default.svc",
            "TRIGGER_INTERVAL": "500ms",
            "STARTING_OFFSETS": '{"orders": {"0": 42, "*": "timestamp:1700000000000"}}',
            "MAX_RECORDS_PER_TRIGGER": "5000",
            "METRICS_PORT": "9000",
            "LEFT_FORMAT": "json",
            "LEFT_SCHEMA": "order_id STRING, product_id STRING, order_time TIMESTAMP(3)",
            "LEFT_PRIMARY_KEY": "order_id",
            "LEFT_TIME": "order_time",
            "LEFT_WATERMARK_DELAY": "5 seconds",
            "RIGHT_FORMAT": "debezium-json",
            "RIGHT_TIME": "kafka_timestamp",
            "JOIN_TYPE": "temporal",
            "JOIN_KIND": "LEFT",
            "JOIN_ON": "L.product_id = R.product_id",
            "JOIN_SELECT": "L.order_id, R.price",
            "STATE_TTL": "1h",
            "OUTPUT_ENCODING": "upsert",
            "OUTPUT_FORMAT": "avro-confluent",
            "OUTPUT_KEY": "order_id",
        }
    )
    assert config.output.dlq_topic == "dead"
    assert config.trigger_interval_ms == 500
    assert json.loads(config.starting_offsets) == {
        "orders": {"0": 42, "*": "timestamp:1700000000000"}
    }
    assert config.max_records_per_trigger == 5000
    assert config.metrics_port == 9000
    assert [c.name for c in config.left.schema] == ["order_id", "product_id", "order_time"]
    assert config.left.primary_key == ("order_id",)
    assert config.left.time == "order_time"
    assert config.left.watermark_delay_ms == 5000
    assert config.right.format == "debezium-json"
    assert (config.join.type, config.join.kind) == ("temporal", "left")
    assert config.join.state_ttl_ms == 3_600_000
    assert config.output.key == ("order_id",)


def test_available_now_trigger_processes_what_is_there_and_stops() -> None:
    assert load_config({**BASE, "TRIGGER_INTERVAL": "available-now"}).trigger_interval_ms is None


@pytest.mark.parametrize(
    ("changes", "variable", "expected"),
    [
        ({"KAFKA_BOOTSTRAP_SERVERS": None}, "KAFKA_BOOTSTRAP_SERVERS", "it is not set"),
        ({"KAFKA_BOOTSTRAP_SERVERS": "no-port"}, "KAFKA_BOOTSTRAP_SERVERS", "host:port"),
        ({"LEFT_TOPIC": None}, "LEFT_TOPIC", "Kafka topic name"),
        ({"RIGHT_TOPIC": "bad topic"}, "RIGHT_TOPIC", "Kafka topic name"),
        ({"CHECKPOINT_LOCATION": None}, "CHECKPOINT_LOCATION", "it is not set"),
        ({"TRIGGER_INTERVAL": "soon"}, "TRIGGER_INTERVAL", "available-now"),
        (
            {"STARTING_OFFSETS": "beginning"},
            "STARTING_OFFSETS",
            "earliest, latest, group-offsets (KAFKA_GROUP_ID's), timestamp:<epoch ms> or JSON",
        ),
        ({"STARTING_OFFSETS": "timestamp:soon"}, "STARTING_OFFSETS", "timestamp:<epoch ms>"),
        ({"STARTING_OFFSETS": '{"orders": {"0": -3}}'}, "STARTING_OFFSETS", "or JSON like"),
        ({"STARTING_OFFSETS": '{"orders": {"*": "anywhere"}}'}, "STARTING_OFFSETS", "or JSON"),
        ({"STARTING_OFFSETS": '{"orders": {"01": 3}}'}, "STARTING_OFFSETS", "or JSON"),
        ({"MAX_RECORDS_PER_TRIGGER": "0"}, "MAX_RECORDS_PER_TRIGGER", "positive whole number"),
        ({"METRICS_PORT": "70000"}, "METRICS_PORT", "port number"),
        ({"LEFT_FORMAT": "xml"}, "LEFT_FORMAT", "json|avro-confluent"),
        ({"LEFT_SCHEMA": "id STRANGE"}, "LEFT_SCHEMA", "unsupported type STRANGE"),
        ({"LEFT_SCHEMA": "id STRING", "LEFT_PRIMARY_KEY": "other"}, "LEFT_PRIMARY_KEY", "columns"),
        ({"RIGHT_TIME": "updated_at"}, "RIGHT_TIME", "source_ts_ms or proctime"),
        ({"RIGHT_WATERMARK_DELAY": "-5s"}, "RIGHT_WATERMARK_DELAY", "duration"),
        ({"JOIN_TYPE": "lookaside"}, "JOIN_TYPE", "regular|interval|temporal"),
        ({"JOIN_KIND": "cross"}, "JOIN_KIND", "inner|left|right|full|semi|anti"),
        ({"JOIN_ON": "L.id = = R.id"}, "JOIN_ON", ">>=<<"),
        ({"JOIN_ON": "L.id = id"}, "JOIN_ON", "qualified by L. (left) or R. (right)"),
        ({"STATE_TTL": "forever"}, "STATE_TTL", "duration"),
        ({"OUTPUT_ENCODING": "csv"}, "OUTPUT_ENCODING", "append|retract|upsert|debezium-json"),
        ({"OUTPUT_FORMAT": "protobuf"}, "OUTPUT_FORMAT", "json|avro-confluent"),
        ({"OUTPUT_ENCODING": "upsert"}, "OUTPUT_KEY", "OUTPUT_ENCODING=upsert"),
        ({"SPARK_CONF_EXECUTOR_MEMORY": "2g"}, "SPARK_CONF_EXECUTOR_MEMORY", "Spark property"),
        ({"OUTPUT_SINK": "s3"}, "OUTPUT_SINK", "kafka|blackhole"),
        (
            {"JVM_CLASS_ARCHIVE_DIR": "/proc/version"},
            "JVM_CLASS_ARCHIVE_DIR",
            "a directory, or off",
        ),
        ({"STREAMJOIN_JARS": "/proc/version"}, "STREAMJOIN_JARS", "a directory"),
        (
            {"LEFT_SCHEMA": "id BIGINT", "LEFT_FIELDS": "name=person.name"},
            "LEFT_FIELDS",
            "the columns of LEFT_SCHEMA",
        ),
        (
            {"LEFT_SCHEMA": "id BIGINT", "LEFT_FIELDS": "id=person..id"},
            "LEFT_FIELDS",
            "each path fields joined by '.'",
        ),
        ({"LEFT_WHERE": "event_type=zero"}, "LEFT_WHERE", "each value JSON"),
        (
            {"LEFT_FORMAT": "debezium-json", "LEFT_WHERE": "event_type=0"},
            "LEFT_WHERE",
            "unset unless LEFT_FORMAT=json",
        ),
    ],
)
def test_a_bad_variable_is_named_with_what_was_expected(
    changes: dict[str, str | None], variable: str, expected: str
) -> None:
    message = config_error(**changes)
    assert message.startswith(f"{variable}: expected ")
    assert expected in message
    assert "\n" not in message


def test_a_views_where_values_are_json_and_a_string_may_hold_a_comma() -> None:
    """`LEFT_WHERE` is read value by value, as JSON: `name="a,b"` is one string, as a view's
    `WHERE name = 'a,b'` compiles to."""
    where = 'kind=1, name="a,b" ,open=true'
    assert load_config(BASE | {"LEFT_WHERE": where}).left.where == (
        ("kind", 1),
        ("name", "a,b"),
        ("open", True),
    )
    for bad in ("kind=1 name=2", "kind=1,", "=1", 'name="a"b'):
        assert "LEFT_WHERE: expected field=value pairs, each value JSON" in config_error(
            LEFT_WHERE=bad
        )


def test_unlisted_kafka_variables_become_client_properties() -> None:
    config = load_config(
        {**BASE, "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}
    )
    assert config.kafka_client_config() == {
        "bootstrap.servers": "broker-1:9092,broker-2:9092",
        "sasl.mechanism": "PLAIN",
        "security.protocol": "SASL_SSL",
    }


def test_spark_conf_variables_become_spark_properties() -> None:
    config = load_config(
        {
            **BASE,
            "SPARK_CONF_SPARK_EXECUTOR_MEMORY": "4g",
            "SPARK_CONF_spark.sql.streaming.stateStore.rocksdb.blockCacheSizeMB": "64",
        }
    )
    assert config.spark_conf == {
        "spark.executor.memory": "4g",
        "spark.sql.streaming.stateStore.rocksdb.blockCacheSizeMB": "64",
    }


def test_state_partitions_are_the_sessions_shuffle_partitions_and_agree_with_spark_conf() -> None:
    config = load_config({**BASE, "STATE_PARTITIONS": "8", "SPARK_CONF_SPARK_EXECUTOR_CORES": "2"})
    assert config.session_conf() == {
        "spark.executor.cores": "2",
        "spark.sql.shuffle.partitions": "8",
    }
    assert load_config(BASE).session_conf() == {}  # the checkpoint's, or the task slots
    assert config_error(STATE_PARTITIONS="8", SPARK_CONF_spark_sql_shuffle_partitions="4") == (
        "STATE_PARTITIONS: expected the number SPARK_CONF_spark.sql.shuffle.partitions gives "
        "(4), or one of the two alone; got '8'"
    )
    assert config_error(STATE_PARTITIONS="0").startswith(
        "STATE_PARTITIONS: expected a positive whole number"
    )


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("5s", 5000),
        ("2 minutes", 120_000),
        ("1h", 3_600_000),
        ("7d", 604_800_000),
        ("0", 0),
        ("90 secs", 90_000),
        ("5 millis", 5),
        ("1500µs", 1),
        ("PT1M30S", 90_000),
        ("pt0.25s", 250),
        ("P1D", 86_400_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


def test_a_bare_number_is_no_duration_except_zero() -> None:
    """Flink reads `3600` as milliseconds; this service once read it as seconds."""
    with pytest.raises(ValueError):
        parse_duration_ms("3600")
    assert parse_duration_ms("0") == 0


def test_spark_keys_written_with_underscores_are_spelled_as_spark_spells_them() -> None:
    """Spark's keys are case-sensitive: `spark.driver.extrajavaoptions` would be ignored."""
    config = load_config(
        {
            **BASE,
            "SPARK_CONF_SPARK_DRIVER_EXTRAJAVAOPTIONS": "-Dx=1",
            "SPARK_CONF_SPARK_DRIVER_DEFAULTJAVAOPTIONS": "-Dy=1",
            "SPARK_CONF_SPARK_SQL_STREAMING_STATESTORE_PROVIDERCLASS": "p",
        }
    )
    assert config.spark_conf == {
        "spark.driver.extraJavaOptions": "-Dx=1",
        "spark.driver.defaultJavaOptions": "-Dy=1",
        "spark.sql.streaming.stateStore.providerClass": "p",
    }


@pytest.mark.parametrize(
    ("variable", "instead"),
    [
        ("KAFKA_bootstrap.servers", "KAFKA_BOOTSTRAP_SERVERS"),
        ("KAFKA_TRANSACTIONAL_ID", "OUTPUT_TRANSACTIONAL_ID"),
        ("KAFKA_ENABLE_AUTO_COMMIT", "the service sets it itself"),
    ],
)
def test_a_client_property_the_service_sets_itself_is_refused(variable: str, instead: str) -> None:
    message = config_error(**{variable: "x"})
    assert message.startswith(f"{variable}: expected a client property other than ")
    assert instead in message


def test_every_bad_variable_is_named_at_once() -> None:
    with pytest.raises(ConfigErrors) as caught:
        load_config(
            {
                **BASE,
                "JOIN_KIND": "sideways",
                "STATE_TTL": "5",
                "LEFT_TOPIC": None,
                "JOIN_TPYE": "regular",
            }
        )
    assert [e.variable for e in caught.value.errors] == [
        "LEFT_TOPIC",
        "JOIN_TPYE",
        "JOIN_KIND",
        "STATE_TTL",
    ]
    assert len(str(caught.value).splitlines()) == 4


LOOKUP = {
    **BASE,
    "RIGHT_TOPIC": None,
    "JOIN_TYPE": "lookup",
    "LOOKUP_TABLE": "shop.products",
    "LOOKUP_URL": "postgresql://streamjoin@db:5432/shop",
}


def test_a_lookup_join_reads_flinks_lookup_options_and_needs_no_right_topic() -> None:
    config = load_config(
        {
            k: v
            for k, v in {
                **LOOKUP,
                "LOOKUP_CACHE": "partial",
                "LOOKUP_PARTIAL_CACHE_MAX_ROWS": "1000",
                "LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_ACCESS": "10min",
                "LOOKUP_PARTIAL_CACHE_CACHE_MISSING_KEY": "false",
                "LOOKUP_ASYNC": "false",
                "LOOKUP_PASSWORD": "hunter2",
                "LOOKUP_ON_ERROR": "dead-letter",
            }.items()
            if v is not None
        }
    )
    lookup = config.lookup
    assert lookup is not None and config.right.topic == ""
    assert (lookup.table, lookup.cache.kind, lookup.cache.max_rows) == (
        "shop.products",
        "PARTIAL",
        1000,
    )
    assert (lookup.cache.expire_after_access_s, lookup.cache.cache_missing_key) == (600.0, False)
    assert (lookup.asynchronous, lookup.on_error, lookup.max_retries) == (False, "dead-letter", 3)
    assert "hunter2" not in repr(config)


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"LOOKUP_URL": "postgresql://sj:hunter2@db/shop"}, "LOOKUP_URL"),  # LOOKUP_PASSWORD
        ({"LOOKUP_URL": "mysql://u@db/shop"}, "LOOKUP_URL"),
        ({"LOOKUP_TABLE": None}, "LOOKUP_TABLE"),
        ({"LOOKUP_TABLE": "products; DROP TABLE x"}, "LOOKUP_TABLE"),
        ({"LOOKUP_CACHE": "lru"}, "LOOKUP_CACHE"),
        ({"LOOKUP_FULL_CACHE_RELOAD_INTERVAL": "600"}, "LOOKUP_FULL_CACHE_RELOAD_INTERVAL"),
        ({"LOOKUP_ON_ERROR": "ignore"}, "LOOKUP_ON_ERROR"),
        ({"LOOKUP_CACHE_SIZE": "5"}, "LOOKUP_CACHE_SIZE"),  # a typo: no such variable
    ],
)
def test_a_bad_lookup_variable_is_refused_by_name(changes: dict, variable: str) -> None:
    env = {k: v for k, v in {**LOOKUP, **changes}.items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        load_config(env)
    assert str(caught.value).startswith(f"{variable}: expected"), str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("changes", "wait_ms"),
    [
        # event time: Spark plans no batch without records; a second's wait at the broker
        (
            {
                "JOIN_TYPE": "interval",
                "JOIN_ON": "L.k = R.k AND L.t BETWEEN R.t - INTERVAL '1' SECOND AND R.t",
                "LEFT_SCHEMA": "k BIGINT, t TIMESTAMP(3)",
                "RIGHT_SCHEMA": "k BIGINT, t TIMESTAMP(3)",
                "LEFT_TIME": "t",
                "RIGHT_TIME": "t",
            },
            1000,
        ),
        # only the TTL on the wall clock: its evicting batches half the TTL apart, a minute at most
        ({"JOIN_ON": "L.k = R.k", "STATE_TTL": "40 seconds"}, 20_000),
        ({"JOIN_ON": "L.k = R.k", "STATE_TTL": "2 minutes"}, 60_000),
        ({"JOIN_ON": "L.k = R.k", "STATE_TTL": "1 hour"}, 60_000),
        ({"JOIN_ON": "L.k = R.k", "STATE_TTL": "2 seconds"}, 1000),
        # a processing-time interval join's padding fires on timers: a second, TTL or not
        (
            {
                "JOIN_TYPE": "interval",
                "JOIN_KIND": "left",
                "JOIN_ON": "L.k = R.k AND L.proctime BETWEEN R.proctime - INTERVAL '1' SECOND "
                "AND R.proctime",
                "LEFT_SCHEMA": "k BIGINT",
                "RIGHT_SCHEMA": "k BIGINT",
                "LEFT_TIME": "proctime",
                "RIGHT_TIME": "proctime",
                "STATE_TTL": "2 minutes",
            },
            1000,
        ),
    ],
)
def test_a_quiet_trigger_waits_a_second_or_half_a_ttl_that_only_evicts(
    changes: dict[str, str], wait_ms: int
) -> None:
    from app.run.operators import idle_wait_ms

    env = {"LEFT_SCHEMA": "k BIGINT", "RIGHT_SCHEMA": "k BIGINT", **BASE, **changes}
    assert idle_wait_ms(load_config(env)) == wait_ms
