"""The embedded broker, for the demo (when no KAFKA_BOOTSTRAP_SERVERS is given), the benches
and the tests: Apache Kafka run from its own jars where Java and Maven Central can be had
(`apache_kafka`), Tansu only where they cannot (`tansu`). The production image runs no broker."""

from __future__ import annotations

from collections.abc import Callable

from app.broker.apache_kafka import ApacheKafka
from app.broker.process import BrokerNotInstalled, BrokerProcess, free_port, wait_until_ready
from app.broker.tansu import Tansu, tansu_command


def embedded_broker(announce: Callable[[str], None] = print) -> BrokerProcess:
    """Apache Kafka if it can be started here, else Tansu (`announce` says why)."""
    try:
        return ApacheKafka(announce=announce)
    except BrokerNotInstalled as missing:
        announce(f"{missing}; using Tansu, a Kafka-protocol broker, instead")
        return Tansu()


__all__ = [
    "ApacheKafka",
    "BrokerNotInstalled",
    "BrokerProcess",
    "Tansu",
    "embedded_broker",
    "free_port",
    "tansu_command",
    "wait_until_ready",
]
