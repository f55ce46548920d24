"""An input's columns changed between two runs on one checkpoint: how the state's rows are read,
what is refused."""

from __future__ import annotations

import pytest

from app.config.env import load_config
from app.plan.planner import query_plan
from app.run.evolution import column_changes, evolved, grown_record, schema_text
from app.run.pipeline import state_meaning
from app.run.preflight import StartupError
from tests.test_plan import JOIN as PLAN_JOIN

JOIN = PLAN_JOIN | {
    "RIGHT_SCHEMA": "product_id STRING, name STRING, price DECIMAL(10,2)",
    "JOIN_SELECT": "L.order_id, R.name",
}
RECORDED = state_meaning(query_plan(load_config(JOIN)))


def test_columns_added_go_after_the_recorded_ones_and_dropped_ones_stay() -> None:
    """`category` added in the middle of the schema goes at the end of the state's layout,
    which the rows held from before lack (the oldest rows hold 3 columns); `price`, dropped,
    stays in it, NULL from now on. The record then says so, and the same configuration reads
    that record the same way."""
    changed = load_config(
        JOIN | {"RIGHT_SCHEMA": "product_id STRING, category STRING, name STRING"}
    )
    held = evolved(changed, RECORDED)
    assert [c.name for c in held.right.schema or ()] == ["product_id", "name", "price", "category"]
    assert held.right.held_columns == 3 and held.left == changed.left
    grown = grown_record(held)
    assert grown == {
        "RIGHT_SCHEMA": "product_id string, name string, price decimal(10,2), category string",
        "RIGHT_SCHEMA's oldest rows": "3",
    }
    meaning = state_meaning(query_plan(held))
    assert meaning == RECORDED | grown
    assert column_changes(changed, held) == [
        "RIGHT_SCHEMA: column category added: NULL in the rows held from before",
        "RIGHT_SCHEMA: column price dropped: kept in the state's rows, NULL from now on",
    ]
    # the next restart, on the grown record: back to the first schema, or one more column
    back = evolved(load_config(JOIN), meaning).right
    assert (schema_text(back.schema), back.held_columns) == (grown["RIGHT_SCHEMA"], 3)
    more = evolved(
        load_config(JOIN | {"RIGHT_SCHEMA": JOIN["RIGHT_SCHEMA"] + ", size INT"}), meaning
    )
    assert [c.name for c in more.right.schema or ()][-2:] == ["category", "size"]
    assert more.right.held_columns == 3


def test_a_query_that_reads_an_added_column_resumes() -> None:
    env = JOIN | {
        "JOIN_SELECT": "L.order_id, R.category",
        "RIGHT_SCHEMA": JOIN["RIGHT_SCHEMA"] + ", category STRING",
    }
    held = evolved(load_config(env), RECORDED)
    assert held.right.schema == load_config(env).right.schema
    assert held.right.held_columns == 3


def test_the_same_columns_or_one_changed_in_type_leave_the_configuration_as_it_is() -> None:
    same = load_config(JOIN)
    assert evolved(same, RECORDED) is same
    typed = load_config(JOIN | {"RIGHT_SCHEMA": "product_id STRING, name INT, price DECIMAL(10,2)"})
    assert evolved(typed, RECORDED) is typed  # another type: the record's own check refuses it


def test_every_column_written_resumes_only_with_the_columns_in_the_schemas_order() -> None:
    """With no JOIN_SELECT the output is the layout's columns: a column added at the end
    resumes; one dropped, or added before others, would write them in another order than the
    new job: refused, naming the order the rows hold."""
    every = {k: v for k, v in JOIN.items() if k != "JOIN_SELECT"}
    recorded = state_meaning(query_plan(load_config(every)))
    appended = every | {"LEFT_SCHEMA": "order_id STRING, product_id STRING, qty INT"}
    assert evolved(load_config(appended), recorded).left.held_columns == 2
    reordered = every | {"LEFT_SCHEMA": "order_id STRING, qty INT, product_id STRING"}
    with pytest.raises(StartupError) as refused:
        evolved(load_config(reordered), recorded)
    assert str(refused.value).startswith(
        "LEFT_SCHEMA: order_id string, qty int, product_id string, but the output writes every "
        "column (no JOIN_SELECT) and the rows the checkpoint at CHECKPOINT_LOCATION holds have "
        "them as order_id, product_id, qty: name the output's columns in JOIN_SELECT, or replay"
    )


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
