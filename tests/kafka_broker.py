"""Where the tests' Kafka broker comes from, in the order the project promises.

1. `KAFKA_BOOTSTRAP_SERVERS`, when set: a broker the user runs.
2. Testcontainers, when a Docker engine answers: `KAFKA_TEST_IMAGE` if given (for users who can
   pull `apache/kafka`), else Apache Kafka in an image built here (images cannot be pulled on
   every machine): the project's Debian base, Debian's Java 17, Kafka's jars from Maven Central.
3. Apache Kafka as a child process on a free loopback port (`app.broker.apache_kafka`).
4. Tansu, only where Kafka cannot be had (`app.broker.embedded_broker`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.broker import (
    ApacheKafka,
    BrokerNotInstalled,
    BrokerProcess,
    Tansu,
    embedded_broker,
    free_port,
    wait_until_ready,
)
from app.broker.apache_kafka import (
    KAFKA_VERSION,
    LOG4J2_PROPERTIES,
    format_command,
    kafka_jars,
    server_properties,
    start_command,
)
from tests.container_image import base_image, build_on, has_image, one_builder
from tests.object_store import ObjectStore

# Ryuk (Testcontainers' reaper) is itself an image that would have to be pulled.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

KAFKA_IMAGE = f"streamjoin-kafka:{KAFKA_VERSION}"
KAFKA_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
# the JRE's set-up links its man pages, whose folder the base leaves out
RUN mkdir -p /usr/share/man/man1 \\
    && apt-get update \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
        openjdk-17-jre-headless \\
    && rm -rf /var/lib/apt/lists/*
COPY libs /opt/kafka/libs
COPY log4j2.properties /opt/kafka/log4j2.properties
"""
CONTROLLER_PORT = 9093  # inside the container; only the broker's port is published


def docker_engine():
    """A Docker client if an engine answers, else None."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        return client
    except Exception:
        return None


def kafka_image() -> str:
    """Apache Kafka on the project's Debian base, built once per engine."""
    if has_image(KAFKA_IMAGE):  # a build tags its image only once it is complete
        return KAFKA_IMAGE
    base = base_image()
    with one_builder():
        if has_image(KAFKA_IMAGE):
            return KAFKA_IMAGE
        with tempfile.TemporaryDirectory(prefix="streamjoin-kafka-image-") as work:
            (Path(work) / "libs").mkdir()
            for jar in kafka_jars():
                shutil.copy(jar, Path(work) / "libs")
            (Path(work) / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
            (Path(work) / "Dockerfile").write_text(KAFKA_DOCKERFILE)
            build_on(base, work, KAFKA_IMAGE)
    return KAFKA_IMAGE


def kafka_container_script(port: int) -> str:
    """Format the node's storage and start it, the broker listening on `port`."""
    properties = "/tmp/server.properties"
    text = server_properties(port, CONTROLLER_PORT, "/tmp/kafka-logs", "0.0.0.0")
    jars, log4j = "/opt/kafka/libs/*", "/opt/kafka/log4j2.properties"
    return " && ".join(
        [
            f"printf %s {shlex.quote(text)} > {properties}",
            shlex.join(format_command("java", jars, properties)),
            "exec " + shlex.join(start_command("java", jars, properties, log4j)),
        ]
    )


@contextmanager
def container_broker() -> Iterator[str]:
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
        DockerContainer(kafka_image())
        .with_command(["sh", "-c", kafka_container_script(port)])
        .with_bind_ports(port, port)
    )
    with container:
        bootstrap = f"127.0.0.1:{port}"
        try:
            wait_until_ready(bootstrap)
        except Exception as err:
            logs = b"".join(container.get_logs()).decode(errors="replace")
            raise RuntimeError(f"Apache Kafka's container did not answer:\n{logs[-3000:]}") from err
        yield bootstrap


@contextmanager
def broker_for_tests() -> Iterator[tuple[str, str]]:
    """Yield (bootstrap servers, how the broker was obtained)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external, "external (KAFKA_BOOTSTRAP_SERVERS)"
        return
    if docker_engine() is not None:
        with container_broker() as bootstrap:
            yield bootstrap, f"Apache Kafka {KAFKA_VERSION} (Testcontainers)"
        return
    with embedded_broker() as broker:
        yield broker.bootstrap, f"{broker.name} (a local process)"


@contextmanager
def crashable_broker() -> Iterator[BrokerProcess]:
    """A broker of its own that a test may SIGKILL and restart, its data outliving the crash:
    Apache Kafka (its log on disk), else Tansu keeping its data in an object store."""
    try:
        broker: BrokerProcess = ApacheKafka()
    except BrokerNotInstalled:
        with ObjectStore("tansu") as store, Tansu("s3://tansu/", store.tansu_env()) as tansu:
            yield tansu
        return
    with broker:
        yield broker
