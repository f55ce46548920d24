"""How a lookup join reads its table, as the plan decides it: the query of its keys and columns
with the conditions pushed down, the connection's limits, and whether its left input is
partitioned by the join key."""

from __future__ import annotations

from pyspark.sql.types import DecimalType

from app.config.env import Config
from app.config.registry import INSERT_ONLY_FORMATS
from serdes.postgres.client import TableLookup
from state.joins.lookup_join import LookupJoinSpec


def table_lookup(config: Config, spec: LookupJoinSpec) -> TableLookup:
    lookup = config.lookup
    assert lookup is not None
    keys = tuple(b for _, b in spec.keys)
    declared = {c.name: c.spark_type for c in config.right.schema or ()}
    decimals = tuple(
        (i, kind.precision, kind.scale)
        for i, name in enumerate(spec.right.fields)
        if isinstance(kind := declared.get(name), DecimalType)
    )
    return TableLookup(
        dsn=lookup.url,
        table=lookup.table,
        columns=spec.right.fields,
        key_columns=keys,
        key_types=tuple(lookup.column_types[k] for k in keys),
        pushed=spec.residual.pushed,
        password=lookup.password,
        timeout_s=lookup.timeout_ms / 1000,
        max_retries=lookup.max_retries,
        max_concurrent=lookup.max_concurrent,
        asynchronous=lookup.asynchronous,
        decimals=decimals,
    )


def shuffled(config: Config) -> bool:
    """Whether the left input is partitioned by the join key (`LOOKUP_SHUFFLE`): not a
    changelog, whose changes of a row (-U, +U) may look up other keys, and whose order the
    next join or the sink relies on, which a shuffle would lose."""
    return config.lookup.shuffle and config.left.format in INSERT_ONLY_FORMATS  # type: ignore[union-attr]
