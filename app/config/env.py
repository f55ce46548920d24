"""Service configuration, read from environment variables and validated before anything starts.

Every variable is checked up front so that a mistake stops the service at once with one line
naming the variable and what was expected, instead of surfacing minutes later inside Spark; all
the mistakes at once (`ConfigErrors`), so that a deployment is not fixed one restart per line.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any, TypeVar

from pyspark.sql.types import TimestampType

from app.config.lookup_table import LookupConfig, read_lookup
from app.config.redaction import shown_value
from app.config.registry import LOG_LEVELS, LOOKUP, OWN_PREFIXES, VARIABLES
from app.config.sql.ddl import Compiled, SqlError
from app.config.sql.query import SQL_VARIABLES, compile_script
from app.config.windows import Windowing
from serdes.kafka.decode import METADATA_TYPES
from serdes.records.schema import Column, SchemaError
from state.expr.condition import ConditionError

TIME_SPECIAL = ("kafka_timestamp", "source_ts_ms", "proctime")
# Variables with a meaning of their own; every other KAFKA_* is a client property.
_KAFKA_NAMED = {"KAFKA_BOOTSTRAP_SERVERS", "KAFKA_GROUP_ID", "KAFKA_AUTO_OFFSET_RESET"}
# Client properties the service sets itself, and the variable to use instead (None: none).
_KAFKA_OWN = {
    "bootstrap.servers": "KAFKA_BOOTSTRAP_SERVERS",
    "transactional.id": "OUTPUT_TRANSACTIONAL_ID",
    "group.id": "KAFKA_GROUP_ID",
    "enable.auto.commit": None,
    "isolation.level": None,
}


# Spark's setting that partitions the join state (its key buckets: `app.run.checkpoint`)
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


class ConfigError(ValueError):
    """A variable that is missing or wrong: names it, says what was expected and what was seen."""

    def __init__(
        self, variable: str, expected: str, got: str | None = None, seen: str | None = None
    ) -> None:
        """`seen` says what was found instead of quoting `got`; `got` is quoted as
        `app.config.redaction` shows it (a secret masked, a URL without its user info)."""
        seen = seen or ("it is not set" if got is None else f"got {shown_value(variable, got)!r}")
        super().__init__(f"{variable}: expected {expected}; {seen}")
        self.variable = variable


class ConfigErrors(ConfigError):
    """Every mistake found, one line each (the first's variable as `variable`)."""

    def __init__(self, errors: list[ConfigError]) -> None:
        ValueError.__init__(self, "\n".join(str(e) for e in errors))
        self.variable = errors[0].variable
        self.errors = errors


def raise_all(errors: list[ConfigError]) -> None:
    """Raise the errors found, if any: one alone as itself, several as `ConfigErrors`."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


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
    metadata: tuple[tuple[str, str], ...] = ()  # (column, key): filled from the record
    # (column, path): a column read from a nested JSON field, `("id", ("person", "id"))`
    fields: tuple[tuple[str, tuple[str, ...]], ...] = ()
    where: tuple[tuple[str, object], ...] = ()  # (field, value): the records read, the rest skipped
    # the leading columns the oldest rows of a checkpoint's state hold, where columns were
    # added since (`app.run.evolution`); None: the rows hold every column
    held_columns: int | None = None


@dataclass(frozen=True)
class JoinConfig:
    type: str
    kind: str
    on: str | None
    select: str | None
    state_ttl_ms: int
    # a condition over the joined rows, each change kept where it holds (a Flink WHERE after
    # an outer join, which a join's condition cannot say)
    where: str | None = None
    # every join and the normalizer: key buckets; None: the checkpoint's, or as many as
    # `app.run.checkpoint.state_buckets` gives a new one
    state_buckets: int | None = None
    # a regular join's inputs' own retention (`LEFT_STATE_TTL`, `RIGHT_STATE_TTL`, the
    # STATE_TTL hint); None: `state_ttl_ms`
    input_ttls_ms: tuple[int | None, int | None] = (None, None)
    # an outer interval join's unmatched rows padded this long after their time (EARLY_FIRE)
    early_fire_ms: int | None = None
    window: Windowing | None = None  # a window join's windows (`JOIN_WINDOW`)
    # a window join's inputs' grouping columns, each a window aggregate first (None: its rows)
    window_groups: tuple[tuple[str, ...] | None, tuple[str, ...] | None] = (None, None)


@dataclass(frozen=True)
class ChainedJoin:
    """A join after the first, set by SQL only: the result so far (`L`) joined with `input`
    (`R`, labelled `input3`, `input4`, …); `origin` says where in the SQL each of its
    variables comes from."""

    input: InputConfig
    join: JoinConfig
    origin: dict[str, str] = field(default_factory=dict)
    left_time: str = "proctime"  # the column of `L` an event-time join takes as its left time
    lookup: LookupConfig | None = None  # a lookup join's: `input` is its table


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
    sink: str = "kafka"  # or "blackhole": the joined rows dropped (Flink's, for benchmarks)
    schema: tuple[Column, ...] | None = None  # declared: the select list is cast to it


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
    # the state's partitions: None, the checkpoint's (the task slots for a new one); another
    # number than the checkpoint's repartitions its state at start (`app.run.rescale`)
    state_partitions: int | None = None
    # MiB of join state each Python worker keeps between micro-batches (`state.store.warm`); 0: none
    warm_state_mb: int = 256
    # regular joins fold each key's changes of a micro-batch first (`state.joins.mini_batch`)
    mini_batch: bool = False
    # a key holding more rows of one input of a regular join is logged (`state.joins.fanout`)
    hot_key_rows: int = 100_000
    # an input partition with no new record for this long leaves its input's watermark; 0: never
    source_idle_timeout_ms: int = 0
    # an event-time join's rows behind the watermark: "join" as Flink, or "dead-letter" instead
    late_rows: str = "join"
    schema_registry_url: str | None = None
    schema_registry_properties: dict[str, str] = field(default_factory=dict)
    lookup: LookupConfig | None = None  # JOIN_TYPE=lookup: the table the right side is
    chain: tuple[ChainedJoin, ...] = ()  # the joins after the first (`left` ⋈ `right`)
    # where the SQL asks for Flink's multi-way join (`app.plan.planner.multi_way_spec`)
    multi_way: str | None = None
    # KAFKA_GROUP_ID: the consumer group whose offsets group-offsets starts from, and to which
    # the offsets read are committed after each batch; where it never committed: offset_reset
    group_id: str | None = None
    offset_reset: str = "none"
    # a variable STREAMJOIN_SQL set -> where: `STREAMJOIN_SQL line 3 (LEFT_TOPIC)`
    sql_origin: dict[str, str] = field(default_factory=dict)

    def session_conf(self) -> dict[str, str]:
        """The Spark properties the session is built with: SPARK_CONF_*, and STATE_PARTITIONS
        as the shuffle partitions (the partitions a new checkpoint's state takes)."""
        partitions = self.state_partitions
        return {
            **self.spark_conf,
            **({} if partitions is None else {SHUFFLE_PARTITIONS: str(partitions)}),
        }

    def inputs(self) -> tuple[InputConfig, ...]:
        """The Kafka inputs, in the order the query joins them (a lookup join's right is a
        table)."""
        tables = (self.left, self.right, *(c.input for c in self.chain))
        return tuple(source for source in tables if source.topic)

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka settings shared by every client the service creates."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka_properties}


_V = TypeVar("_V")


class _Reader:
    """Reads variables from one environment mapping. A bad one is kept in `errors` (its first
    mistake) and read as missing, so that reading goes on and every mistake is found."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.errors: dict[str, ConfigError] = {}

    def fail(self, error: ConfigError) -> None:
        self.errors.setdefault(error.variable, error)

    def good(self, *names: str) -> bool:
        """Whether none of the variables `names` was found wrong."""
        return not any(name in self.errors for name in names)

    def raw(self, name: str, default: str | None = None) -> str | None:
        value = self.env.get(name)
        return default if value is None or value.strip() == "" else value.strip()

    def required(self, name: str, expected: str) -> str:
        value = self.raw(name)
        if value is None:
            self.fail(ConfigError(name, expected))
            return ""
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
                self.fail(ConfigError(name, expected))
            return None
        try:
            return parse(value)
        except (ValueError, TypeError) as err:
            detail = f" ({err})" if isinstance(err, SchemaError | ConditionError) else ""
            self.fail(ConfigError(name, expected + detail, value))
            return None

    def get(self, name: str, default: str | None = None) -> Any:
        """The variable's value as the registry says to read it (`default` when its default is
        computed); a bad or missing required one is kept in `errors` and read as None."""
        variable = VARIABLES[name]
        default = variable.default if default is None else default
        if variable.choices:
            return self.choice(name, variable.choices, default or "")
        if variable.parse is None:
            if variable.required:
                return self.required(name, variable.expects)
            return self.raw(name, default)
        return self.parsed(name, variable.expects, variable.parse, default, variable.required)

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = (self.raw(name, default) or default).lower()
        if value not in choices:
            self.fail(ConfigError(name, "one of " + "|".join(choices), self.env.get(name)))
            return default
        return value


def _time(read: _Reader, prefix: str, schema: tuple[Column, ...] | None) -> str:
    """The input's time attribute: a TIMESTAMP column (Flink's rowtime), or a special name."""
    name = f"{prefix}_TIME"
    time = read.get(name) or "proctime"
    if time in TIME_SPECIAL or not read.good(f"{prefix}_SCHEMA"):
        return time
    column = next((c for c in schema or () if c.name == time), None)
    expected = f"a column of {prefix}_SCHEMA, kafka_timestamp, source_ts_ms or proctime"
    if column is None:
        read.fail(ConfigError(name, expected, time))
    elif not isinstance(column.spark_type, TimestampType):
        read.fail(
            ConfigError(
                name,
                f"a TIMESTAMP(3) or TIMESTAMP_LTZ(3) column, as Flink's time attributes are "
                f"({time} is {column.declared}; a column of epoch milliseconds declared "
                f"TIMESTAMP_LTZ(3) is read as Flink's TO_TIMESTAMP_LTZ({time}, 3) reads it)",
                time,
            )
        )
    return time


def _input(read: _Reader, side: str, topic: bool = True) -> InputConfig:
    """One input's variables; without `topic`, the side is a table (the lookup join)."""
    prefix = side.upper()
    schema = read.get(f"{prefix}_SCHEMA")
    names = {c.name for c in schema or ()}
    primary_key = read.get(f"{prefix}_PRIMARY_KEY")
    if schema and primary_key and not set(primary_key) <= names:
        read.fail(
            ConfigError(
                f"{prefix}_PRIMARY_KEY", f"columns of {prefix}_SCHEMA", ",".join(primary_key)
            )
        )
    metadata = _metadata(read, prefix, schema)
    view = _view(read, prefix, schema)
    return InputConfig(
        side=side,
        topic=(read.get(f"{prefix}_TOPIC") or "") if topic else "",
        format=read.get(f"{prefix}_FORMAT"),
        schema=schema,
        primary_key=primary_key or (),
        time=_time(read, prefix, schema),
        watermark_delay_ms=read.get(f"{prefix}_WATERMARK_DELAY") or 0,
        metadata=metadata,
        fields=view[0],
        where=view[1],
    )


def _view(
    read: _Reader, prefix: str, schema: tuple[Column, ...] | None
) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[tuple[str, object], ...]]:
    """`<SIDE>_FIELDS` (`column=a.b,…`) and `<SIDE>_WHERE` (`field=<JSON value>,…`): a view's
    columns of nested fields and the records it keeps, read from JSON records."""
    fields, where = read.raw(f"{prefix}_FIELDS"), read.raw(f"{prefix}_WHERE")
    if fields is None and where is None:
        return (), ()
    if read.raw(f"{prefix}_FORMAT", "json") != "json":
        name = f"{prefix}_FIELDS" if fields is not None else f"{prefix}_WHERE"
        read.fail(ConfigError(name, f"unset unless {prefix}_FORMAT=json", fields or where))
        return (), ()
    names = {c.name for c in schema or ()}
    paths = []
    for pair in (fields or "").split(",") if fields else []:
        column, _, path = (part.strip() for part in pair.partition("="))
        steps = tuple(step.strip() for step in path.split("."))
        if column not in names or not all(steps):
            read.fail(
                ConfigError(
                    f"{prefix}_FIELDS",
                    f"column=path pairs, the columns of {prefix}_SCHEMA, each path "
                    "fields joined by '.'",
                    fields,
                )
            )
            return (), ()
        paths.append((column, steps))
    kept = _where_pairs(where) if where else []
    if kept is None:
        read.fail(ConfigError(f"{prefix}_WHERE", "field=value pairs, each value JSON", where))
        return (), ()
    return tuple(paths), tuple(kept)


_JSON = json.JSONDecoder()


def _where_pairs(text: str) -> list[tuple[str, object]] | None:
    """`field=<JSON value>,…` read value by value, so that a JSON string may hold a comma
    (`name="a,b"`); None if it is not that."""
    pairs, at = [], 0
    while True:
        field, equals, _ = text[at:].partition("=")
        if not equals or not field.strip() or "," in field:
            return None
        at += len(field) + 1
        while text[at : at + 1].isspace():
            at += 1
        try:
            value, at = _JSON.raw_decode(text, at)
        except json.JSONDecodeError:
            return None
        pairs.append((field.strip(), value))
        rest = text[at:].lstrip()
        if not rest:
            return pairs
        if not rest.startswith(","):
            return None
        at = len(text) - len(rest) + 1


def _metadata(
    read: _Reader, prefix: str, schema: tuple[Column, ...] | None
) -> tuple[tuple[str, str], ...]:
    """`<SIDE>_METADATA`: `column=key,…`, Flink's `column TYPE METADATA FROM 'key'`."""
    name, text = f"{prefix}_METADATA", read.raw(f"{prefix}_METADATA")
    if text is None or not read.good(f"{prefix}_SCHEMA"):
        return ()
    declared = {c.name: c.spark_type.simpleString().upper() for c in schema or ()}
    found = []
    for pair in text.split(","):
        column, _, key = (part.strip() for part in pair.partition("="))
        want = METADATA_TYPES.get(key)
        if want is None or column not in declared:
            read.fail(
                ConfigError(
                    name,
                    f"column=key pairs, the columns of {prefix}_SCHEMA, the "
                    "keys " + ", ".join(METADATA_TYPES),
                    text,
                )
            )
            return ()
        if not declared[column].startswith(want):
            read.fail(ConfigError(name, f"{column} declared as {key} is ({want})", text))
            return ()
        found.append((column, key))
    return tuple(found)


@cache
def _spark_keys() -> dict[str, str]:
    """Spark's keys that are not all lower case, by their lower-case spelling."""
    text = resources.files("app.config").joinpath("spark_conf_keys.txt").read_text()
    keys = [line for line in text.splitlines() if line and not line.startswith("#")]
    return {key.lower(): key for key in keys}


def _client_properties(read: _Reader, prefix: str, skip: set[str]) -> dict[str, str]:
    """`KAFKA_SASL_MECHANISM` -> `sasl.mechanism`; a name with a dot is taken as written. A
    property the service sets itself is refused, naming the variable to use instead."""
    found = {}
    for name, value in read.env.items():
        if name.startswith(prefix) and name not in skip and len(name) > len(prefix):
            key = name[len(prefix) :]
            key = key if "." in key else key.lower().replace("_", ".")
            if prefix == "KAFKA_" and key.lower() in _KAFKA_OWN:
                instead = _KAFKA_OWN[key.lower()]
                why = f"set {instead} instead" if instead else "the service sets it itself"
                read.fail(ConfigError(name, f"a client property other than {key} ({why})", value))
                continue
            found[key] = value
    return found


def _spark_conf(read: _Reader) -> dict[str, str]:
    """`SPARK_CONF_spark.x.yZ` as written; `SPARK_CONF_SPARK_X_YZ` as Spark spells that key
    (Spark's keys are case-sensitive: `spark.x.yz` would be ignored)."""
    conf = {}
    for name, value in read.env.items():
        if not name.startswith("SPARK_CONF_") or len(name) == len("SPARK_CONF_"):
            continue
        key = name[len("SPARK_CONF_") :]
        if "." not in key:
            key = key.lower().replace("_", ".")
            key = _spark_keys().get(key, key)
        if not key.startswith("spark."):
            read.fail(
                ConfigError(
                    name,
                    "a Spark property (SPARK_CONF_SPARK_EXECUTOR_MEMORY or SPARK_CONF_spark.x.y)",
                    key,
                )
            )
            continue
        conf[key] = value
    return conf


def _unknown_variables(read: _Reader) -> None:
    """A variable under one of this service's prefixes that it does not read is a typo (a
    setting silently ignored otherwise): refused, with the nearest name."""
    for name in read.env:
        if name.startswith(OWN_PREFIXES) and name not in VARIABLES:
            near = difflib.get_close_matches(name, sorted(VARIABLES), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            read.fail(
                ConfigError(
                    name,
                    f"a variable streamjoin reads{hint}",
                    seen="streamjoin has no such variable",
                )
            )
    level = read.raw("LOG_LEVEL", "INFO") or "INFO"
    if level.upper() not in LOG_LEVELS:
        read.fail(ConfigError("LOG_LEVEL", "one of " + "|".join(LOG_LEVELS), level))
    read.get("LOG_FORMAT")


def _starting_topics(read: _Reader, offsets: str | None, inputs: set[str]) -> None:
    if offsets is not None and "group-offsets" in offsets and not read.get("KAFKA_GROUP_ID"):
        read.fail(
            ConfigError(
                "STARTING_OFFSETS",
                "group-offsets with KAFKA_GROUP_ID set (the "
                "consumer group whose offsets to start from)",
                offsets,
            )
        )
    if offsets is None or not offsets.startswith("{"):
        return  # one mode for every topic
    stray = sorted(set(json.loads(offsets)) - inputs)
    if stray:
        read.fail(
            ConfigError(
                "STARTING_OFFSETS",
                "offsets of the input topics (" + ", ".join(sorted(inputs)) + ")",
                offsets,
            )
        )


def _one_partition_count(read: _Reader, spark_conf: dict[str, str]) -> None:
    """STATE_PARTITIONS sets Spark's shuffle partitions: both set, they must agree."""
    given, partitions = spark_conf.get(SHUFFLE_PARTITIONS), read.get("STATE_PARTITIONS")
    if given is not None and partitions is not None and given != str(partitions):
        read.fail(
            ConfigError(
                "STATE_PARTITIONS",
                f"the number SPARK_CONF_{SHUFFLE_PARTITIONS} "
                f"gives ({given}), or one of the two alone",
                str(partitions),
            )
        )


def _distinct_topics(read: _Reader, inputs: set[str], output: OutputConfig) -> None:
    """An output topic that is also an input feeds the service its own output: a loop."""
    for name, topic in (
        ("OUTPUT_TOPIC", output.topic),
        ("DLQ_TOPIC", output.dlq_topic),
        ("OUTPUT_MARKER_TOPIC", output.marker_topic),
    ):
        if topic and topic in inputs:
            read.fail(
                ConfigError(
                    name,
                    "a topic other than the inputs' (LEFT_TOPIC, "
                    "RIGHT_TOPIC): the service would read its own output",
                    topic,
                )
            )


def with_sql(env: Mapping[str, str]) -> Mapping[str, str]:
    """The variables with those of `STREAMJOIN_SQL` / `STREAMJOIN_SQL_FILE`
    (`app.config.sql.query`); a variable that says otherwise than the SQL is an error naming
    both."""
    return _compiled_sql(env)[0]


def _compiled_sql(env: Mapping[str, str]) -> tuple[Mapping[str, str], Compiled, str]:
    """`with_sql`'s variables, the compiled SQL (an empty one without SQL), and the variable
    that holds the SQL."""
    given = [name for name in SQL_VARIABLES if (env.get(name) or "").strip()]
    blank = [name for name in SQL_VARIABLES if name in env and name not in given]
    if blank:  # set from a file that was not there, say: not the same as unset
        raise ConfigError(
            blank[0], "Flink SQL (or unset, to configure the job by variables)", seen="it is empty"
        )
    if not given:
        return env, Compiled(), ""
    if len(given) == 2:
        raise ConfigError(
            "STREAMJOIN_SQL_FILE",
            "either STREAMJOIN_SQL or STREAMJOIN_SQL_FILE",
            seen="both are set",
        )
    variable = given[0]
    text = env[variable]
    if variable == "STREAMJOIN_SQL_FILE":
        try:
            with open(env[variable].strip(), encoding="utf-8") as script:
                text = script.read()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(
                variable,
                "a readable file of Flink SQL",
                env[variable],
                seen=f"cannot read {env[variable].strip()!r} ({type(err).__name__})",
            ) from None
        if not text.strip():
            raise ConfigError(
                variable, "a readable file of Flink SQL", seen=f"{env[variable].strip()!r} is empty"
            )
    try:
        compiled = compile_script(text)
    except SqlError as err:
        raise ConfigError(variable, "Flink SQL streamjoin runs", seen=str(err)) from None
    clashes = [
        ConfigError(
            name,
            f"{value!r} as line {compiled.lines[name]} of {variable} says (or unset)",
            env[name],
        )
        for name, value in compiled.variables.items()
        if (env.get(name) or "").strip() not in ("", value)
    ]
    raise_all(clashes)
    return {**env, **compiled.variables}, compiled, variable


def _origin(compiled: Compiled, variable: str) -> dict[str, str]:
    return {name: f"{variable} line {line} ({name})" for name, line in compiled.lines.items()}


def _chained_joins(
    chain: list[Compiled], variable: str, lookups: Mapping[str, str]
) -> tuple[tuple[ChainedJoin, ...], list[ConfigError]]:
    """The joins after the first, read from their own variables as the first join's right
    input and join are (the job's retention and buckets are the first join's:
    `app.plan.planner.join_stages`); a lookup join's table options over `lookups`, the
    `LOOKUP_*` variables the environment gives every lookup (`LOOKUP_PASSWORD`, say)."""
    joins, errors = [], []
    for number, own in enumerate(chain, start=3):
        origin = _origin(own, variable)
        read = _Reader(
            {**lookups, **own.variables} if "LOOKUP_URL" in own.variables else own.variables
        )
        join = JoinConfig(
            read.get("JOIN_TYPE"),
            read.get("JOIN_KIND"),
            read.raw("JOIN_ON"),
            None,
            0,
            input_ttls_ms=(None, read.get("RIGHT_STATE_TTL")),
            early_fire_ms=read.get("JOIN_EARLY_FIRE_DELAY"),
        )
        source = replace(_input(read, "right", topic=join.type != LOOKUP), side=f"input{number}")
        lookup = read_lookup(read) if join.type == LOOKUP else None
        joins.append(ChainedJoin(source, join, origin, read.raw("LEFT_TIME") or "proctime", lookup))
        errors += [traced(error, origin) for error in read.errors.values()]
    return tuple(joins), errors


def traced(error: ConfigError, origin: Mapping[str, str]) -> ConfigError:
    """An error in a variable the SQL set, told as the SQL's line."""
    if error.variable not in origin:
        return error
    traced = ConfigError(error.variable, "")
    traced.args = (f"{origin[error.variable]}: {str(error).split(': ', 1)[1]}",)
    return traced


def load_config(env: Mapping[str, str]) -> Config:
    """Build the whole configuration from `env`, or raise ConfigError (ConfigErrors: several)
    naming every bad variable."""
    lookups = {name: value for name, value in env.items() if name.startswith("LOOKUP_")}
    env, compiled, sql_variable = _compiled_sql(env)
    origin = _origin(compiled, sql_variable)
    read = _Reader(env)
    output_topic = read.get("OUTPUT_TOPIC") or ""
    encoding = read.get("OUTPUT_ENCODING")
    output_key = read.get("OUTPUT_KEY")
    if encoding == "upsert" and not output_key and read.good("OUTPUT_KEY"):
        read.fail(ConfigError("OUTPUT_KEY", "the unique key columns when OUTPUT_ENCODING=upsert"))
    on, where = read.raw("JOIN_ON"), read.raw("JOIN_WHERE")
    read.get("JOIN_ON")
    read.get("JOIN_WHERE")
    checkpoint_location = read.get("CHECKPOINT_LOCATION")
    # Stable for one deployment (its output and checkpoint), distinct between deployments.
    query_id = hashlib.sha256(checkpoint_location.encode()).hexdigest()[:10]
    join_type = read.get("JOIN_TYPE")
    left, right = _input(read, "left"), _input(read, "right", topic=join_type != LOOKUP)
    output = OutputConfig(
        topic=output_topic,
        dlq_topic=read.get("DLQ_TOPIC", f"{output_topic}.dlq") or "",
        encoding=encoding,
        format=read.get("OUTPUT_FORMAT"),
        key=output_key or (),
        delivery=read.get("OUTPUT_DELIVERY"),
        sink=read.get("OUTPUT_SINK"),
        schema=read.get("OUTPUT_SCHEMA"),
        marker_topic=read.get("OUTPUT_MARKER_TOPIC", f"{output_topic}.markers") or "",
        transactional_id=read.get(
            "OUTPUT_TRANSACTIONAL_ID", f"streamjoin-{output_topic}-{query_id}"
        )
        or "",
    )
    chained, chain_errors = _chained_joins(compiled.chain, sql_variable, lookups)
    topics = {left.topic, right.topic, *(c.input.topic for c in chained)} - {""}
    _distinct_topics(read, topics, output)
    starting_offsets = read.get("STARTING_OFFSETS")
    _starting_topics(read, starting_offsets, topics)
    lookup = read_lookup(read) if join_type == LOOKUP else None
    # only checked here: read where the JVM is started (app.jars, app.class_archive)
    for folder in ("STREAMJOIN_JARS", "JVM_CLASS_ARCHIVE_DIR"):
        read.get(folder)
    _unknown_variables(read)
    spark_conf = _spark_conf(read)
    _one_partition_count(read, spark_conf)
    join = JoinConfig(
        type=join_type,
        kind=read.get("JOIN_KIND"),
        on=on,
        select=read.get("JOIN_SELECT"),
        where=where,
        state_ttl_ms=read.get("STATE_TTL") or 0,
        state_buckets=read.get("JOIN_STATE_BUCKETS"),
        input_ttls_ms=(read.get("LEFT_STATE_TTL"), read.get("RIGHT_STATE_TTL")),
        early_fire_ms=read.get("JOIN_EARLY_FIRE_DELAY"),
        window=read.get("JOIN_WINDOW"),
        window_groups=(read.get("LEFT_WINDOW_GROUP_BY"), read.get("RIGHT_WINDOW_GROUP_BY")),
    )
    config = Config(
        bootstrap_servers=read.get("KAFKA_BOOTSTRAP_SERVERS") or "",
        left=left,
        right=right,
        join=join,
        output=output,
        checkpoint_location=checkpoint_location,
        spark_master=read.get("SPARK_MASTER") or "local[*]",
        trigger_interval_ms=read.get("TRIGGER_INTERVAL"),
        starting_offsets=starting_offsets or "earliest",
        max_records_per_trigger=read.get("MAX_RECORDS_PER_TRIGGER"),
        metrics_port=read.get("METRICS_PORT") or 0,
        readiness_timeout_ms=read.get("READINESS_TIMEOUT") or 0,
        kafka_properties=_client_properties(read, "KAFKA_", _KAFKA_NAMED),
        schema_registry_url=read.get("SCHEMA_REGISTRY_URL"),
        schema_registry_properties=_client_properties(
            read, "SCHEMA_REGISTRY_", {"SCHEMA_REGISTRY_URL"}
        ),
        spark_conf=spark_conf,
        state_partitions=read.get("STATE_PARTITIONS"),
        warm_state_mb=read.get("WARM_STATE_MB"),
        mini_batch=read.get("JOIN_MINI_BATCH") == "true",
        hot_key_rows=read.get("HOT_KEY_ROWS"),
        source_idle_timeout_ms=read.get("SOURCE_IDLE_TIMEOUT") or 0,
        late_rows=read.get("LATE_ROWS"),
        lookup=lookup,
        group_id=read.get("KAFKA_GROUP_ID"),
        offset_reset=read.get("KAFKA_AUTO_OFFSET_RESET"),
        sql_origin=origin,
        chain=chained,
        multi_way=compiled.multi_way and f"{sql_variable} {compiled.multi_way}",
    )
    raise_all([traced(error, origin) for error in read.errors.values()] + chain_errors)
    return config
