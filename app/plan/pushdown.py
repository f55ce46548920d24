"""Filters pushed below a join, as Flink's planner pushes a WHERE: the conjuncts of an inner
regular join's condition over one input's columns alone are tested as its records are decoded,
so the rows that cannot join are never shuffled nor kept in the join's state.

Only where that cannot change a result: an inner join (an outer one must still pad the rows of
its preserved side), and an insert-only input (a changelog keyed by its primary key is
normalized first: an update whose new row fails the filter must still retract the old one).
"""

from __future__ import annotations

from app.config.env import Config, InputConfig, JoinConfig
from app.config.registry import INSERT_ONLY_FORMATS
from state.expr.condition import FLINK_LEXICON, one_side_filter, parse_condition, split_condition


def pushed_filter(config: Config, source: InputConfig) -> str | None:
    """The condition the records of `source` are kept by (its columns qualified `L.` or `R.`,
    as the join's condition names them); None: every record."""
    if source.format not in INSERT_ONLY_FORMATS:
        return None
    joins: list[tuple[JoinConfig, str]] = []
    if source == config.left:
        joins.append((config.join, "L"))
    if source == config.right:
        joins.append((config.join, "R"))
    joins += [(c.join, "R") for c in config.chain if c.input == source]
    found = [
        one_side_filter(split_condition(parse_condition(join.on)).residual, alias)
        for join, alias in joins
        if join.type == "regular" and join.kind == "inner"
    ]
    if len(found) != 1 or found[0] is None:
        return None
    # read over the one row: `L.x` and `R.x` alike name its column x
    return found[0].sql(FLINK_LEXICON)
