"""Every variable the service reads, once: its name, what it expects, how its text is parsed, its
default, the Flink SQL option it stands for, and whether its value is a secret.

The environment reader (`app.config.env`), `streamjoin --help`, the masking of what `check`
prints (`app.config.redaction`), the lookup's options (`app.config.lookup_table`) and the Flink
SQL front-end's option table (`app.config.sql.ddl`) all read it; tests tie the Helm chart's
values schema and the variable tables of `docs/` to it. Besides these, `KAFKA_<PROPERTY>`,
`SCHEMA_REGISTRY_<PROPERTY>` and `SPARK_CONF_<KEY>` pass client and Spark properties through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.config import parsers
from app.config.parsers import AVAILABLE_NOW, DURATION
from app.config.windows import windowing
from serdes.records.schema import parse_schema
from state.expr.condition import parse_condition
from state.joins.lookup_join import CACHES


@dataclass(frozen=True)
class InputFormat:
    """An input format: whether it is Avro (a schema registry), and its changelog: `insert`
    (rows only added), `upsert` (the new row by key, or a tombstone) or `debezium` (changes
    with their before and after images)."""

    name: str
    avro: bool
    changelog: str

    @property
    def insert_only(self) -> bool:
        return self.changelog == "insert"


FORMATS = (
    InputFormat("json", avro=False, changelog="insert"),
    InputFormat("avro-confluent", avro=True, changelog="insert"),
    InputFormat("debezium-json", avro=False, changelog="debezium"),
    InputFormat("debezium-avro-confluent", avro=True, changelog="debezium"),
    InputFormat("upsert", avro=False, changelog="upsert"),
)
INPUT_FORMATS = tuple(f.name for f in FORMATS)
AVRO_FORMATS = tuple(f.name for f in FORMATS if f.avro)
INSERT_ONLY_FORMATS = tuple(f.name for f in FORMATS if f.insert_only)
CHANGELOG_FORMATS = tuple(f.name for f in FORMATS if not f.insert_only)
FORWARD = "forward"  # no join: both inputs forwarded, each record tagged with its side
LOOKUP = "lookup"
JOIN_TYPES = (
    "regular",
    "interval",
    "temporal",
    "temporal-proctime",
    "temporal-function",
    "window",
    LOOKUP,
    FORWARD,
)
JOIN_KINDS = ("inner", "left", "right", "full", "semi", "anti")
OUTPUT_ENCODINGS = ("append", "retract", "upsert", "debezium-json")
OUTPUT_FORMATS = ("json", "avro-confluent")
# where the joined rows go: OUTPUT_TOPIC, or nowhere (Flink's blackhole, for benchmarks)
OUTPUT_SINKS = ("kafka", "blackhole")
OUTPUT_DELIVERIES = ("exactly-once", "at-least-once")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class Variable:
    """One variable. `parse` turns its text into its value (None: the text as is), raising
    ValueError for text it refuses; `choices` are the only values it takes (any case);
    `default` is read when it is unset (`shown_default` says what it is when it is computed
    from other variables); `flink` is the Flink SQL it corresponds to."""

    name: str
    expects: str
    parse: Callable[[str], Any] | None = None
    default: str | None = None
    choices: tuple[str, ...] = ()
    flink: str | None = None
    secret: bool = False
    required: bool = False
    shown_default: str | None = None

    @property
    def help(self) -> str:
        default = self.shown_default or self.default
        tail = " (required)" if self.required else f" (default {default})" if default else ""
        return f"{self.name}: {self.expects}{tail}"


def _choice(
    name: str,
    choices: tuple[str, ...],
    default: str,
    flink: str | None = None,
    expects: str | None = None,
) -> Variable:
    return Variable(name, expects or "one of " + "|".join(choices), None, default, choices, flink)


def _side(side: str) -> list[Variable]:
    return [
        Variable(
            f"{side}_TOPIC",
            "a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)",
            parsers.kafka_name,
            flink="'topic'",
            required=True,
        ),
        _choice(
            f"{side}_FORMAT",
            INPUT_FORMATS,
            "json",
            "'format' / 'value.format', 'connector' = 'upsert-kafka'",
        ),
        Variable(
            f"{side}_SCHEMA",
            "a column list like 'id STRING, ts TIMESTAMP(3)'",
            parse_schema,
            flink="the CREATE TABLE's columns",
        ),
        Variable(
            f"{side}_PRIMARY_KEY",
            "a comma-separated list of column names",
            parsers.column_list,
            flink="PRIMARY KEY (…) NOT ENFORCED",
        ),
        Variable(
            f"{side}_TIME",
            f"a TIMESTAMP(3) column of {side}_SCHEMA, kafka_timestamp, source_ts_ms or proctime",
            default="proctime",
            flink="WATERMARK FOR col",
        ),
        Variable(
            f"{side}_WATERMARK_DELAY",
            DURATION,
            parsers.duration_ms,
            "0",
            flink="WATERMARK FOR col AS col - INTERVAL …",
        ),
        Variable(
            f"{side}_STATE_TTL",
            DURATION + " (0 keeps this input's rows forever)",
            parsers.duration_ms,
            flink="/*+ STATE_TTL('<table>' = '…') */",
            shown_default="STATE_TTL",
        ),
        Variable(
            f"{side}_METADATA",
            "column=key pairs: timestamp, value.source.timestamp, partition, offset, topic",
            flink="col TYPE METADATA FROM 'key'",
        ),
        Variable(
            f"{side}_FIELDS",
            f"column=path pairs: a column of {side}_SCHEMA read from a nested JSON field "
            "(id=person.id)",
            flink="a view's SELECT of a ROW column's fields",
        ),
        Variable(
            f"{side}_WHERE",
            "field=value pairs: only the records whose top-level field equals the JSON value "
            "(event_type=0)",
            flink="a view's WHERE",
        ),
    ]


_LOOKUP = [
    Variable(
        "LOOKUP_URL",
        "postgresql://user@host:port/database (the password goes in LOOKUP_PASSWORD)",
        parsers.postgres_url,
        flink="'url' = 'jdbc:postgresql://…', 'username'",
        required=True,
    ),
    Variable(
        "LOOKUP_PASSWORD", "the table's password (from a Secret)", flink="'password'", secret=True
    ),
    Variable(
        "LOOKUP_TABLE",
        "a table name, or schema.table",
        parsers.table_name,
        flink="'table-name'",
        required=True,
    ),
    _choice("LOOKUP_CACHE", tuple(c.lower() for c in CACHES), "none", "'lookup.cache'"),
    Variable(
        "LOOKUP_PARTIAL_CACHE_MAX_ROWS",
        "a positive whole number",
        parsers.positive_int,
        flink="'lookup.partial-cache.max-rows'",
        shown_default="unbounded",
    ),
    Variable(
        "LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_WRITE",
        DURATION,
        parsers.duration_ms,
        flink="'lookup.partial-cache.expire-after-write'",
        shown_default="never",
    ),
    Variable(
        "LOOKUP_PARTIAL_CACHE_EXPIRE_AFTER_ACCESS",
        DURATION,
        parsers.duration_ms,
        flink="'lookup.partial-cache.expire-after-access'",
        shown_default="never",
    ),
    _choice(
        "LOOKUP_PARTIAL_CACHE_CACHE_MISSING_KEY",
        ("true", "false"),
        "true",
        "'lookup.partial-cache.cache-missing-key'",
    ),
    Variable(
        "LOOKUP_FULL_CACHE_RELOAD_INTERVAL",
        DURATION,
        parsers.duration_ms,
        "1h",
        flink="'lookup.full-cache.periodic-reload.interval'",
    ),
    Variable(
        "LOOKUP_MAX_RETRIES", "a whole number", parsers.whole, "3", flink="'lookup.max-retries'"
    ),
    Variable(
        "LOOKUP_MISS_RETRIES",
        "a whole number (0: a key the table lacks is a miss at once)",
        parsers.whole,
        "0",
        flink="/*+ LOOKUP('retry-predicate' = 'lookup_miss', 'max-attempts' = …) */",
    ),
    Variable(
        "LOOKUP_MISS_RETRY_DELAY",
        DURATION,
        parsers.duration_ms,
        "1s",
        flink="/*+ LOOKUP('retry-strategy' = 'fixed_delay', 'fixed-delay' = …) */",
    ),
    _choice("LOOKUP_ASYNC", ("true", "false"), "true", "'lookup.async'"),
    Variable("LOOKUP_TIMEOUT", DURATION + " (per query)", parsers.duration_ms, "10s"),
    Variable(
        "LOOKUP_MAX_CONCURRENT",
        "a positive whole number (queries at once)",
        parsers.positive_int,
        "8",
        flink="table.exec.async-lookup.buffer-capacity",
    ),
    _choice("LOOKUP_SHUFFLE", ("true", "false"), "true", "table.optimizer.…lookup-shuffle"),
    _choice(
        "LOOKUP_ON_ERROR",
        ("fail", "dead-letter"),
        "fail",
        None,
        "fail (Flink's behaviour) or dead-letter (the left record)",
    ),
]

_ALL = [
    Variable(
        "KAFKA_BOOTSTRAP_SERVERS",
        "host:port[,host:port...]",
        parsers.bootstrap,
        flink="'properties.bootstrap.servers'",
        required=True,
    ),
    Variable("CHECKPOINT_LOCATION", "a directory or URI for Spark checkpoints", required=True),
    Variable("SPARK_MASTER", "a Spark master URL (local[*], k8s://…)", default="local[*]"),
    Variable(
        "TRIGGER_INTERVAL",
        f"{DURATION}, 0 (back to back) or {AVAILABLE_NOW}",
        parsers.trigger_ms,
        "0",
    ),
    Variable(
        "STARTING_OFFSETS",
        "earliest, latest, group-offsets (KAFKA_GROUP_ID's), timestamp:<epoch ms> or JSON like "
        '{"topic": {"0": 42, "*": "latest"}}',
        parsers.starting_offsets,
        "earliest",
        flink="'scan.startup.mode'",
    ),
    Variable(
        "KAFKA_GROUP_ID",
        "a Kafka consumer group id ([A-Za-z0-9._-], 1-249 chars)",
        parsers.kafka_name,
        flink="'properties.group.id'",
        shown_default="none: no group's offsets are read or committed",
    ),
    _choice(
        "KAFKA_AUTO_OFFSET_RESET",
        ("none", "earliest", "latest"),
        "none",
        "'properties.auto.offset.reset'",
        "none|earliest|latest: where group-offsets starts "
        "a partition its group never committed to (none: the start is refused, as Flink "
        "fails)",
    ),
    Variable(
        "MAX_RECORDS_PER_TRIGGER",
        "a positive whole number",
        parsers.positive_int,
        shown_default="no limit",
    ),
    Variable("METRICS_PORT", "a port number 0-65535", parsers.port, "9464"),
    Variable("READINESS_TIMEOUT", DURATION, parsers.duration_ms, "10m"),
    *_side("LEFT"),
    *_side("RIGHT"),
    _choice("JOIN_TYPE", JOIN_TYPES, "regular", "the query's join"),
    _choice("JOIN_KIND", JOIN_KINDS, "inner", "INNER / LEFT / RIGHT / FULL JOIN, IN, EXISTS"),
    Variable(
        "JOIN_ON", "a condition over L and R like 'L.id = R.id'", parse_condition, flink="ON …"
    ),
    Variable(
        "JOIN_SELECT",
        "a select list over L and R",
        flink="SELECT …",
        shown_default="every column as L_x, R_x",
    ),
    Variable(
        "JOIN_WHERE",
        "a condition over L and R like 'R.id IS NULL'",
        parse_condition,
        flink="WHERE … after an outer join",
        shown_default="none: every joined row",
    ),
    Variable(
        "JOIN_STATE_BUCKETS",
        "a positive whole number",
        parsers.positive_int,
        flink="SET 'pipeline.max-parallelism'",
        shown_default="the checkpoint's; 16 per state partition for a new one",
    ),
    Variable(
        "JOIN_EARLY_FIRE_DELAY",
        DURATION + " (an outer interval join: an unmatched row padded this long after its "
        "time, corrected by a later match)",
        parsers.duration_ms,
        flink="/*+ EARLY_FIRE('delay' = …) */",
        shown_default="none: padded when its interval closes",
    ),
    Variable(
        "JOIN_WINDOW",
        "a window join's windows: TUMBLE(size), HOP(slide, size) or CUMULATE(step, size), "
        "durations, an offset last if any, like TUMBLE(10s)",
        windowing,
        flink="FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(…), …))",
        shown_default="none",
    ),
    *(
        Variable(
            f"{side}_WINDOW_GROUP_BY",
            "a comma-separated list of column names: the window join's "
            f"{side.lower()} input is their distinct values per window (a window aggregate "
            "without aggregate functions)",
            parsers.column_list,
            flink="(SELECT cols, window_start, window_end FROM TABLE(TUMBLE(…)) GROUP BY cols, "
            "window_start, window_end)",
        )
        for side in ("LEFT", "RIGHT")
    ),
    _choice("JOIN_MINI_BATCH", ("true", "false"), "false", "SET 'table.exec.mini-batch.enabled'"),
    Variable(
        "SOURCE_IDLE_TIMEOUT",
        DURATION + " (0: a quiet partition holds its input's watermark back for ever)",
        parsers.duration_ms,
        "0",
        flink="SET 'table.exec.source.idle-timeout'",
    ),
    _choice(
        "LATE_ROWS",
        ("join", "dead-letter"),
        "join",
        None,
        "join (Flink's: a late row meets what its join still holds) or dead-letter (the row, "
        "instead of joined)",
    ),
    Variable(
        "HOT_KEY_ROWS",
        "a whole number of rows (0: never)",
        parsers.whole,
        "100000",
    ),
    Variable(
        "WARM_STATE_MB",
        "a whole number of MiB (0 turns it off)",
        parsers.whole,
        "256",
    ),
    Variable(
        "STATE_PARTITIONS",
        "a positive whole number",
        parsers.positive_int,
        flink="SET 'parallelism.default'",
        shown_default="the checkpoint's; the task slots for a new one",
    ),
    Variable(
        "STATE_TTL",
        DURATION + " (0 keeps state forever)",
        parsers.duration_ms,
        "0",
        flink="SET 'table.exec.state.ttl'",
    ),
    Variable(
        "OUTPUT_TOPIC",
        "a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)",
        parsers.kafka_name,
        flink="'topic'",
        required=True,
    ),
    Variable(
        "DLQ_TOPIC",
        "a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)",
        parsers.kafka_name,
        shown_default="<OUTPUT_TOPIC>.dlq",
    ),
    _choice(
        "OUTPUT_ENCODING", OUTPUT_ENCODINGS, "retract", "'format' / 'connector' = 'upsert-kafka'"
    ),
    _choice("OUTPUT_FORMAT", OUTPUT_FORMATS, "json", "'format' / 'value.format'"),
    _choice("OUTPUT_SINK", OUTPUT_SINKS, "kafka", "'connector' = 'blackhole'"),
    Variable(
        "OUTPUT_SCHEMA",
        "a column list like 'id STRING, price DECIMAL(10,2)': the select list's columns in "
        "its order, each cast to its type as Flink's INSERT casts",
        parse_schema,
        flink="the output CREATE TABLE's columns",
        shown_default="the select list's own types",
    ),
    Variable(
        "OUTPUT_KEY",
        "a comma-separated list of output column names",
        parsers.column_list,
        flink="'key.fields', PRIMARY KEY",
        shown_default="the join key",
    ),
    _choice("OUTPUT_DELIVERY", OUTPUT_DELIVERIES, "exactly-once", "'sink.delivery-guarantee'"),
    Variable(
        "OUTPUT_MARKER_TOPIC",
        "a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)",
        parsers.kafka_name,
        shown_default="<OUTPUT_TOPIC>.markers",
    ),
    Variable(
        "OUTPUT_TRANSACTIONAL_ID",
        "a name of letters, digits, '.', '_' or '-', unique per deployment",
        parsers.kafka_name,
        flink="'sink.transactional-id-prefix'",
        shown_default="streamjoin-<OUTPUT_TOPIC>-<hash of CHECKPOINT_LOCATION>",
    ),
    Variable(
        "SCHEMA_REGISTRY_URL", "an http(s):// URL", parsers.http_url, flink="'avro-confluent.url'"
    ),
    _choice("LOG_LEVEL", LOG_LEVELS, "INFO"),
    _choice("LOG_FORMAT", LOG_FORMATS, "text"),
    Variable("STREAMJOIN_SQL", "Flink SQL: CREATE TABLEs and one INSERT INTO … SELECT"),
    Variable("STREAMJOIN_SQL_FILE", "the path of a file of Flink SQL"),
    # read by `app.jars`, where the service finds the jars it runs beside pyspark's
    Variable(
        "STREAMJOIN_JARS",
        "a directory",
        parsers.folder,
        shown_default="~/.cache/streamjoin/jars",
    ),
    # read by `app.class_archive`: the driver JVM's class archive, recorded beside a first start
    Variable(
        "JVM_CLASS_ARCHIVE_DIR",
        "a directory, or off",
        parsers.folder_or_off,
        shown_default="~/.cache/streamjoin/jvm",
    ),
    *_LOOKUP,
]
VARIABLES: dict[str, Variable] = {v.name: v for v in _ALL}

# Prefixes of the service's own variables: an unknown name under one is a typo, not a setting.
OWN_PREFIXES = (
    "LEFT_",
    "RIGHT_",
    "JOIN_",
    "OUTPUT_",
    "STATE_",
    "DLQ_",
    "TRIGGER_",
    "STARTING_",
    "MAX_RECORDS",
    "METRICS_",
    "READINESS_",
    "CHECKPOINT_",
    "LOOKUP_",
    "STREAMJOIN_",
)
# The free-form families: client and Spark properties, by prefix.
PROPERTY_PREFIXES = ("KAFKA_", "SCHEMA_REGISTRY_", "SPARK_CONF_")


def flink_options(prefix: str) -> dict[str, str]:
    """The variables that stand for a Flink connector option starting with `prefix` (quoted as
    the registry quotes options), by the option's name."""
    found = {}
    for variable in VARIABLES.values():
        option = (variable.flink or "").split(",")[0].strip()
        if option.startswith(f"'{prefix}") and option.endswith("'"):
            found[option.strip("'")] = variable.name
    return found
