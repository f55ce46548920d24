"""Service configuration, read from environment variables and validated before anything starts.

Every variable is checked up front so that a mistake stops the service at once with one line
naming the variable and what was expected, instead of surfacing minutes later inside Spark.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from serdes.schema import Column, SchemaError, parse_schema
from state.condition import ConditionError, parse_condition

INPUT_FORMATS = ("json", "avro-confluent", "debezium-json", "debezium-avro-confluent", "upsert")
STATE_BUCKETS = 128  # the groups of keys a bucketed processor's state is kept in
JOIN_TYPES = ("regular", "interval", "temporal", "temporal-proctime", "temporal-function")
JOIN_KINDS = ("inner", "left", "right", "full", "semi", "anti")
OUTPUT_ENCODINGS = ("append", "retract", "upsert", "debezium-json")
OUTPUT_FORMATS = ("json", "avro-confluent")
OUTPUT_DELIVERIES = ("exactly-once", "at-least-once")
TIME_SPECIAL = ("kafka_timestamp", "source_ts_ms", "proctime")
AVAILABLE_NOW = "available-now"

# Variables with a meaning of their own; every other KAFKA_* is a client property.
_KAFKA_NAMED = {"KAFKA_BOOTSTRAP_SERVERS"}
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^\[?[A-Za-z0-9._:-]+\]?:\d{1,5}$")
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_UNIT_MS = {
    "": 1000, "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}  # fmt: skip


class ConfigError(ValueError):
    """A variable that is missing or wrong: names it, says what was expected and what was seen."""

    def __init__(self, variable: str, expected: str, got: str | None = None) -> None:
        seen = "it is not set" if got is None else f"got {got!r}"
        super().__init__(f"{variable}: expected {expected}; {seen}")
        self.variable = variable


@dataclass(frozen=True)
class InputConfig:
    """One input topic and how its records become rows."""

    side: str
    topic: str
    format: str
    schema: tuple[Column, ...] | None
    primary_key: tuple[str, ...]
    time: str
    watermark_delay_ms: int


@dataclass(frozen=True)
class JoinConfig:
    type: str
    kind: str
    on: str | None
    select: str | None
    state_ttl_ms: int
    state_buckets: int = STATE_BUCKETS  # every join and the normalizer: key buckets


@dataclass(frozen=True)
class OutputConfig:
    topic: str
    dlq_topic: str
    encoding: str
    format: str
    key: tuple[str, ...]
    # exactly-once: each micro-batch's records for a partition in one Kafka transaction with a
    # marker of (transactional id, partition, batch), so a replayed batch writes nothing twice.
    delivery: str
    marker_topic: str
    transactional_id: str


@dataclass(frozen=True)
class Config:
    bootstrap_servers: str
    left: InputConfig
    right: InputConfig
    join: JoinConfig
    output: OutputConfig
    checkpoint_location: str
    spark_master: str
    trigger_interval_ms: int | None  # None: process what is available now, then stop
    starting_offsets: str
    max_records_per_trigger: int | None
    metrics_port: int
    readiness_timeout_ms: int
    kafka_properties: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    schema_registry_url: str | None = None
    schema_registry_properties: dict[str, str] = field(default_factory=dict)

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka settings shared by every client the service creates."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka_properties}


_V = TypeVar("_V")


class _Reader:
    """Reads variables from one environment mapping, raising ConfigError on the first bad one."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def raw(self, name: str, default: str | None = None) -> str | None:
        value = self.env.get(name)
        return default if value is None or value.strip() == "" else value.strip()

    def required(self, name: str, expected: str) -> str:
        value = self.raw(name)
        if value is None:
            raise ConfigError(name, expected)
        return value

    def parsed(
        self,
        name: str,
        expected: str,
        parse: Callable[[str], _V],
        default: str | None,
        required: bool = False,
    ) -> _V | None:
        value = self.raw(name, default)
        if value is None:
            if required:
                raise ConfigError(name, expected)
            return None
        try:
            return parse(value)
        except (ValueError, TypeError) as err:
            detail = f" ({err})" if isinstance(err, SchemaError | ConditionError) else ""
            raise ConfigError(name, expected + detail, value) from None

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = (self.raw(name, default) or default).lower()
        if value not in choices:
            raise ConfigError(name, "one of " + "|".join(choices), self.env.get(name))
        return value

    def topic(self, name: str, default: str | None = None) -> str:
        value = self.raw(name, default)
        if value is None or not _TOPIC_NAME.match(value):
            raise ConfigError(name, "a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)", value)
        return value


def parse_duration_ms(text: str) -> int:
    """`500ms`, `5s`, `2 minutes`, `1h`, `7d`; a bare number is seconds."""
    match = _DURATION.match(text.lower())
    if not match or match.group(2) not in _UNIT_MS:
        raise ValueError(text)
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(text)
    return value


def _bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",")]
    if not all(_HOST_PORT.match(s) for s in servers):
        raise ValueError(text)
    return ",".join(servers)


def _column_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(","))
    if not all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", n) for n in names):
        raise ValueError(text)
    return names


def _starting_offsets(text: str) -> str:
    """`earliest`, `latest`, or JSON `{"topic": {"partition": offset}}` (-2 earliest, -1 latest)."""
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    spec = json.loads(text)
    if not isinstance(spec, dict) or not all(
        isinstance(parts, dict) and all(isinstance(o, int) for o in parts.values())
        for parts in spec.values()
    ):
        raise ValueError(text)
    return text


def _url(text: str) -> str:
    if not re.match(r"^https?://[^\s/]+", text):
        raise ValueError(text)
    return text


def _transactional_id(text: str) -> str:
    if not _TOPIC_NAME.match(text):
        raise ValueError(text)
    return text


def _trigger(text: str) -> int | None:
    return None if text.lower() == AVAILABLE_NOW else parse_duration_ms(text)


def _input(read: _Reader, side: str) -> InputConfig:
    prefix = side.upper()
    schema = read.parsed(
        f"{prefix}_SCHEMA", "a column list like 'id STRING, ts TIMESTAMP(3)'", parse_schema, None
    )
    names = {c.name for c in schema or ()}
    primary_key = read.parsed(
        f"{prefix}_PRIMARY_KEY", "a comma-separated list of column names", _column_list, None
    )
    if schema and primary_key and not set(primary_key) <= names:
        raise ConfigError(
            f"{prefix}_PRIMARY_KEY", f"columns of {prefix}_SCHEMA", ",".join(primary_key)
        )
    time = read.raw(f"{prefix}_TIME", "proctime") or "proctime"
    if time not in TIME_SPECIAL and (not schema or time not in names):
        raise ConfigError(
            f"{prefix}_TIME",
            f"a column of {prefix}_SCHEMA, kafka_timestamp, source_ts_ms or proctime",
            time,
        )
    return InputConfig(
        side=side,
        topic=read.topic(f"{prefix}_TOPIC"),
        format=read.choice(f"{prefix}_FORMAT", INPUT_FORMATS, "json"),
        schema=schema,
        primary_key=primary_key or (),
        time=time,
        watermark_delay_ms=read.parsed(
            f"{prefix}_WATERMARK_DELAY", "a duration like 5s or 500ms", parse_duration_ms, "0"
        ),
    )


def _prefixed(env: Mapping[str, str], prefix: str, skip: set[str]) -> dict[str, str]:
    """`KAFKA_SASL_MECHANISM` -> `sasl.mechanism`; a name with a dot is taken as written."""
    found = {}
    for name, value in env.items():
        if name.startswith(prefix) and name not in skip and len(name) > len(prefix):
            key = name[len(prefix) :]
            found[key if "." in key else key.lower().replace("_", ".")] = value
    return found


def load_config(env: Mapping[str, str]) -> Config:
    """Build the whole configuration from `env`, or raise ConfigError for the first bad variable."""
    read = _Reader(env)
    output_topic = read.topic("OUTPUT_TOPIC")
    encoding = read.choice("OUTPUT_ENCODING", OUTPUT_ENCODINGS, "retract")
    output_key = read.parsed(
        "OUTPUT_KEY", "a comma-separated list of output column names", _column_list, None
    )
    if encoding == "upsert" and not output_key:
        raise ConfigError("OUTPUT_KEY", "the unique key columns when OUTPUT_ENCODING=upsert")
    on = read.raw("JOIN_ON")
    read.parsed("JOIN_ON", "a condition over L and R like 'L.id = R.id'", parse_condition, None)
    spark_conf = _prefixed(env, "SPARK_CONF_", set())
    for key in spark_conf:
        if not key.startswith("spark."):
            raise ConfigError(
                "SPARK_CONF_" + key.upper().replace(".", "_"),
                "a Spark property (SPARK_CONF_SPARK_EXECUTOR_MEMORY or SPARK_CONF_spark.x.y)",
                key,
            )
    checkpoint_location = read.required(
        "CHECKPOINT_LOCATION", "a directory or URI for Spark checkpoints"
    )
    # Stable for one deployment (its output and checkpoint), distinct between deployments.
    query_id = hashlib.sha256(checkpoint_location.encode()).hexdigest()[:10]
    return Config(
        bootstrap_servers=read.parsed(
            "KAFKA_BOOTSTRAP_SERVERS", "host:port[,host:port...]", _bootstrap, None, required=True
        ),
        left=_input(read, "left"),
        right=_input(read, "right"),
        join=JoinConfig(
            type=read.choice("JOIN_TYPE", JOIN_TYPES, "regular"),
            kind=read.choice("JOIN_KIND", JOIN_KINDS, "inner"),
            on=on,
            select=read.raw("JOIN_SELECT"),
            state_ttl_ms=read.parsed(
                "STATE_TTL", "a duration like 1h (0 keeps state forever)", parse_duration_ms, "0"
            ),
            state_buckets=read.parsed(
                "JOIN_STATE_BUCKETS", "a positive whole number", _positive_int, str(STATE_BUCKETS)
            ),
        ),
        output=OutputConfig(
            topic=output_topic,
            dlq_topic=read.topic("DLQ_TOPIC", f"{output_topic}.dlq"),
            encoding=encoding,
            format=read.choice("OUTPUT_FORMAT", OUTPUT_FORMATS, "json"),
            key=output_key or (),
            delivery=read.choice("OUTPUT_DELIVERY", OUTPUT_DELIVERIES, "exactly-once"),
            marker_topic=read.topic("OUTPUT_MARKER_TOPIC", f"{output_topic}.markers"),
            transactional_id=read.parsed(
                "OUTPUT_TRANSACTIONAL_ID",
                "a name of letters, digits, '.', '_' or '-', unique per deployment",
                _transactional_id,
                f"streamjoin-{output_topic}-{query_id}",
            ),
        ),
        checkpoint_location=checkpoint_location,
        spark_master=read.raw("SPARK_MASTER", "local[*]") or "local[*]",
        trigger_interval_ms=read.parsed(
            "TRIGGER_INTERVAL", f"a duration like 1s, or {AVAILABLE_NOW}", _trigger, "1s"
        ),
        starting_offsets=read.parsed(
            "STARTING_OFFSETS",
            'earliest, latest or JSON like {"topic": {"0": 42}}',
            _starting_offsets,
            "earliest",
        ),
        max_records_per_trigger=read.parsed(
            "MAX_RECORDS_PER_TRIGGER", "a positive whole number", _positive_int, None
        ),
        metrics_port=read.parsed("METRICS_PORT", "a port number 0-65535", _port, "9464"),
        readiness_timeout_ms=read.parsed(
            "READINESS_TIMEOUT", "a duration like 10m", parse_duration_ms, "10m"
        ),
        kafka_properties=_prefixed(env, "KAFKA_", _KAFKA_NAMED),
        schema_registry_url=read.parsed("SCHEMA_REGISTRY_URL", "an http(s):// URL", _url, None),
        schema_registry_properties=_prefixed(env, "SCHEMA_REGISTRY_", {"SCHEMA_REGISTRY_URL"}),
        spark_conf=spark_conf,
    )
