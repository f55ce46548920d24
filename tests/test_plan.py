"""Start-up checks of the join as a whole: what combination of variables is refused, and why."""

from __future__ import annotations

import pytest

from app.config import ConfigError, load_config
from app.plan import check_plan

JOIN = {
    "KAFKA_BOOTSTRAP_SERVERS": "broker:9092",
    "LEFT_TOPIC": "orders",
    "RIGHT_TOPIC": "products",
    "OUTPUT_TOPIC": "out",
    "CHECKPOINT_LOCATION": "/tmp/ck",
    "LEFT_SCHEMA": "order_id STRING, product_id STRING",
    "LEFT_PRIMARY_KEY": "order_id",
    "RIGHT_SCHEMA": "product_id STRING, price DECIMAL(10,2)",
    "RIGHT_PRIMARY_KEY": "product_id",
    "RIGHT_FORMAT": "debezium-json",
    "JOIN_ON": "L.product_id = R.product_id",
}


def refusal(**changes: str | None) -> str:
    env = {k: v for k, v in {**JOIN, **changes}.items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        check_plan(load_config(env))
    return str(caught.value)


def test_a_complete_join_is_accepted() -> None:
    check_plan(load_config(JOIN))
    check_plan(load_config({**JOIN, "RIGHT_FORMAT": "avro-confluent",
                            "SCHEMA_REGISTRY_URL": "http://registry:8081"}))  # fmt: skip


def test_append_is_refused_for_a_join_that_updates() -> None:
    message = refusal(OUTPUT_ENCODING="append")
    assert message.startswith("OUTPUT_ENCODING: expected retract, upsert or debezium-json")
    assert "produces updates and deletes" in message
    # An inner join of two insert-only inputs can be append-only.
    check_plan(load_config({**JOIN, "RIGHT_FORMAT": "json", "OUTPUT_ENCODING": "append"}))


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"LEFT_SCHEMA": None, "LEFT_PRIMARY_KEY": None}, "LEFT_SCHEMA"),
        ({"RIGHT_PRIMARY_KEY": None}, "RIGHT_PRIMARY_KEY"),
        ({"RIGHT_FORMAT": "avro-confluent"}, "SCHEMA_REGISTRY_URL"),
        ({"JOIN_ON": "L.product_id = R.sku"}, "JOIN_ON"),
        ({"JOIN_TYPE": "interval"}, "JOIN_TYPE"),
        ({"OUTPUT_FORMAT": "avro-confluent"}, "SCHEMA_REGISTRY_URL"),
    ],
)
def test_an_unusable_combination_names_its_variable(changes: dict, variable: str) -> None:
    assert refusal(**changes).startswith(f"{variable}: expected ")
