"""What a configuration will run, in words: the plan `streamjoin check` prints.

The join and its kind, the join key and the residual condition as the planner split them, how
each side's state is laid out, the changelog the output carries, and the effective
configuration with every secret-looking value masked (`app.redaction`).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.config import FORWARD, KNOWN_VARIABLES, Config, InputConfig
from app.plan import join_spec, normalized, produces_updates, upsert_materialized
from app.redaction import shown_variables
from state.interval_processor import IntervalJoinSpec
from state.regular_processor import RegularJoinSpec

AUTO_BUCKETS = "the checkpoint's, or 8 per state partition for a new one"
ENCODED = {
    "append": "inserts only",
    "retract": "every change, its kind in the value and the op header",
    "upsert": "by OUTPUT_KEY: +I/+U the row, -D a tombstone, -U dropped",
    "debezium-json": "Debezium envelopes: +I/+U after, -U/-D before",
}


def _input(source: InputConfig) -> str:
    how = f"{source.topic} ({source.format}"
    if normalized(source):
        how += f", normalized by {','.join(source.primary_key)}"
    time = "processing time" if source.time == "proctime" else f"event time {source.time}"
    return how + f"), {time}, watermark delay {source.watermark_delay_ms} ms"


def _regular_state(spec: RegularJoinSpec) -> list[str]:
    lines = []
    for side, sides in (("left", spec.left), ("right", spec.right)):
        keys = [a for a, _ in spec.equi_keys] if side == "left" else [b for _, b in spec.equi_keys]
        if sides.unique_key and set(sides.unique_key) <= set(keys):
            layout = "one row per join key (its unique key is in the join key)"
        elif sides.unique_key:
            layout = f"rows by unique key ({','.join(sides.unique_key)}) per join key"
        else:
            layout = "a multiset of rows (row -> count) per join key"
        lines.append(f"  {side} state: {layout}; an entry per join key, pages past 512 rows")
    if spec.state_ttl_ms:
        lines.append(f"  retention: a key's state goes {spec.state_ttl_ms} ms after its last write")
    return lines


def _state(config: Config) -> list[str]:
    spec = join_spec(config)
    if isinstance(spec, RegularJoinSpec):
        return _regular_state(spec)
    if isinstance(spec, IntervalJoinSpec):
        bounds = spec.condition
        return [
            f"  bounds: L.time - R.time in [{bounds.lower_ms}, {bounds.upper_ms}] ms",
            "  state: both sides' rows, per bucket of join keys, until the watermark passes "
            "their bounds",
        ]
    return [
        f"  right state: versions per primary key ({','.join(config.right.primary_key)}), until "
        "no probe row can ask for them",
        "  left state: probe rows waiting for the watermark",
    ]


def describe(config: Config, env: Mapping[str, str]) -> list[str]:
    """The plan of `config` (read from `env`), line by line."""
    join, output = config.join, config.output
    lines = [f"left:  {_input(config.left)}", f"right: {_input(config.right)}"]
    if join.type == FORWARD:
        lines.append("join: none: both inputs forwarded, each record tagged with its side")
    else:
        spec = join_spec(config)
        condition = spec.join_condition
        keys = " AND ".join(f"L.{a} = R.{b}" for a, b in condition.equi) or "none (one task)"
        residual = condition.residual.sql() if condition.residual is not None else "none"
        lines += [
            f"join: {join.type} {join.kind.upper()}",
            f"  join key: {keys}",
            f"  residual condition: {residual}",
            *_state(config),
            f"  state buckets: {join.state_buckets or AUTO_BUCKETS}",
        ]
    if join.type == FORWARD:
        lines.append(f"output: {output.topic}: every input record unchanged, with a "
                     f"streamjoin.side header; delivery {output.delivery}")  # fmt: skip
    else:
        changes = "+I -U +U -D" if produces_updates(config) else "+I"
        key = ",".join(output.key) or "the join key"
        encoded = f"{output.encoding}: {ENCODED[output.encoding]}"
        lines.append(f"output: {output.topic}, {output.format}, changelog {changes}, "
                     f"{encoded}; record key {key}")  # fmt: skip
        if upsert_materialized(config):
            lines.append("  upsert materializer: on (OUTPUT_KEY does not hold the join key)")
        lines.append(f"  dead letters: {output.dlq_topic}; delivery {output.delivery}")
    lines.append("configuration:")
    lines += [f"  {name}={value}" for name, value in shown_variables(env, KNOWN_VARIABLES).items()]
    return lines
