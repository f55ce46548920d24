"""An input's columns changed on a checkpoint: which changes the state's rows still mean.

The state holds each input's rows as they were read, their columns in the order the
checkpoint's record names (`LEFT_SCHEMA` in `app.run.checkpoint`'s record). A restart whose
schema adds a column or drops one resumes where the query reads neither, with the rows laid out
as recorded: a dropped column stays in them, read as NULL from the records that lack it; an
added one is not read. The output, being the select list's, is what the new job writes. A query
that reads an added column, or writes every column (no `JOIN_SELECT`), would need the rows the
state holds widened: it is refused, naming the column and the replay that rebuilds the state
(`docs/operations.md`). A column of another type is refused by the record's own check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from app.config.env import Config, InputConfig
from app.plan.planner import plan_errors
from app.run.preflight import StartupError
from serdes.records.schema import Column, parse_schema

REPLAY = "or replay the topics into a new CHECKPOINT_LOCATION (docs/operations.md, 'Replay')"


def schema_text(columns: tuple[Column, ...] | None) -> str:
    """An input's columns as the checkpoint's record writes them."""
    return ", ".join(f"{c.name} {c.spark_type.simpleString()}" for c in columns or ())


def _recorded(text: str) -> list[tuple[str, str]]:
    """The recorded columns: (name, Spark's type), in their order."""
    return [(name, kind) for name, _, kind in (part.partition(" ") for part in text.split(", "))]


def _as_recorded(source: InputConfig, recorded: str) -> tuple[Column, ...] | None:
    """The input's columns in the state's layout, if only columns were added or dropped
    (None: the same columns, or one of another type: the record's check refuses that)."""
    if schema_text(source.schema) == recorded:
        return None
    now = {c.name: c for c in source.schema or ()}
    columns = []
    for name, kind in _recorded(recorded):
        column = now.get(name)
        if column is not None and column.spark_type.simpleString() != kind:
            return None
        columns.append(column or parse_schema(f'"{name}" {kind}')[0])
    return tuple(columns)


def column_changes(asked: Config, held: Config) -> list[str]:
    """What a job reads otherwise than `asked` says, as `held` (`evolved`) reads it: each
    column added (not read) or dropped (kept in the rows, NULL from now on)."""
    said = []
    for now, kept in ((asked.left, held.left), (asked.right, held.right)):
        names = {c.name for c in now.schema or ()}
        held_names = {c.name for c in kept.schema or ()}
        prefix = now.side.upper()
        said += [f"{prefix}_SCHEMA: column {name} added" for name in sorted(names - held_names)]
        said += [f"{prefix}_SCHEMA: column {name} dropped" for name in sorted(held_names - names)]
    return said


def evolved(config: Config, recorded: Mapping[str, Any]) -> Config:
    """`config` over the state of a checkpoint whose `recorded` record names the inputs'
    columns: each input read with the columns its state's rows hold where only columns the
    query does not read were added or dropped; StartupError where the query reads one."""
    if config.chain:  # a chain's rows concatenate its tables' columns: not widened here
        return config
    sides: dict[str, InputConfig] = {}
    for source in (config.left, config.right):
        text = recorded.get(f"{source.side.upper()}_SCHEMA")
        columns = _as_recorded(source, text) if isinstance(text, str) and text else None
        if columns is not None:
            sides[source.side] = replace(source, schema=columns)
    if not sides:
        return config
    held_config = replace(config, **sides)
    changes = column_changes(config, held_config)
    if config.join.select is None:
        raise StartupError(
            f"{changes[0]}, but the output writes every column (no JOIN_SELECT) and the rows "
            "the checkpoint at CHECKPOINT_LOCATION holds have the recorded ones: name the "
            f"output's columns in JOIN_SELECT, {REPLAY}"
        )
    errors = plan_errors(held_config)
    if errors:  # the new configuration was valid: what it reads that the rows lack is added
        added = next(change for change in changes if change.endswith(" added"))
        raise StartupError(
            f"{added}, and {errors[0].variable} reads it, but the rows the checkpoint at "
            f"CHECKPOINT_LOCATION holds lack it: set it back, {REPLAY}"
        )
    return held_config
