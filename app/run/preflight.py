"""Start-up checks of what the service will use: Kafka, its topics, the metrics port, the
checkpoint directory, the schema registry; each failure one clear line naming the variable.

Without them Spark would start, plan, and fail deep inside a task with a stack trace.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from app.config.env import Config
from app.config.registry import FORWARD
from app.jars import JarsUnavailable, s3a_jars
from serdes.kafka.client_log import logged

METADATA_TIMEOUT_S = 10.0


class StartupError(RuntimeError):
    """The service cannot start as configured; the message names the variable at fault."""


def _admin(config: Config, errors: list[KafkaError]) -> AdminClient:
    try:
        # log_level 0: the failure is reported once, by us, from what `errors` collects.
        return AdminClient(
            logged({**config.kafka_client_config(), "log_level": 0, "error_cb": errors.append})
        )
    except KafkaException as err:
        message = err.args[0].str() if err.args else str(err)
        prop = message.split('"')[1] if message.count('"') >= 2 else ""
        variable = "KAFKA_" + prop.upper().replace(".", "_") if prop else "KAFKA_*"
        raise StartupError(f"{variable}: not a usable Kafka client property: {message}") from None


def _unreachable(config: Config, errors: list[KafkaError], failure: KafkaError) -> StartupError:
    """Why no broker answered, naming the variable to look at: the client's error callback
    has the cause (DNS, refused connection, TLS, authentication) that the failure lacks."""
    by_code = {e.code(): e for e in errors}
    servers = config.bootstrap_servers
    auth = by_code.get(KafkaError._AUTHENTICATION) or by_code.get(
        KafkaError.SASL_AUTHENTICATION_FAILED
    )
    if auth is not None:
        return StartupError(
            f"KAFKA_SASL_USERNAME / KAFKA_SASL_PASSWORD: the brokers at {servers} "
            f"refused the credentials ({auth.str()})"
        )
    tls = by_code.get(KafkaError._SSL)
    transport = by_code.get(KafkaError._TRANSPORT)
    # librdkafka names the protocol mismatch in a transport error: Apache Kafka closes a TLS
    # handshake at once, told as "SSL handshake failed … connecting to a PLAINTEXT broker
    # listener?" or, when the close comes first, "closed by peer (… in state SSL_HANDSHAKE)"
    said = transport.str().lower().replace("_", " ") if transport is not None else ""
    if tls is not None or "security.protocol" in said or "ssl handshake" in said:
        cause = (tls or transport).str()  # type: ignore[union-attr]
        return StartupError(
            f"KAFKA_SECURITY_PROTOCOL: the brokers at {servers} do not speak "
            f"it: TLS against a plaintext listener? ({cause})"
        )
    resolve = by_code.get(KafkaError._RESOLVE)
    if resolve is not None:
        return StartupError(
            f"KAFKA_BOOTSTRAP_SERVERS: a host of {servers} is not known to DNS ({resolve.str()})"
        )
    if transport is not None:
        return StartupError(
            f"KAFKA_BOOTSTRAP_SERVERS: cannot connect to {servers} ({transport.str()})"
        )
    protocol = config.kafka_properties.get("security.protocol", "").upper()
    if "SSL" in protocol:  # a plaintext listener never answers a TLS handshake
        return StartupError(
            f"KAFKA_SECURITY_PROTOCOL: no broker at {servers} answered over "
            f"{protocol} within {METADATA_TIMEOUT_S:.0f}s: is its listener "
            "plaintext?"
        )
    return StartupError(
        f"KAFKA_BOOTSTRAP_SERVERS: no Kafka cluster answered at {servers} within "
        f"{METADATA_TIMEOUT_S:.0f}s ({failure.str()})"
    )


def check_kafka(config: Config) -> None:
    """Raise StartupError unless the cluster answers and every topic the service uses exists."""
    errors: list[KafkaError] = []
    admin = _admin(config, errors)
    try:
        metadata = admin.list_topics(timeout=METADATA_TIMEOUT_S)
    except KafkaException as err:
        admin.poll(0.5)  # hands over what the error callback has
        raise _unreachable(config, errors, err.args[0]) from None
    topics = [
        ("LEFT_TOPIC", config.left.topic, ""),
        *([("RIGHT_TOPIC", config.right.topic, "")] if config.right.topic else []),
        *([("OUTPUT_TOPIC", config.output.topic, "")] if config.output.sink == "kafka" else []),
    ]
    origins = [config.sql_origin] * len(topics)
    for chained in (c for c in config.chain if c.input.topic):  # its own SQL line
        topics.append(("RIGHT_TOPIC", chained.input.topic, ""))
        origins.append(chained.origin)
    if config.join.type != FORWARD:
        topics.append(
            (
                "DLQ_TOPIC",
                config.output.dlq_topic,
                " (records that cannot be decoded are written there)",
            )
        )
    if config.output.delivery == "exactly-once" and config.output.sink == "kafka":
        topics.append(
            (
                "OUTPUT_MARKER_TOPIC",
                config.output.marker_topic,
                " (OUTPUT_DELIVERY=exactly-once records its batch markers there: create it with "
                "cleanup.policy=compact)",
            )
        )
    origins += [config.sql_origin] * (len(topics) - len(origins))
    missing = [  # a topic the SQL named is told at its line
        f"{origin.get(variable, variable)}: Kafka topic {topic!r} does not exist at "
        f"{config.bootstrap_servers}{why}"
        for (variable, topic, why), origin in zip(topics, origins, strict=True)
        if metadata.topics.get(topic) is None or metadata.topics[topic].error is not None
    ]
    if missing:
        raise StartupError("\n".join(missing))


def _registry_problem(config: Config) -> str | None:
    """Whether the schema registry the Avro formats need answers, with these properties."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    uses = [s.format for s in config.inputs()] + [config.output.format]
    if not config.schema_registry_url or not any("avro" in f for f in uses):
        return None
    try:
        client = SchemaRegistryClient(
            {"url": config.schema_registry_url, "timeout": 10, **config.schema_registry_properties}
        )
    except ValueError as err:  # names the properties, never their values
        names = str(err).split(":", 1)[-1].split(",")
        variables = ", ".join(
            "SCHEMA_REGISTRY_" + n.strip().upper().replace(".", "_") for n in names
        )
        return f"{variables}: not a schema registry client property ({err})"
    try:
        client.get_subjects()
    except SchemaRegistryError as err:  # it answered
        if err.http_status_code in (401, 403):
            return (
                "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO: the schema registry refused the "
                f"credentials (HTTP {err.http_status_code})"
            )
    except Exception as err:  # the client raises its HTTP library's errors as they come
        return f"SCHEMA_REGISTRY_URL: no schema registry answered ({type(err).__name__}: {err})"
    return None


def _port_problem(port: int) -> str | None:
    if port == 0:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # as the server binds it (`http.server` reuses addresses): connections of a previous
        # run left in TIME_WAIT do not keep a restarted service from its port
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as err:
            return f"METRICS_PORT: port {port} cannot be served ({err.strerror})"
    return None


# Hadoop filesystems whose classes ship in pyspark's jars (hadoop-client-api/-runtime), and
# s3a://, whose jars the service fetches once (`app.jars`; the image carries them).
SHIPPED_FILESYSTEMS = ("hdfs", "viewfs", "webhdfs", "swebhdfs")
OBJECT_STORES = ("s3a",)


def _checkpoint_problem(location: str) -> str | None:
    """A local checkpoint directory must be proven writable by writing: a probe directory made
    and removed in it, or where its first missing folder would be made, so that a refused start
    leaves nothing. Permission bits prove nothing for root (`os.access` passes on /proc, and
    Spark then failed with a stack trace). A remote one is proven once Spark runs
    (`app.run.checkpoint.check_writable`), if its file system can be had."""
    scheme = urlparse(location).scheme
    if scheme in SHIPPED_FILESYSTEMS:
        return None
    if scheme in OBJECT_STORES:
        try:
            s3a_jars()
        except JarsUnavailable as err:
            return f"CHECKPOINT_LOCATION: {err}"
        return None
    if scheme not in ("", "file"):
        return (
            "CHECKPOINT_LOCATION: expected a directory (a volume every executor mounts, when "
            f"executors run elsewhere), an hdfs:// or an s3a:// URI; got {scheme}://…, whose "
            "Hadoop filesystem is not installed"
        )
    path = Path(urlparse(location).path if scheme else location).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return f"CHECKPOINT_LOCATION: {existing} is a file, not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".streamjoin-probe-", dir=existing))
    except OSError as err:
        return f"CHECKPOINT_LOCATION: cannot write to {location} ({err.strerror})"
    return None


def check_environment(config: Config) -> None:
    """Raise StartupError naming every resource besides Kafka that the service cannot use:
    the metrics port, the checkpoint directory, the schema registry."""
    problems = [
        _port_problem(config.metrics_port),
        _checkpoint_problem(config.checkpoint_location),
        _registry_problem(config),
    ]
    found = [p for p in problems if p]
    if found:
        raise StartupError("\n".join(found))
