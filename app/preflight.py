"""Start-up checks against Kafka, so that a wrong address or topic fails in one clear line.

Without them Spark would start, plan, and fail deep inside a task with a stack trace.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from app.config import Config

METADATA_TIMEOUT_S = 10.0


class StartupError(RuntimeError):
    """The service cannot start as configured; the message names the variable at fault."""


def _admin(config: Config) -> AdminClient:
    try:
        # log_level 0 and a silent error callback: the failure is reported once, by us.
        return AdminClient(
            {**config.kafka_client_config(), "log_level": 0, "error_cb": lambda _e: None}
        )
    except KafkaException as err:
        message = err.args[0].str() if err.args else str(err)
        prop = message.split('"')[1] if message.count('"') >= 2 else ""
        variable = "KAFKA_" + prop.upper().replace(".", "_") if prop else "KAFKA_*"
        raise StartupError(f"{variable}: not a usable Kafka client property: {message}") from None


def check_kafka(config: Config) -> None:
    """Raise StartupError unless the cluster answers and every topic the service uses exists."""
    try:
        metadata = _admin(config).list_topics(timeout=METADATA_TIMEOUT_S)
    except KafkaException as err:
        raise StartupError(
            f"KAFKA_BOOTSTRAP_SERVERS: no Kafka cluster answered at {config.bootstrap_servers} "
            f"within {METADATA_TIMEOUT_S:.0f}s ({err.args[0].str()})"
        ) from None
    topics = [
        ("LEFT_TOPIC", config.left.topic, ""),
        ("RIGHT_TOPIC", config.right.topic, ""),
        ("OUTPUT_TOPIC", config.output.topic, ""),
    ]
    if config.output.delivery == "exactly-once":
        topics.append(
            ("OUTPUT_MARKER_TOPIC", config.output.marker_topic,
             " (OUTPUT_DELIVERY=exactly-once records its batch markers there: create it with "
             "cleanup.policy=compact)")
        )  # fmt: skip
    for variable, topic, why in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise StartupError(
                f"{variable}: Kafka topic {topic!r} does not exist at "
                f"{config.bootstrap_servers}{why}"
            )
