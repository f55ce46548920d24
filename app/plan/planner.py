"""Checks of the configured join as a whole, before anything starts.

Each variable may be valid alone and the combination still unusable: a join without the
inputs' schemas, a condition naming a column no input has, or an append-only output for a join
whose result updates (Flink refuses that plan too).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from pyspark.sql.types import TimestampType

from app.config.env import Config, ConfigError, InputConfig, JoinConfig, raise_all, traced
from app.config.registry import (
    AVRO_FORMATS,
    CHANGELOG_FORMATS,
    FORWARD,
    INSERT_ONLY_FORMATS,
    LOOKUP,
)
from app.plan.condition_check import Columns, condition_problem, function_problem
from app.plan.declared_output import declared_problem, declared_select
from app.plan.flink_arithmetic import type_name
from app.plan.projection import (
    parse_select,
    select_expressions,
    selected_columns,
    where_predicate,
    zoned_selected,
)
from serdes.records.schema import Column
from state.columns import Widening, chained_names, side_column
from state.expr.condition import ConditionError, parse_condition
from state.expr.functions import INTEGRAL_BITS
from state.joins.lookup_join import LookupJoinSpec
from state.joins.specs import (
    PROCTIME,
    WINDOW_COLUMNS,
    IntervalJoinSpec,
    JoinSpec,
    MultiJoinSpec,
    RegularJoinSpec,
    SideSpec,
    TemporalJoinSpec,
    WindowJoinSpec,
)

TEMPORAL_TYPES = ("temporal", "temporal-proctime", "temporal-function")
WINDOW = "window"
# The types of the columns a window join's windowing function adds (`WINDOW_COLUMNS`)
WINDOW_TYPES = {name: Column(name, "TIMESTAMP(3)", TimestampType()) for name in WINDOW_COLUMNS}

OUTER_KINDS = ("inner", "left", "right", "full")


@dataclass(frozen=True)
class StateLayout:
    """How a checkpoint lays its state out, fixed when it was made and read from it at each start
    (`app.run.checkpoint.state_layout`): its key buckets (None where no checkpoint is read: a
    join's spec then has the configuration's); its buckets grouped by their spread ids
    (`app.run.key_buckets`), as in every checkpoint but those made before; a temporal join's
    versioned table behind a changelog normalizer, as only in checkpoints made before it needed
    none. The default is a new checkpoint's."""

    buckets: int | None = None
    spread_buckets: bool = True
    versions_normalized: bool = False


NEW_LAYOUT = StateLayout()  # a new checkpoint's, its buckets the configuration's


def input_widening(source: InputConfig, tail: int = 0) -> Widening | None:
    """How the rows an input's state held before its columns grew read now, `tail` columns
    after its own (None: its columns did not grow)."""
    if source.held_columns is None:
        return None
    return Widening(len(source.schema or ()) + tail, source.held_columns, tail)


def _side(source: InputConfig, tail: tuple[str, ...] = ()) -> SideSpec:
    schema = source.schema or ()
    fields = tuple(c.name for c in schema) + tail
    # a whole number column's width: a join condition's arithmetic on it wraps there
    widths = tuple(INTEGRAL_BITS.get(type_name(c.spark_type) or "") for c in schema)
    return SideSpec(fields, source.primary_key, input_widening(source, len(tail)), widths)


def join_spec(config: Config, layout: StateLayout = NEW_LAYOUT) -> JoinSpec:
    """The join's description, as the processors on the executors receive it."""
    buckets = layout.buckets if layout.buckets is not None else config.join.state_buckets
    left, right = _side(config.left), _side(config.right)
    if config.join.type == LOOKUP:
        return LookupJoinSpec(config.join.kind, config.join.on or "", left, right)
    if config.join.type == WINDOW:
        left, right = _side(config.left, WINDOW_COLUMNS), _side(config.right, WINDOW_COLUMNS)
        return WindowJoinSpec(
            config.join.kind, config.join.on or "", left, right, buckets, config.join.window_groups
        )
    if config.join.type == "interval":
        return IntervalJoinSpec(
            config.join.kind,
            config.join.on or "",
            left,
            right,
            config.left.time,
            config.right.time,
            buckets,
            config.join.early_fire_ms,
        )
    if config.join.type in TEMPORAL_TYPES:
        probe_time = PROCTIME if config.join.type == "temporal-proctime" else config.left.time
        return TemporalJoinSpec(
            config.join.kind,
            config.join.on or "",
            left,
            right,
            probe_time,
            buckets,
            layout.versions_normalized,
        )
    return RegularJoinSpec(
        config.join.kind,
        config.join.on or "",
        left,
        right,
        config.join.state_ttl_ms,
        buckets,
        config.mini_batch,
        config.join.input_ttls_ms,
        config.hot_key_rows,
    )


# The format of a chain's result so far, as the next join takes it: a changelog whose rows have
# no declared key, kept as a multiset by the next join (Flink derives a unique key where it can;
# the results are the same)
JOINED = "joined"


def join_label(number: int) -> str:
    """How metrics and `streamjoin state` name the `number`-th join of a job (from 1)."""
    return "join" if number == 1 else f"join{number}"


def join_stages(config: Config) -> list[Config]:
    """Each join of the job as a join of two inputs is configured: the first of the first two
    tables; each next one of the result so far as its left (its columns `chained_column`) and its
    own table as its right. The select list, the output and its checks belong to the last; a
    chain's retention applies to its regular joins, whose state it bounds (Flink's). So does the
    filter of the joined rows (`JOIN_WHERE`)."""
    if not config.chain:
        return [config]
    first = config.join

    def retention(join: JoinConfig) -> int:
        return first.state_ttl_ms if join.type == "regular" else 0

    stages = [
        replace(
            config,
            chain=(),
            lookup=config.lookup if first.type == LOOKUP else None,
            join=replace(first, select=None, where=None, state_ttl_ms=retention(first)),
        )
    ]
    for number, chained in enumerate(config.chain, start=2):
        before = stages[-1]
        left = InputConfig(
            "left",
            "",
            JOINED if produces_updates(before) else "json",
            _result_columns(before, number),
            (),
            chained.left_time,
            0,
        )
        join = replace(
            chained.join, state_ttl_ms=retention(chained.join), state_buckets=first.state_buckets
        )
        stages.append(
            replace(
                config,
                left=left,
                right=replace(chained.input, side="right"),
                join=join,
                chain=(),
                lookup=chained.lookup,
                sql_origin=chained.origin,
            )
        )
    last = replace(stages[-1].join, select=first.select, where=first.where)
    stages[-1] = replace(stages[-1], join=last)
    return stages


def multi_way_spec(config: Config, layout: StateLayout = NEW_LAYOUT) -> MultiJoinSpec | None:
    """The chain's joins as one multi-way operator (`state.joins.multi_join`) where the SQL
    asks for it (Flink's `table.optimizer.multi-join.enabled`, its `MULTI_JOIN` hint) and Flink
    would build one: INNER and LEFT regular joins whose inputs all share one join key (each
    join's equality with a column of that key before it); else None."""
    if not config.multi_way or not config.chain or config.lookup is not None:
        return None
    specs = [join_spec(stage, layout) for stage in join_stages(config)]
    if not all(isinstance(spec, RegularJoinSpec) for spec in specs):
        return None
    return MultiJoinSpec.of_chain(specs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class QueryPlan:
    """What a configuration's query runs, decided once (`query_plan`) for every part that
    builds it: each join of two as a configuration of its own (`join_stages`) and its spec,
    or the chain's joins as one multi-way operator; whether the output goes through the
    upsert materializer; how its checkpoint lays the state out."""

    config: Config
    stages: tuple[Config, ...]
    specs: tuple[JoinSpec, ...]
    multi_way: MultiJoinSpec | None
    materialized: bool
    layout: StateLayout

    @property
    def last(self) -> Config:
        return self.stages[-1]


def query_plan(config: Config, layout: StateLayout = NEW_LAYOUT) -> QueryPlan:
    """The plan of a joining configuration (not `JOIN_TYPE=forward`) over state laid out as
    `layout` says (a new checkpoint's by default)."""
    stages = tuple(join_stages(config))
    return QueryPlan(
        config,
        stages,
        tuple(join_spec(stage, layout) for stage in stages),
        multi_way_spec(config, layout),
        upsert_materialized(config),
        layout,
    )


def multi_way_refused(config: Config) -> str:
    """Why the multi-way join the SQL asks for does not run."""
    return (
        f"{config.multi_way}: the joins run as a chain of joins of two: a multi-way join "
        "takes INNER and LEFT regular joins whose inputs all share one join key (Flink's "
        "too)"
    )


def _result_columns(stage: Config, number: int) -> tuple[Column, ...]:
    """The columns of a join's result as the `number`-th join (from 2) takes it."""
    left = stage.left.schema or ()
    right = stage.right.schema or () if join_spec(stage).projects_right else ()
    names = chained_names([c.name for c in left], [c.name for c in right], number)
    return tuple(replace(c, name=n) for c, n in zip((*left, *right), names, strict=True))


def normalized(source: InputConfig, join: JoinConfig, layout: StateLayout = NEW_LAYOUT) -> bool:
    """Whether an input's changelog is rebuilt per primary key (`state.spark.normalizer`): upsert
    inputs, and Debezium inputs that declare a key (without one, Flink takes a Debezium input's
    changes as they come, the joins then keep its rows as a multiset, and so do we); but not
    the versioned table of a temporal join, whose changes are versions as they come
    (`state.joins.temporal_join`), unless a state TTL expires what a normalizer holds."""
    if source.format != "upsert" and not (
        source.format in CHANGELOG_FORMATS and source.primary_key
    ):
        return False
    versioned = join.type in TEMPORAL_TYPES and source.side != "left"  # a later join's: input3…
    return not versioned or layout.versions_normalized or join.state_ttl_ms > 0


def produces_updates(config: Config) -> bool:
    """Whether the job's result changelog can hold more than inserts."""
    if config.chain:
        return produces_updates(join_stages(config)[-1])
    if config.join.type == WINDOW:
        return False  # each window's result is emitted once, when it fires
    if config.join.type == "interval":
        # outer rows are emitted once, padded, when nothing can match them any more; fired
        # early, the padded row is corrected by a later match
        return config.join.early_fire_ms is not None and config.join.kind != "inner"
    if config.join.type in (*TEMPORAL_TYPES, LOOKUP):
        return config.left.format not in INSERT_ONLY_FORMATS  # each probe change keeps its kind
    inputs_update = any(s.format not in INSERT_ONLY_FORMATS for s in (config.left, config.right))
    return inputs_update or config.join.kind != "inner"


def output_columns(config: Config, spec: JoinSpec) -> dict[str, str | None]:
    """The output's column names, each with the joined column (`L_<col>` / `R_<col>`) it is,
    or None if it is computed."""
    if config.join.select:
        return selected_columns(config.join.select)
    names = [side_column(0, c) for c in spec.left.fields]
    names += [side_column(1, c) for c in spec.right.fields] if spec.projects_right else []
    return {name: name for name in names}


def zoned_columns(config: Config) -> frozenset[str]:
    """The output's TIMESTAMP_LTZ columns: an input's as it is, or a CAST to it in the select
    list. Flink's JSON writes such an instant with a `Z` (`2024-01-31 12:00:00.5Z`), a
    TIMESTAMP without."""
    config = join_stages(config)[-1]  # the job's last join gives the output
    inputs = (config.left, config.right)
    zoned = {
        side_column(side, c.name)
        for side, source in enumerate(inputs)
        for c in source.schema or ()
        if c.zoned
    }
    if config.join.type == WINDOW:  # a window's time has its rowtime's type, its bounds not
        zoned |= {
            side_column(side, WINDOW_COLUMNS[2])
            for side, source in enumerate(inputs)
            if side_column(side, source.time) in zoned
        }
    if config.join.select:
        return zoned_selected(config.join.select, zoned)
    return frozenset(output_columns(config, join_spec(config))) & zoned


def upsert_materialized(config: Config) -> bool:
    """Whether an upsert output goes through the sink upsert materializer
    (`state.spark.upsert`), as Flink decides it: when the join's result updates and one
    output key's changes can come from more than one join key, so from tasks that Kafka does
    not order. They cannot when `OUTPUT_KEY` holds the whole join key, as columns of a side
    that the join never pads with NULL; nor when it holds the primary key of an insert-only
    side that joins at most one row of the other (whose primary key lies in the join key): such
    a row never moves to another join key, and it is the key of all its changes (Flink's upsert
    key of the join, which a sink keyed by it needs no materializer for)."""
    config = join_stages(config)[-1]  # the job's last join gives the output
    if config.output.encoding != "upsert" or not produces_updates(config):
        return False
    spec = join_spec(config)
    columns = output_columns(config, spec)
    held = {columns.get(name) for name in config.output.key}
    left_whole = spec.kind in ("inner", "left", "semi", "anti")
    right_whole = spec.kind in ("inner", "right")
    holds_join_key = all(
        (left_whole and side_column(0, a) in held) or (right_whole and side_column(1, b) in held)
        for a, b in spec.equi_keys
    )
    return not (holds_join_key or _keyed_by_a_fixed_row(config, spec, held))


def _keyed_by_a_fixed_row(config: Config, spec: JoinSpec, held: set[str | None]) -> bool:
    """Whether the output key holds the primary key of an insert-only input that joins at most
    one row of the other (`upsert_materialized`)."""
    left_keys = {a for a, _ in spec.equi_keys}
    right_keys = {b for _, b in spec.equi_keys}
    semi = spec.kind in ("semi", "anti")  # left rows only, whatever matches them
    left = (
        config.left.format in INSERT_ONLY_FORMATS
        and bool(config.left.primary_key)
        and all(side_column(0, c) in held for c in config.left.primary_key)
        and (
            semi or (bool(config.right.primary_key) and set(config.right.primary_key) <= right_keys)
        )
    )
    right = (
        not semi
        and config.right.format in INSERT_ONLY_FORMATS
        and bool(config.right.primary_key)
        and all(side_column(1, c) in held for c in config.right.primary_key)
        and bool(config.left.primary_key)
        and set(config.left.primary_key) <= left_keys
    )
    return left or right


def _interval_errors(config: Config) -> Iterator[ConfigError]:
    """An interval join takes insert-only inputs and one notion of time for both."""
    if config.join.kind not in OUTER_KINDS:
        yield ConfigError(
            "JOIN_KIND", "inner|left|right|full for an interval join", config.join.kind
        )
    for source in (config.left, config.right):
        if source.format == JOINED:
            yield ConfigError(
                "LEFT_FORMAT",
                "an insert-only left: an interval join cannot take "
                "the updates and deletes of the changelog the joins before it "
                "give (as Flink)",
                "a changelog",
            )
        elif source.format not in INSERT_ONLY_FORMATS:
            yield _changelog_refused(source, "an interval join")
    if (config.left.time == PROCTIME) != (config.right.time == PROCTIME):
        same = "proctime" if config.left.time == PROCTIME else "an event time"
        yield ConfigError(
            "RIGHT_TIME",
            f"{same} like LEFT_TIME: an interval join runs in "
            "event time or in processing time, on both sides",
            config.right.time,
        )


def _changelog_refused(source: InputConfig, join: str) -> ConfigError:
    """A changelog input of a join that takes inserts only."""
    return ConfigError(
        f"{source.side.upper()}_FORMAT",
        "an insert-only format (" + "|".join(INSERT_ONLY_FORMATS) + f"): {join} cannot take "
        "the updates and deletes of a changelog input",
        source.format,
    )


def _window_errors(config: Config) -> Iterator[ConfigError]:
    """A window join takes insert-only inputs in event time, and its windows."""
    if config.join.window is None:
        yield ConfigError("JOIN_WINDOW", "the windows of a window join, like TUMBLE(10s)")
    for source in (config.left, config.right):
        if source.time == PROCTIME:
            yield ConfigError(
                f"{source.side.upper()}_TIME",
                "an event-time column: a window join runs in event time (as Flink's)",
                source.time,
            )
        if source.format not in INSERT_ONLY_FORMATS:
            yield _changelog_refused(source, "a window join")
    for source, groups in zip((config.left, config.right), config.join.window_groups, strict=True):
        columns = [c.name for c in source.schema or ()]
        if groups is not None and not set(groups) <= set(columns):
            yield ConfigError(
                f"{source.side.upper()}_WINDOW_GROUP_BY",
                f"columns of {source.side.upper()}_SCHEMA",
                ",".join(groups),
            )


def _temporal_errors(config: Config) -> Iterator[ConfigError]:
    """A probe side of any format (a changelog's changes join with their kinds, as Flink's); a
    build side with a primary key, versioned by event time (`temporal`), or an append-only
    history (`temporal-function`)."""
    kind, right = config.join.type, config.right
    if config.join.kind not in ("inner", "left"):
        yield ConfigError("JOIN_KIND", "inner|left for a temporal join", config.join.kind)
    if not right.primary_key:
        yield ConfigError(
            "RIGHT_PRIMARY_KEY", f"the primary key of the table a {kind} join looks up versions of"
        )
    if kind == "temporal" and right.format not in CHANGELOG_FORMATS:
        yield ConfigError(
            "RIGHT_FORMAT",
            "a changelog format ("
            + "|".join(CHANGELOG_FORMATS)
            + ") for the versioned table; an append-only history is "
            "JOIN_TYPE=temporal-function",
            right.format,
        )
    if kind == "temporal-function" and right.format not in INSERT_ONLY_FORMATS:
        yield ConfigError(
            "RIGHT_FORMAT",
            "an append-only format ("
            + "|".join(INSERT_ONLY_FORMATS)
            + ") for a temporal table function's history",
            right.format,
        )
    event_time = kind == "temporal" or (
        kind == "temporal-function" and config.left.time != PROCTIME
    )
    for source in (config.left, right) if event_time else ():
        if source.time == PROCTIME:
            yield ConfigError(
                f"{source.side.upper()}_TIME",
                f"an event time (a column, "
                f"kafka_timestamp or source_ts_ms) for a {kind} join as of the "
                "probe row's event time",
                source.time,
            )


def _input_errors(config: Config, source: InputConfig) -> Iterator[ConfigError]:
    prefix = source.side.upper()
    if not source.schema:
        yield ConfigError(f"{prefix}_SCHEMA", "the input's columns, needed to join it")
    if source.format in AVRO_FORMATS and not config.schema_registry_url:
        yield ConfigError(
            "SCHEMA_REGISTRY_URL", f"the registry's URL, for {prefix}_FORMAT={source.format}"
        )
    if source.format == "upsert" and not source.primary_key:
        yield ConfigError(
            f"{prefix}_PRIMARY_KEY",
            "the primary key of an upsert input: "
            "its record key, by which its changelog is normalized",
        )


def _lookup_errors(config: Config) -> Iterator[ConfigError]:
    if config.join.kind not in ("inner", "left"):
        yield ConfigError(
            "JOIN_KIND",
            "inner or left, for JOIN_TYPE=lookup (as Flink's lookup join)",
            config.join.kind,
        )
    if config.left.format not in (*INSERT_ONLY_FORMATS, JOINED):
        yield ConfigError(
            "LEFT_FORMAT",
            "json or avro-confluent: the lookup join takes an append-only left input",
            config.left.format,
        )
    if not config.left.topic and config.lookup.on_error == "dead-letter":  # type: ignore[union-attr]
        yield ConfigError(
            "LOOKUP_ON_ERROR",
            "fail: a lookup join after another join has no Kafka record of its own to dead-letter",
            "dead-letter",
        )
    spec = join_spec(config)
    assert isinstance(spec, LookupJoinSpec)
    try:
        keyed = bool(spec.keys)
    except ConditionError:
        return  # told by the condition's own check
    if not keyed:
        yield ConfigError(
            "JOIN_ON",
            "at least one equality between the table's column and an L column or an expression "
            "of L's columns, like L.id = R.id",
            config.join.on,
        )


def _typed_columns(config: Config) -> Columns:
    """Each input's columns with their types, by the alias conditions and select lists use (a
    window join's rows with their windows' columns)."""
    windowed = WINDOW_TYPES if config.join.type == WINDOW else {}
    return {
        alias: {c.name: c for c in source.schema or ()} | windowed
        for alias, source in (("L", config.left), ("R", config.right))
    }


def _condition_errors(config: Config) -> Iterator[ConfigError]:
    """The condition over the inputs' columns: names, a boolean, like compared with like."""
    try:
        spec = join_spec(config)
        spec.operator()
    except ConditionError as err:
        yield ConfigError(
            "JOIN_ON", f"a condition over the inputs' columns ({err})", config.join.on
        )
        return
    problem = condition_problem(parse_condition(config.join.on or ""), _typed_columns(config))
    if problem:
        yield ConfigError("JOIN_ON", f"a condition Flink accepts ({problem})", config.join.on)


def _where_errors(config: Config, visible: dict[str, tuple[str, ...]]) -> Iterator[ConfigError]:
    """`JOIN_WHERE` over the joined rows: their columns, a boolean, like compared with like."""
    where = config.join.where or ""
    typed = _typed_columns(config)
    types = {f"{alias}_{name}": c.spark_type for alias in typed for name, c in typed[alias].items()}
    try:
        where_predicate(where, visible, types)
    except ConditionError as err:
        yield ConfigError("JOIN_WHERE", f"a condition over the joined rows ({err})", where)
        return
    problem = condition_problem(parse_condition(where), typed)
    if problem:
        yield ConfigError("JOIN_WHERE", f"a condition Flink accepts ({problem})", where)


def _output_errors(config: Config) -> Iterator[ConfigError]:
    spec = join_spec(config)
    visible = {"L": spec.left.fields, "R": spec.right.fields if spec.projects_right else ()}
    if config.join.where:
        yield from _where_errors(config, visible)
    if config.join.select:
        try:
            select_expressions(config.join.select, visible)
        except ConditionError as err:
            yield ConfigError(
                "JOIN_SELECT",
                f"a select list over the output's columns ({err})",
                config.join.select,
            )
            return
        problem = function_problem(parse_select(config.join.select), _typed_columns(config))
        if problem:
            yield ConfigError(
                "JOIN_SELECT", f"a select list Flink accepts ({problem})", config.join.select
            )
            return
    if config.output.schema:
        yield from _declared_errors(config)
    columns = output_columns(config, spec)
    if any(name not in columns for name in config.output.key):
        yield ConfigError(
            "OUTPUT_KEY",
            f"columns of the output ({', '.join(columns)})",
            ",".join(config.output.key),
        )
    if config.output.encoding == "append" and produces_updates(config):
        yield ConfigError(
            "OUTPUT_ENCODING",
            f"retract, upsert or debezium-json: a {config.join.kind} join over these inputs "
            "produces updates and deletes, which an append-only output cannot carry",
            "append",
        )


def _declared_errors(config: Config) -> Iterator[ConfigError]:
    """The select list against the output's declared columns (`OUTPUT_SCHEMA`)."""
    declared = config.output.schema or ()
    written = ", ".join(f"{c.name} {c.declared}" for c in declared)
    if not config.join.select:
        yield ConfigError("OUTPUT_SCHEMA", "unset, or set with JOIN_SELECT", written)
        return
    problem = declared_problem(config.join.select, declared, _typed_columns(config))
    if problem:
        yield ConfigError("OUTPUT_SCHEMA", f"types the select list is cast to ({problem})", written)


def with_declared_output(config: Config) -> Config:
    """`config` (its plan checked) with its select list cast to the output's declared types."""
    if not config.output.schema or not config.join.select:
        return config
    stage = join_stages(config)[-1]
    select = declared_select(config.join.select, config.output.schema, _typed_columns(stage))
    return replace(config, join=replace(config.join, select=select))


def plan_errors(config: Config) -> list[ConfigError]:
    """Every reason, each naming its variable (as its SQL line where SQL set it), why the
    service cannot run this job's joins."""
    stages = join_stages(config)
    return [
        traced(error, stage.sql_origin)
        for stage in stages
        for error in _join_errors(stage, output=stage is stages[-1])
    ]


def _join_errors(config: Config, output: bool) -> list[ConfigError]:
    """Why the service cannot run this join of two; with `output`, its result as the output."""
    join = config.join
    if join.type == FORWARD:
        return [
            ConfigError(name, "no condition: JOIN_TYPE=forward joins nothing", text)
            for name, text in (("JOIN_ON", join.on), ("JOIN_WHERE", join.where))
            if text
        ]
    if not join.on:
        return [
            ConfigError(
                "JOIN_ON",
                "a join condition over L and R like 'L.id = R.id' (to "
                "forward both inputs unjoined, set JOIN_TYPE=forward)",
            )
        ]
    errors = []
    if join.type == "interval":
        errors += _interval_errors(config)
    if join.type in TEMPORAL_TYPES:
        errors += _temporal_errors(config)
    if join.type == WINDOW:
        errors += _window_errors(config)
    elif join.window is not None:
        errors.append(
            ConfigError("JOIN_WINDOW", "unset: windows are a window join's", str(join.window))
        )
    for side, groups in zip(("LEFT", "RIGHT"), join.window_groups, strict=True):
        if groups is not None and join.type != WINDOW:
            errors.append(
                ConfigError(
                    f"{side}_WINDOW_GROUP_BY",
                    "unset: a window aggregate is a window join's input",
                    ",".join(groups),
                )
            )
    if join.state_ttl_ms and join.type != "regular":
        errors.append(
            ConfigError(
                "STATE_TTL",
                f"0 or unset: a {join.type} join's state is bounded by time (its "
                "watermark or the table's versions), not by retention",
                f"{join.state_ttl_ms}ms",
            )
        )
    if join.early_fire_ms is not None and (join.type != "interval" or join.early_fire_ms <= 0):
        errors.append(
            ConfigError(
                "JOIN_EARLY_FIRE_DELAY",
                "unset, or a delay above 0 for an interval join (early results of its outer rows)",
                f"{join.early_fire_ms}ms",
            )
        )
    for side, ttl in zip(("LEFT", "RIGHT"), join.input_ttls_ms, strict=True):
        if ttl is not None and join.type != "regular":
            errors.append(
                ConfigError(
                    f"{side}_STATE_TTL",
                    f"unset: an input's own retention is a regular join's, not the {join.type} "
                    "join's",
                    f"{ttl}ms",
                )
            )
    if join.type == LOOKUP:
        errors += _lookup_errors(config)
    for source in (config.left, config.right) if join.type != LOOKUP else (config.left,):
        errors += _input_errors(config, source)
    if config.output.format == "avro-confluent" and not config.schema_registry_url:
        errors.append(
            ConfigError(
                "SCHEMA_REGISTRY_URL", "the registry's URL, for OUTPUT_FORMAT=avro-confluent"
            )
        )
    if (
        config.left.schema
        and config.right.schema
        and not any(e.variable == "JOIN_KIND" for e in errors)
    ):
        condition = list(_condition_errors(config))
        errors += condition or (list(_output_errors(config)) if output else [])
    return errors


def check_plan(config: Config) -> None:
    """Raise ConfigError (ConfigErrors: several), naming each variable, for a job this
    service cannot run (told as the SQL's line for a variable `STREAMJOIN_SQL` set)."""
    raise_all(plan_errors(config))
