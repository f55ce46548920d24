"""What a configuration will run, in words: the plan `streamjoin check` prints.

The join and its kind, the join key and the residual condition as the planner split them, how
each side's state is laid out, the changelog the output carries, and the effective
configuration with every secret-looking value masked (`app.config.redaction`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from app.config.env import Config, InputConfig, JoinConfig, with_sql
from app.config.lookup_table import LookupConfig
from app.config.redaction import shown_variables, without_user_info
from app.config.registry import FORWARD, INSERT_ONLY_FORMATS, VARIABLES
from app.config.sql.query import SQL_TEXT
from app.plan.planner import (
    join_label,
    join_spec,
    join_stages,
    multi_way_refused,
    multi_way_spec,
    normalized,
    produces_updates,
    upsert_materialized,
)
from app.plan.pushdown import pushed_filter
from app.plan.table_lookup import shuffled, table_lookup
from state.changes import RowKind
from state.joins.lookup_join import LookupJoinSpec
from state.joins.specs import IntervalJoinSpec, RegularJoinSpec

AUTO_BUCKETS = "the checkpoint's, or 16 per state partition for a new one"
ENCODED = {
    "append": "inserts only",
    "retract": "every change, its kind in the value and the op header",
    "upsert": "by OUTPUT_KEY: +I/+U the row, -D a tombstone, -U dropped",
    "debezium-json": "Debezium envelopes: +I/+U after, -U/-D before",
}
# after a filter of the joined rows, which may drop the +U that would replace the row
FILTERED_UPSERT = "by OUTPUT_KEY: +I/+U the row, -U and -D a tombstone"


def _input(source: InputConfig, join: JoinConfig) -> str:
    how = f"{source.topic} ({source.format}"
    if normalized(source, join):
        how += f", normalized by {','.join(source.primary_key)}"
    time = "processing time" if source.time == "proctime" else f"event time {source.time}"
    return how + f"), {time}, watermark delay {source.watermark_delay_ms} ms"


def _read(config: Config, source: InputConfig) -> list[str]:
    """What of an input's records is read: a view's kind of record and nested fields, and the
    rows a filter pushed below the join keeps."""
    lines = []
    if source.where:
        kept = " AND ".join(f"{field} = {json.dumps(value)}" for field, value in source.where)
        lines.append(f"  {source.side} reads only the records where {kept}")
    if source.fields:
        paths = ", ".join(f"{column} from {'.'.join(path)}" for column, path in source.fields)
        lines.append(f"  {source.side} columns from nested fields: {paths}")
    pushed = pushed_filter(config, source)
    if pushed is not None:
        lines.append(f"  {source.side} rows kept before the join: {pushed}")
    return lines


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
    if spec.state_ttl_ms and set(spec.retention_ms) == {spec.state_ttl_ms}:
        lines.append(
            "  retention: each row of either side (and each key's last row in a "
            f"normalizer) goes {spec.state_ttl_ms} ms after its last write"
        )
    elif any(spec.retention_ms):
        for side, ttl in zip(("left", "right"), spec.retention_ms, strict=True):
            kept = f"goes {ttl} ms after its last write" if ttl else "is kept for ever"
            lines.append(f"  retention: each {side} row {kept}")
        if spec.state_ttl_ms:
            lines.append(
                f"  retention: each key's last row in a normalizer goes {spec.state_ttl_ms} ms "
                "after its last write"
            )
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
    if config.join.window is not None:
        grouped = [
            f"  {side} input: a window aggregate, the distinct {','.join(columns)} of each window"
            for side, columns in zip(("left", "right"), config.join.window_groups, strict=True)
            if columns is not None
        ]
        return [
            f"  windows: {config.join.window}",
            *grouped,
            "  state: both sides' rows of each window, per bucket of join keys, until the "
            "watermark passes the window's end",
        ]
    return [
        f"  right state: versions per primary key ({','.join(config.right.primary_key)}), until "
        "no probe row can ask for them",
        "  left state: probe rows waiting for the watermark",
    ]


def _lookup(config: Config, number: int | None) -> list[str]:
    """The lookup join's plan: the query each batch's keys go out in, and the cache;
    `number`: its place in a chain of joins (None: the only one)."""
    lookup = config.lookup
    assert lookup is not None
    spec = join_spec(config)
    assert isinstance(spec, LookupJoinSpec)
    query = table_lookup(config, spec)
    cache = lookup.cache
    kept = {
        "NONE": "no cache: every key is looked up",
        "PARTIAL": f"partial cache per worker: at most {cache.max_rows or 'unbounded'} keys, "
        f"expire after write {cache.expire_after_write_s or 'never'} s, after access "
        f"{cache.expire_after_access_s or 'never'} s, missing keys "
        + ("cached" if cache.cache_missing_key else "not cached"),
        "FULL": f"full cache per worker: the whole table, reloaded every "
        f"{cache.reload_interval_s} s",
    }[cache.kind]
    after = spec.residual.after
    how = (
        f"asynchronous, up to {lookup.max_concurrent} queries at once, {query.batch_keys} "
        "keys per query"
        if lookup.asynchronous
        else "synchronous, one query per key"
    )
    append_only = config.left.format in INSERT_ONLY_FORMATS
    changes = "append-only" if append_only else "each change keeps its kind"
    return [
        f"{_head(number)} lookup {config.join.kind.upper()} (processing time), {changes}",
        "  join key: " + " AND ".join(f"{value.sql()} = R.{b}" for value, b in spec.keys),
        "  query: " + (query.batch_query() if lookup.asynchronous else query.key_query()),
        f"    ({how}; timeout {lookup.timeout_ms} ms, {lookup.max_retries} retries)",
        f"  evaluated after the lookup: {after.sql() if after is not None else 'none'}",
        f"  {kept}",
        "  input partitioned by the join key: " + ("yes" if shuffled(config) else "no"),
    ]


# A join with no equality between its inputs: Spark partitions state by key, and every row has
# the same one (`app.run.joins`).
ONE_TASK = (
    "none: every row shares one key, so the join runs in one task whatever "
    "STATE_PARTITIONS says (an equality between an L and an R column spreads it)"
)


def _head(number: int | None) -> str:
    """How a join's lines start; `number`: its place in a chain of joins (None: the only one),
    then said with what it joins: the first two inputs, or the result so far."""
    if number is None:
        return "join:"
    left, right = (
        ("left", "right") if number == 1 else (join_label(number - 1), f"input{number + 1}")
    )
    return f"{join_label(number)} ({left} with {right}):"


def _join(config: Config, number: int | None) -> list[str]:
    """One join of the job; `number`: its place in a chain of joins (None: the only one)."""
    spec = join_spec(config)
    condition = spec.join_condition
    keys = " AND ".join(f"L.{a} = R.{b}" for a, b in condition.equi) or ONE_TASK
    residual = condition.residual.sql() if condition.residual is not None else "none"
    return [
        f"{_head(number)} {config.join.type} {config.join.kind.upper()}",
        f"  join key: {keys}",
        f"  residual condition: {residual}",
        *_state(config),
        f"  state buckets: {config.join.state_buckets or AUTO_BUCKETS}",
    ]


def _multi_way(config: Config) -> list[str]:
    """The chain's joins as one multi-way operator: each join's kind and condition, the key
    every input shares, each input's rows per key."""
    spec = multi_way_spec(config)
    assert spec is not None
    stages = join_stages(config)
    labels = [source.side for source in config.inputs()]
    lines = [
        f"join: multi-way, one operator over {', '.join(labels)} ({config.multi_way}): "
        "only the inputs' rows are kept, no join's result"
    ]
    for number, stage in enumerate(stages, start=1):
        lines.append(
            f"  {join_label(number)}: {stage.join.kind.upper()} with "
            f"{labels[number]} ON {stage.join.on}"
        )
    lines.append(
        "  shared join key: "
        + " = ".join(f"{label}.{key}" for label, key in zip(labels, spec.keys, strict=True))
    )
    for label, side, key in zip(labels, spec.inputs, spec.keys, strict=True):
        layout = (
            "one row"
            if side.unique_key and set(side.unique_key) <= {key}
            else f"rows by unique key ({','.join(side.unique_key)})"
            if side.unique_key
            else "a multiset of rows"
        )
        lines.append(f"  {label} state: {layout} per key")
    lines.append(f"  state buckets: {config.join.state_buckets or AUTO_BUCKETS}")
    return lines


def describe(config: Config, env: Mapping[str, str]) -> list[str]:
    """The plan of `config` (read from `env`), line by line."""
    join, output = config.join, config.output

    def table(source: InputConfig, join: JoinConfig, lookup: LookupConfig | None) -> str:
        if lookup is None:
            return _input(source, join)
        return f"table {lookup.table} (PostgreSQL, {without_user_info(lookup.url)})"

    lines = [
        f"left:  {_input(config.left, join)}",
        f"right: {table(config.right, join, config.lookup)}",
    ]
    lines += [f"{c.input.side}: {table(c.input, c.join, c.lookup)}" for c in config.chain]
    for source in config.inputs():
        lines += _read(config, source)
    if join.type == FORWARD:
        lines.append("join: none: both inputs forwarded, each record tagged with its side")
    elif multi_way_spec(config) is not None:
        lines += _multi_way(config)
    else:
        stages = join_stages(config)
        for number, stage in enumerate(stages, start=1):
            place = number if len(stages) > 1 else None
            lines += _lookup(stage, place) if stage.lookup is not None else _join(stage, place)
        if config.multi_way:
            lines.append(f"  note: {multi_way_refused(config)}")
    if join.where:
        lines.append(f"filter: {join.where}, each joined change kept where it holds")
    if join.type == FORWARD:
        lines.append(
            f"output: {output.topic}: every input record unchanged, with a "
            f"streamjoin.side header; delivery {output.delivery}"
        )
    elif output.sink == "blackhole":
        lines.append("output: blackhole: the joined rows are made and dropped")
        lines.append(f"  dead letters: {output.dlq_topic}")
    else:
        changes = " ".join(RowKind.ALL) if produces_updates(config) else RowKind.INSERT
        key = ",".join(output.key) or "the join key"
        filtered = output.encoding == "upsert" and join.where
        encoded = f"{output.encoding}: {FILTERED_UPSERT if filtered else ENCODED[output.encoding]}"
        lines.append(
            f"output: {output.topic}, {output.format}, changelog {changes}, "
            f"{encoded}; record key {key}"
        )
        if upsert_materialized(config):
            lines.append("  upsert materializer: on (OUTPUT_KEY does not hold the join key)")
        lines.append(f"  dead letters: {output.dlq_topic}; delivery {output.delivery}")
    lines.append("configuration:")
    shown = shown_variables(with_sql(env), VARIABLES)
    if SQL_TEXT in shown:  # the script is what the variables beside it say
        shown[SQL_TEXT] = f"<{len(env[SQL_TEXT].strip().splitlines())} lines of Flink SQL>"
    lines += [f"  {name}={value}" for name, value in shown.items()]
    return lines
