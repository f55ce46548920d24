"""Whether a cluster runs Apache Kafka's code, asked once per process and cluster.

The service trusts such a cluster on two points where Tansu (the Kafka-protocol broker the
service falls back to where Kafka cannot run) fails: `ListOffsets` gives a partition's exact end
(Tansu answers the base offset of the last record batch + 1: `serdes.kafka.offsets`), and a
transaction whose commit is acknowledged is applied (Tansu acknowledged some and never applied
them: `serdes.kafka.transactions`). Apache Kafka (and every broker built on its code) describes a
broker's configuration; Tansu describes none.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from serdes.kafka.client_log import logged

METADATA_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)

_answers: dict[str, bool] = {}  # per cluster (its bootstrap servers)


def runs_kafka_code(client_config: dict[str, str]) -> bool:
    """Whether the cluster describes a broker's configuration. One that refuses to (access
    control) is not Tansu. One that does not answer raises KafkaException, and is asked again
    next time."""
    servers = client_config["bootstrap.servers"]
    if servers not in _answers:
        admin = AdminClient(logged(client_config))
        try:
            brokers = admin.list_topics(timeout=METADATA_TIMEOUT_S).brokers
            if not brokers:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "no broker in metadata"))
            resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
            described = admin.describe_configs([resource])[resource].result(METADATA_TIMEOUT_S)
            _answers[servers] = bool(described)
        except TimeoutError:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, "describing a broker's configuration")
            ) from None
        except KafkaException as err:
            if err.args[0].code() != KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                raise
            _answers[servers] = True
        log.info(
            "Kafka at %s: %s",
            servers,
            "Apache Kafka's code (partition ends listed, commits taken as acknowledged)"
            if _answers[servers]
            else "not Apache Kafka's code (partition ends confirmed by a read to the end, "
            "each commit's marker read back)",
        )
    return _answers[servers]
