"""Where a new job starts reading each input: `STARTING_OFFSETS` resolved, per topic and
partition, before the query is planned.

`group-offsets` (Flink's `scan.startup.mode` default where `properties.group.id` names a group)
starts a topic where the consumer group (`KAFKA_GROUP_ID`) last committed, and a partition the
group never committed to where `KAFKA_AUTO_OFFSET_RESET` says. With no reset (Flink's `none`)
such a partition is refused at start-up, in one line, where Flink's job fails once running.
Every mode is turned here into the explicit offsets the source takes
(`serdes.kafka.source.KafkaStreamReader`). A checkpoint's offsets win over all of it, as a Flink
job restored from a checkpoint ignores its startup mode.
"""

from __future__ import annotations

import json
from dataclasses import replace

from pyspark.sql import SparkSession

from app.config.env import Config
from app.config.parsers import STARTING_MODES
from app.run.checkpoint import last_batch
from app.run.preflight import StartupError
from serdes.kafka.group_offsets import committed
from serdes.kafka.offsets import PartitionBounds

RESET = {"earliest": -2, "latest": -1}  # the source's explicit offsets for those


def resolved_starts(spark: SparkSession, config: Config, topics: list[str]) -> Config:
    """`config` with each of `topics`' start as explicit offsets where a topic names a mode of
    its own or starts at its group's; as it is otherwise, and for an existing checkpoint."""
    given = config.starting_offsets
    if given in ("earliest", "latest") or last_batch(spark, config.checkpoint_location) is not None:
        return config
    modes = dict.fromkeys(topics, given) if given in STARTING_MODES else json.loads(given)
    client = config.kafka_client_config()
    spec: dict[str, dict[str, int]] = {}
    for topic in topics:
        mode = modes.get(topic, {})
        if isinstance(mode, dict):
            spec[topic] = mode
            continue
        bounds = PartitionBounds(topic, client)
        try:
            first = bounds.starts()
        finally:
            bounds.close()
        if mode in RESET:
            spec[topic] = {str(p): RESET[mode] for p in first}
        else:
            spec[topic] = _group_start(config, client, topic, first)
    return replace(config, starting_offsets=json.dumps(spec))


def _group_start(
    config: Config, client: dict[str, str], topic: str, first: dict[int, int]
) -> dict[str, int]:
    group = config.group_id or ""
    found = committed(client, group, topic, sorted(first))
    missing = sorted(p for p, o in found.items() if o is None)
    if missing and config.offset_reset == "none":
        raise StartupError(
            f"KAFKA_AUTO_OFFSET_RESET: none, but consumer group {group!r} (KAFKA_GROUP_ID) has "
            f"committed no offset of {topic} partition {', '.join(map(str, missing))} to start "
            "it from: set earliest or latest (Flink's job fails here)"
        )
    # an offset the topic no longer holds starts at its earliest, as a consumer's reset would
    return {
        str(p): RESET[config.offset_reset] if o is None else max(o, first[p])
        for p, o in found.items()
    }
