"""Checks of the configured join as a whole, before anything starts.

Each variable may be valid alone and the combination still unusable: a join without the
inputs' schemas, a condition naming a column no input has, or an append-only output for a join
whose result updates (Flink refuses that plan too).
"""

from __future__ import annotations

from app.config import Config, ConfigError
from state.condition import ConditionError
from state.regular_processor import RegularJoinSpec, SideSpec

AVAILABLE_FORMATS = ("json", "debezium-json", "upsert", "avro-confluent", "debezium-avro-confluent")
AVRO_FORMATS = ("avro-confluent", "debezium-avro-confluent")
NORMALIZED_FORMATS = ("debezium-json", "debezium-avro-confluent", "upsert")
AVAILABLE_JOIN_TYPES = ("regular",)
INSERT_ONLY_FORMATS = ("json", "avro-confluent")


def join_spec(config: Config) -> RegularJoinSpec:
    """The regular join's description, as the processors on the executors receive it."""
    return RegularJoinSpec(
        kind=config.join.kind,
        on=config.join.on or "",
        left=SideSpec(tuple(c.name for c in config.left.schema or ()), config.left.primary_key),
        right=SideSpec(tuple(c.name for c in config.right.schema or ()), config.right.primary_key),
        state_ttl_ms=config.join.state_ttl_ms,
    )


def produces_updates(config: Config) -> bool:
    """Whether the join's result changelog can hold more than inserts."""
    inputs_update = any(s.format not in INSERT_ONLY_FORMATS for s in (config.left, config.right))
    return inputs_update or config.join.kind != "inner"


def check_plan(config: Config) -> None:
    """Raise ConfigError, naming the variable, for a join this service cannot run."""
    if not config.join.on:
        return  # forwarding both inputs needs nothing more
    if config.join.type not in AVAILABLE_JOIN_TYPES:
        raise ConfigError("JOIN_TYPE", "regular (the only join type available in this version)",
                          config.join.type)  # fmt: skip
    for source in (config.left, config.right):
        prefix = source.side.upper()
        if source.format not in AVAILABLE_FORMATS:
            raise ConfigError(f"{prefix}_FORMAT", "one of " + "|".join(AVAILABLE_FORMATS),
                              source.format)  # fmt: skip
        if not source.schema:
            raise ConfigError(f"{prefix}_SCHEMA", "the input's columns, needed to join it")
        if source.format in AVRO_FORMATS and not config.schema_registry_url:
            raise ConfigError("SCHEMA_REGISTRY_URL", f"the registry's URL, for {prefix}_FORMAT="
                              f"{source.format}")  # fmt: skip
        if source.format in NORMALIZED_FORMATS and not source.primary_key:
            raise ConfigError(f"{prefix}_PRIMARY_KEY", f"the primary key of a {source.format} "
                              "input: its changelog is normalized per key")  # fmt: skip
    if config.output.format == "avro-confluent" and not config.schema_registry_url:
        raise ConfigError("SCHEMA_REGISTRY_URL", "the registry's URL, for OUTPUT_FORMAT="
                          "avro-confluent")  # fmt: skip
    try:
        join_spec(config).matcher()
    except ConditionError as err:
        raise ConfigError("JOIN_ON", f"a condition over the inputs' columns ({err})",
                          config.join.on) from None  # fmt: skip
    if config.output.encoding == "append" and produces_updates(config):
        raise ConfigError(
            "OUTPUT_ENCODING",
            f"retract, upsert or debezium-json: a {config.join.kind} join over these inputs "
            "produces updates and deletes, which an append-only output cannot carry",
            "append",
        )
