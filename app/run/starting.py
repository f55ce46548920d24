"""Where a new job starts reading each input: `STARTING_OFFSETS` resolved, per topic and
partition, before the query is planned.

`group-offsets` (Flink's `scan.startup.mode` default where `properties.group.id` names a group)
starts a topic where the consumer group (`KAFKA_GROUP_ID`) last committed, and a partition the
group never committed to where `KAFKA_AUTO_OFFSET_RESET` says. With no reset (Flink's `none`)
such a partition is refused at start-up, in one line, where Flink's job fails once running.
`timestamp:<ms>` (Flink's `timestamp`) starts each partition at its first record at or after
that time; named offsets (Flink's `specific-offsets`) start the partitions they name there, the
others as their `"*"` says. Every mode is turned here into the explicit offsets the source takes
(`serdes.kafka.source.KafkaStreamReader`). A checkpoint's offsets win over all of it, as a Flink
job restored from a checkpoint ignores its startup mode.
"""

from __future__ import annotations

import json
from dataclasses import replace

from pyspark.sql import SparkSession

from app.config.env import Config
from app.config.parsers import OTHER_PARTITIONS, start_time
from app.run.checkpoint import last_batch
from app.run.preflight import StartupError
from serdes.kafka.group_offsets import committed
from serdes.kafka.offsets import PartitionBounds

RESET = {"earliest": -2, "latest": -1}  # the source's explicit offsets for those


def resolved_starts(spark: SparkSession, config: Config, topics: list[str]) -> Config:
    """`config` with each of `topics`' start as explicit offsets where a topic names a mode of
    its own, a time, or starts at its group's; as it is otherwise, and for an existing
    checkpoint."""
    given = config.starting_offsets
    if given in ("earliest", "latest") or last_batch(spark, config.checkpoint_location) is not None:
        return config
    modes = json.loads(given) if given.startswith("{") else dict.fromkeys(topics, given)
    client = config.kafka_client_config()
    spec: dict[str, dict[str, int]] = {}
    for topic in topics:
        mode = modes.get(topic, "earliest")
        bounds = PartitionBounds(topic, client)
        try:
            named = mode if isinstance(mode, dict) else {OTHER_PARTITIONS: mode}
            spec[topic] = _start(config, bounds, named)
        finally:
            bounds.close()
    return replace(config, starting_offsets=json.dumps(spec))


def _start(config: Config, bounds: PartitionBounds, given: dict) -> dict[str, int]:
    """A topic's named partitions at their offsets, the others as `"*"` says (the earliest by
    default): at a mode's offsets, or at a time's."""
    first = bounds.starts()
    named = _within(given, first, bounds.ends() if given.keys() - {OTHER_PARTITIONS} else {})
    others = [p for p in first if str(p) not in named]
    mode = given.get(OTHER_PARTITIONS, "earliest")
    if not others:
        return named
    if mode in RESET:
        found = {p: RESET[mode] for p in others}
    elif mode == "group-offsets":
        found = _group_start(config, bounds, others, first, beside=bool(named))
    else:
        at = bounds.at_time(start_time(mode) or 0)
        found = {p: at[p] for p in others}
    return named | {str(p): o for p, o in found.items()}


def _within(given: dict, first: dict[int, int], ends: dict[int, int]) -> dict[str, int]:
    """The named partitions' offsets, each within what its partition holds: one no longer
    held at the earliest, as a consumer's reset would start it; one past the end at the end."""
    named: dict[str, int] = {}
    for p, o in given.items():
        if p == OTHER_PARTITIONS or int(p) not in first:
            continue
        named[p] = o if o < 0 else min(max(o, first[int(p)]), ends[int(p)])
    return named


def _group_start(
    config: Config,
    bounds: PartitionBounds,
    partitions: list[int],
    first: dict[int, int],
    beside: bool,
) -> dict[int, int]:
    """`partitions` at the group's committed offsets. Where it committed none: as
    `KAFKA_AUTO_OFFSET_RESET` says for a topic that starts at its group's (`none` refused); at
    the earliest for the partitions left out beside named ones (`beside`), as Flink's
    `specific-offsets` starts them whatever `properties.auto.offset.reset` says."""
    group, topic = config.group_id or "", bounds.topic
    found = committed(bounds.client_config, group, topic, sorted(partitions))
    reset = "earliest" if beside else config.offset_reset
    missing = sorted(p for p, o in found.items() if o is None)
    if missing and reset == "none":
        raise StartupError(
            f"KAFKA_AUTO_OFFSET_RESET: none, but consumer group {group!r} (KAFKA_GROUP_ID) has "
            f"committed no offset of {topic} partition {', '.join(map(str, missing))} to start "
            "it from: set earliest or latest (Flink's job fails here)"
        )
    # an offset the topic no longer holds starts at its earliest, as a consumer's reset would
    return {p: RESET[reset] if o is None else max(o, first[p]) for p, o in found.items()}
