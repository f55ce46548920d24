"""Where a new job starts, as Flink's Kafka connector starts it: where its group
(`properties.group.id`) committed (`scan.startup.mode` = `group-offsets`, Flink's default where a
group is named), at named offsets (`specific-offsets`) or at a time (`timestamp`); and the offsets
it reads are committed back to the group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

from serdes.kafka.group_offsets import GroupCommitter, committed
from tests.kafka_io import create_topics, join_topics, read_topic, unique
from tests.service import run_to_exit
from tests.test_join_service import join_env, produce_events


def progress(topic: str, ends: dict[str, int]) -> dict:
    """A progress report's sources as Spark gives them, a waking source's start key beside."""
    offsets = {topic: ends, "started at": {"ns": 1}}
    return {"sources": [{"endOffset": json.dumps(offsets)}]}


def test_a_batch_s_offsets_are_committed_to_the_group_once_each(kafka: str) -> None:
    topic, group = unique("grouped"), unique("group")
    create_topics(kafka, [topic], partitions=2)
    config = {"bootstrap.servers": kafka}
    assert committed(config, group, topic, [0, 1]) == {0: None, 1: None}
    committer = GroupCommitter(config, group, {topic})
    committer.commit_progress(progress(topic, {"0": 3, "1": 5}))
    assert committed(config, group, topic, [0, 1]) == {0: 3, 1: 5}
    committer.commit_progress(progress(topic, {"0": 4, "1": 5}))
    committer.commit_progress(None)  # before the first batch
    committer.close()
    assert committed(config, group, topic, [0, 1]) == {0: 4, 1: 5}


@pytest.mark.spark
def test_a_new_job_starts_where_its_group_committed_and_commits_what_it_read(
    kafka: str, tmp_path: Path
) -> None:
    """The orders' group committed offset 2 of 5: the job joins the last 3 orders only; the
    products, which the group never committed, start where KAFKA_AUTO_OFFSET_RESET says. After
    the run the group has committed the end of both topics. Without a reset, the same start is
    refused in one line naming the topic and its partitions, as Flink's job fails."""
    orders, products, out = join_topics(kafka)
    group = unique("orders-group")
    product = {"product_id": "p1", "name": "n1", "price": "1.50"}
    produce_events(kafka, products, [{"before": None, "after": product, "op": "c"}], "product_id")
    produce_events(
        kafka,
        orders,
        [
            {
                "before": None,
                "after": {"order_id": f"o{i}", "product_id": "p1", "qty": i},
                "op": "c",
            }
            for i in range(5)
        ],
        "order_id",
    )
    GroupCommitter({"bootstrap.servers": kafka}, group, {orders}).commit_progress(
        progress(orders, {"0": 2})
    )
    env = join_env(kafka, orders, products, out, tmp_path / "ck") | {
        "TRIGGER_INTERVAL": "available-now",
        "JOIN_KIND": "inner",
        "JOIN_SELECT": "L.order_id, R.name",
        "STARTING_OFFSETS": "group-offsets",
        "KAFKA_GROUP_ID": group,
    }
    refused = run_to_exit(env, timeout_s=180)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.splitlines()[-1] == (
        f"streamjoin: KAFKA_AUTO_OFFSET_RESET: none, but consumer group {group!r} "
        f"(KAFKA_GROUP_ID) has committed no offset of {products} partition 0 to start it from: "
        "set earliest or latest (Flink's job fails here)"
    )
    done = run_to_exit(env | {"KAFKA_AUTO_OFFSET_RESET": "earliest"}, timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]
    joined = sorted(json.loads(r.value)["order_id"] for r in read_topic(kafka, out))
    assert joined == ["o2", "o3", "o4"]
    config = {"bootstrap.servers": kafka}
    assert committed(config, group, orders, [0]) == {0: 5}
    assert committed(config, group, products, [0]) == {0: 1}


@pytest.mark.spark
def test_a_new_job_starts_at_named_offsets_and_at_a_time_as_flinks_startup_modes(
    kafka: str, tmp_path: Path
) -> None:
    """Orders over four partitions, `specific-offsets` as Flink starts them: partition 0 named
    at offset 2, partition 1 past its end (at its end), the others at the group's committed
    offset (3 of partition 2) or, never committed, at the earliest (partition 3), whatever
    KAFKA_AUTO_OFFSET_RESET says. Products from a time, as `timestamp`: the product created
    before it is never read, so its orders find nothing in the inner join."""
    orders, products, out = join_topics(kafka, partitions=4)
    group, before = unique("orders-group"), 1_700_000_000_000
    producer = Producer({"bootstrap.servers": kafka})
    for late, product in enumerate(["p1", "p2"]):
        event = {"before": None, "after": {"product_id": product, "name": "n"}, "op": "c"}
        producer.produce(
            products, json.dumps(event).encode(), partition=0, timestamp=before + late * 10_000
        )
    for p in range(4):
        for i in range(4):
            row = {"order_id": f"o{p}{i}", "product_id": "p2" if i % 2 == 0 else "p1", "qty": i}
            event = {"before": None, "after": row, "op": "c"}
            producer.produce(orders, json.dumps(event).encode(), partition=p)
    assert producer.flush(30) == 0
    GroupCommitter({"bootstrap.servers": kafka}, group, {orders}).commit_progress(
        progress(orders, {"2": 3})
    )
    starts = {
        orders: {"0": 2, "1": 99, "*": "group-offsets"},
        products: f"timestamp:{before + 5_000}",
    }
    env = join_env(kafka, orders, products, out, tmp_path / "ck") | {
        "TRIGGER_INTERVAL": "available-now",
        "JOIN_KIND": "inner",
        "JOIN_SELECT": "L.order_id, R.name",
        "STARTING_OFFSETS": json.dumps(starts),
        "KAFKA_GROUP_ID": group,
    }
    done = run_to_exit(env, timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]
    joined = sorted(json.loads(r.value)["order_id"] for r in read_topic(kafka, out))
    assert joined == ["o02", "o30", "o32"]
