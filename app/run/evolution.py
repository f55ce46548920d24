"""An input's columns changed on a checkpoint: how the rows its state holds are read.

The state holds each input's rows as they were read, their columns in the order the
checkpoint's record names (`LEFT_SCHEMA` in `app.run.checkpoint`'s record: the layout). A
restart whose schema adds columns or drops some resumes with the layout grown, never reordered:
a dropped column stays in it, NULL in the records that lack it; an added one goes at its end,
and the rows held from before read it as NULL (`state.columns.Widening`), as they would in a new
job that read those records, which lacked it. The record then names the grown layout and how
many columns its oldest rows hold (`<SIDE>_SCHEMA's oldest rows`), so that a later restart,
whatever its schema, reads every row where it is. The output is the select list's, so it is
what the new job writes; a job with no `JOIN_SELECT` writes every column in the layout's order,
which is refused where that is not the new schema's order. A column of another type is refused
by the record's own check; so is any change of the inputs of a chain of joins, whose rows
concatenate its tables' columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from app.config.env import Config, InputConfig
from app.run.preflight import StartupError
from serdes.records.schema import Column, parse_schema

REPLAY = "or replay the topics into a new CHECKPOINT_LOCATION (docs/operations.md, 'Replay')"


def schema_text(columns: tuple[Column, ...] | None) -> str:
    """An input's columns as the checkpoint's record writes them."""
    return ", ".join(f"{c.name} {c.spark_type.simpleString()}" for c in columns or ())


def oldest_rows(side: str) -> str:
    """The record's name for how many columns the oldest rows of an input's state hold."""
    return f"{side.upper()}_SCHEMA's oldest rows"


def _recorded(text: str) -> list[tuple[str, str]]:
    """The recorded columns: (name, Spark's type), in their order."""
    return [(name, kind) for name, _, kind in (part.partition(" ") for part in text.split(", "))]


def _layout(source: InputConfig, recorded: str) -> tuple[Column, ...] | None:
    """The input's columns in the state's layout: the recorded ones in their order, then those
    added, in the schema's order (None: one of another type, which the record's check refuses)."""
    now = {c.name: c for c in source.schema or ()}
    columns = []
    for name, kind in _recorded(recorded):
        column = now.pop(name, None)
        if column is not None and column.spark_type.simpleString() != kind:
            return None
        columns.append(column or parse_schema(f'"{name}" {kind}')[0])
    return (*columns, *now.values())


def column_changes(asked: Config, held: Config) -> list[str]:
    """How the job reads its state where its inputs' columns are not those `asked` names, as
    `held` (`evolved`) reads them: each column added since its oldest rows, each dropped."""
    said = []
    for now, kept in ((asked.left, held.left), (asked.right, held.right)):
        names = {c.name for c in now.schema or ()}
        layout = [c.name for c in kept.schema or ()]
        prefix = now.side.upper()
        said += [
            f"{prefix}_SCHEMA: column {name} added: NULL in the rows held from before"
            for name in layout[kept.held_columns or len(layout) :]
        ]
        said += [
            f"{prefix}_SCHEMA: column {name} dropped: kept in the state's rows, NULL from now on"
            for name in layout
            if name not in names
        ]
    return said


def evolved(config: Config, recorded: Mapping[str, Any]) -> Config:
    """`config` over the state of a checkpoint whose `recorded` record names the inputs'
    columns: each input read in the state's layout, grown by the columns added; StartupError
    where the output would write every column in another order than the schema's."""
    if config.chain:  # a chain's rows concatenate its tables' columns: not widened here
        return config
    sides: dict[str, InputConfig] = {}
    for source in (config.left, config.right):
        text = recorded.get(f"{source.side.upper()}_SCHEMA")
        if not isinstance(text, str) or not text:
            continue
        layout = _layout(source, text)
        if layout is None:
            continue
        oldest = recorded.get(oldest_rows(source.side))
        held = int(oldest) if oldest is not None else len(_recorded(text))
        if schema_text(layout) != schema_text(source.schema) or held < len(layout):
            sides[source.side] = replace(
                source, schema=layout, held_columns=held if held < len(layout) else None
            )
    if not sides:
        return config
    if config.join.select is None:  # the output's columns are the layout's, in its order
        for source in (config.left, config.right):
            layout = [c.name for c in sides.get(source.side, source).schema or ()]
            if layout != [c.name for c in source.schema or ()]:
                raise StartupError(
                    f"{source.side.upper()}_SCHEMA: {schema_text(source.schema)}, but the "
                    "output writes every column (no JOIN_SELECT) and the rows the checkpoint at "
                    f"CHECKPOINT_LOCATION holds have them as {', '.join(layout)}: name the "
                    f"output's columns in JOIN_SELECT, {REPLAY}"
                )
    return replace(config, **sides)


def grown_record(config: Config) -> dict[str, str]:
    """What the checkpoint's record says from this start of an `evolved` configuration on:
    each grown input's layout and the columns of its oldest rows."""
    return {
        what: value
        for source in config.inputs()
        if source.held_columns is not None
        for what, value in (
            (f"{source.side.upper()}_SCHEMA", schema_text(source.schema)),
            (oldest_rows(source.side), str(source.held_columns)),
        )
    }
