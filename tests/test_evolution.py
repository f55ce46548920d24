"""An input's columns changed between two runs on one checkpoint: what resumes, what is refused."""

from __future__ import annotations

import pytest

from app.config.env import load_config
from app.plan.planner import query_plan
from app.run.evolution import evolved
from app.run.pipeline import state_meaning
from app.run.preflight import StartupError
from tests.test_plan import JOIN as PLAN_JOIN

JOIN = PLAN_JOIN | {
    "RIGHT_SCHEMA": "product_id STRING, name STRING, price DECIMAL(10,2)",
    "JOIN_SELECT": "L.order_id, R.name",
}
RECORDED = state_meaning(query_plan(load_config(JOIN)))


def test_columns_the_query_does_not_read_added_or_dropped_resume_with_the_state_layout() -> None:
    """`price` dropped stays in the rows (NULL from the records that lack it), `category`
    added is not read: the rows keep the recorded layout, so the state means what it meant."""
    changed = load_config(
        JOIN | {"RIGHT_SCHEMA": "product_id STRING, category STRING, name STRING"}
    )
    held = evolved(changed, RECORDED)
    assert [c.name for c in held.right.schema or ()] == ["product_id", "name", "price"]
    assert state_meaning(query_plan(held)) == RECORDED


def test_the_same_columns_in_another_order_or_none_changed_leave_the_configuration_as_it_is() -> (
    None
):
    same = load_config(JOIN)
    assert evolved(same, RECORDED) is same
    typed = load_config(JOIN | {"RIGHT_SCHEMA": "product_id STRING, name INT, price DECIMAL(10,2)"})
    assert evolved(typed, RECORDED) is typed  # another type: the record's own check refuses it


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (
            {
                "JOIN_SELECT": "L.order_id, R.category",
                "RIGHT_SCHEMA": JOIN["RIGHT_SCHEMA"] + ", category STRING",
            },
            "RIGHT_SCHEMA: column category added, and JOIN_SELECT reads it, but the rows the "
            "checkpoint at CHECKPOINT_LOCATION holds lack it: set it back, or replay the topics",
        ),
        (
            {"JOIN_SELECT": None, "LEFT_SCHEMA": "order_id STRING, product_id STRING, qty INT"},
            "LEFT_SCHEMA: column qty added, but the output writes every column (no JOIN_SELECT)",
        ),
    ],
    ids=["read-by-the-select", "every-column-written"],
)
def test_a_column_added_that_the_query_reads_is_refused_naming_it(
    changes: dict[str, str | None], says: str
) -> None:
    env = {k: v for k, v in (JOIN | changes).items() if v is not None}
    with pytest.raises(StartupError) as refused:
        evolved(load_config(env), RECORDED)
    assert str(refused.value).startswith(says)


def test_an_upsert_output_keyed_apart_from_the_join_key_records_its_select_list() -> None:
    """The upsert materializer keeps the rows it wrote: another select list would make every
    retraction of them miss, and the key's record would stand, stale. So its select list is
    part of what the state means (the restart refuses a change); without a materializer, the
    select list is not."""
    upsert = JOIN | {"OUTPUT_ENCODING": "upsert", "OUTPUT_KEY": "name"}
    materialized = state_meaning(query_plan(load_config(upsert)))
    assert materialized["JOIN_SELECT"] == "L.order_id, R.name"
    wider = upsert | {"JOIN_SELECT": "L.order_id,  R.name, R.price"}
    assert (
        state_meaning(query_plan(load_config(wider)))["JOIN_SELECT"] != materialized["JOIN_SELECT"]
    )
    assert "JOIN_SELECT" not in RECORDED
    assert state_meaning(query_plan(load_config(JOIN | {"JOIN_SELECT": "R.name"}))) == RECORDED
