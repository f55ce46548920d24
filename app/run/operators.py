"""The stateful operators a configuration's query runs, in the order Spark numbers them: what
the state inspection and the rescale read a checkpoint's operators as, and what tells whether
the job runs on the wall clock."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import StructType

from app.config.env import Config, InputConfig, JoinConfig
from app.config.registry import FORWARD
from app.plan.planner import (
    NEW_LAYOUT,
    QueryPlan,
    StateLayout,
    input_widening,
    join_label,
    normalized,
    query_plan,
)
from app.run.inputs import row_type
from app.run.joins import join_operator
from app.run.windows import windowed_type
from serdes.kafka.arrivals import IDLE_WAIT_MS
from state.spark.frame import StatefulOperator
from state.spark.interval import IntervalJoinOperator
from state.spark.normalizer import NormalizeOperator
from state.spark.regular import MultiJoinOperator, RegularJoinOperator
from state.spark.upsert import UpsertMaterializeOperator


@dataclass(frozen=True)
class PlannedOperator:
    """A stateful operator of the query, as `streamjoin state` reads its state: what it is
    (`label`), the operator itself (which decodes its entries), and the input schema of each
    side it holds rows of."""

    label: str
    operator: StatefulOperator
    sides: dict[str, StructType]


def on_wall_clock(config: Config) -> bool:
    """Whether an operator of the job runs on the wall clock (a state TTL, a processing-time
    join): Spark then plans a batch at every trigger, new input or not, so its timers fire."""
    return any(p.operator.clock == "processing" for p in stateful_operators(config))


def idle_wait_ms(config: Config) -> int:
    """How long a back-to-back trigger that found nothing new waits for a record
    (`serdes.kafka.arrivals`). Spark plans a batch at every trigger of a job on the wall clock:
    where only a state TTL puts it there, such a batch only evicts (the joins hide what expired
    themselves), and with no record coming the state only shrinks, so one every half of the
    TTL (1 s to 1 min) will do, at a fraction of the CPU a batch a second costs; where an
    operator's timers run on it (a processing-time interval join's padding), a second, as
    under a one-second trigger."""
    operators = [p.operator for p in stateful_operators(config)]
    retentions = [config.join.state_ttl_ms] + [
        ttl
        for operator in operators
        if isinstance(operator, RegularJoinOperator)
        for ttl in operator.spec.retention_ms
    ]
    ttl = min((ttl for ttl in retentions if ttl > 0), default=0)
    timers = any(
        isinstance(operator, IntervalJoinOperator) and operator.clock == "processing"
        for operator in operators
    )
    if timers or not ttl:
        return IDLE_WAIT_MS
    return min(60_000, max(IDLE_WAIT_MS, ttl // 2))


def stateful_operators(config: Config, layout: StateLayout = NEW_LAYOUT) -> list[PlannedOperator]:
    """The stateful operators the query of `config` runs over state laid out as `layout` says
    (`app.run.builder`), in the order Spark numbers them (its `operatorId`, from the sink down:
    the upsert materializer, then each join before what it reads, its left input's operators
    (the join before it, or a normalizer) before its right input's)."""
    if config.join.type == FORWARD:
        return []
    plan = query_plan(config, layout)
    planned = []
    if plan.materialized:
        planned.append(
            PlannedOperator(
                "upsert",
                UpsertMaterializeOperator(config.join.state_ttl_ms),
                {"output": StructType()},
            )
        )
    if plan.multi_way is None:
        return planned + _join_operators(plan, len(plan.stages))
    sides = {source.side: row_type(source) for source in config.inputs()}
    operator = MultiJoinOperator(plan.multi_way, tuple(sides))
    planned.append(PlannedOperator("join", operator, sides))
    return planned + _normalizers(
        plan, [(s, sides[s.side]) for s in config.inputs()], plan.last.join
    )


def _join_operators(plan: QueryPlan, number: int) -> list[PlannedOperator]:
    """The `number`-th join's operators (`stateful_operators`); a lookup join has none."""
    config, stage = plan.config, plan.stages[number - 1]
    if stage.lookup is not None:  # it keeps no state
        return _join_operators(plan, number - 1) if number > 1 else []
    types = {"left": row_type(stage.left), "right": row_type(stage.right)}
    if stage.join.window is not None:  # its rows hold their windows' columns
        types = {side: windowed_type(row) for side, row in types.items()}
    operator = join_operator(plan.specs[number - 1], number)
    planned = [PlannedOperator(join_label(number), operator, types)]
    if number > 1:
        planned += _join_operators(plan, number - 1)
        inputs = [(config.chain[number - 2].input, types["right"])]
    else:
        inputs = [(config.left, types["left"]), (config.right, types["right"])]
    return planned + _normalizers(plan, inputs, stage.join)


def _normalizers(
    plan: QueryPlan, inputs: list[tuple[InputConfig, StructType]], join: JoinConfig
) -> list[PlannedOperator]:
    """The changelog normalizers of those `inputs` (each with its row type) that `join` needs
    normalized, in the order given."""
    return [
        PlannedOperator(
            "normalizer",
            NormalizeOperator(source.side, plan.config.join.state_ttl_ms, input_widening(source)),
            {source.side: row},
        )
        for source, row in inputs
        if normalized(source, join, plan.layout)
    ]
