"""Apache Kafka itself as the embedded broker: one KRaft node (broker and controller in one JVM,
no ZooKeeper) run from Kafka's own jars (`app/jars/kafka_broker.txt`, fetched once). Its log
lives on disk, so a crashed broker restarts with what it had acknowledged, as a real one does."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from app.broker.process import BrokerNotInstalled, BrokerProcess, free_port
from app.jars import JarsUnavailable, fetched

KAFKA_VERSION = "4.1.1"
# Enough for the tests' and the demo's load; the broker's own script starts with 1 GiB.
HEAP = ("-Xms256m", "-Xmx768m")

# Logs: warnings and errors only, in the broker's log file (its stdout).
LOG4J2_PROPERTIES = """\
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
"""


def server_properties(port: int, controller_port: int, log_dir: str, listen_host: str) -> str:
    """One node, broker and controller; the broker listens on `listen_host`:`port` and is
    reached at 127.0.0.1:`port`. Internal topics of one replica and few partitions (fast to
    create), no delay before a group's first rebalance."""
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://{listen_host}:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={log_dir}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""


def kafka_jars(announce: Callable[[str], None] = print) -> list[Path]:
    """Kafka's jars, fetching those missing (`announce` says so once)."""
    try:
        return fetched("kafka_broker", f"Apache Kafka {KAFKA_VERSION}", announce)
    except JarsUnavailable as err:
        raise BrokerNotInstalled(str(err)) from None


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerNotInstalled("Apache Kafka needs Java (17 or later) on the PATH or JAVA_HOME")
    return java


def cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64, unpadded. One in 64 such texts
    starts with `-`, which `kafka-storage format` takes for an option; Kafka's own
    `Uuid.randomUuid()` draws again then, and so does this."""
    while True:
        text = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def format_command(java: str, jars: str, properties: str) -> list[str]:
    """Format a new node's log directory (its first start only)."""
    return [
        java,
        "-cp",
        jars,
        "kafka.tools.StorageTool",
        "format",
        "--ignore-formatted",
        "--cluster-id",
        cluster_id(),
        "--config",
        properties,
    ]


def start_command(java: str, jars: str, properties: str, log4j: str) -> list[str]:
    return [
        java,
        *HEAP,
        f"-Dlog4j2.configurationFile={log4j}",
        "-Djava.awt.headless=true",
        "-cp",
        jars,
        "kafka.Kafka",
        properties,
    ]


class ApacheKafka(BrokerProcess):
    name = f"Apache Kafka {KAFKA_VERSION}"

    def __init__(
        self, env: dict[str, str] | None = None, announce: Callable[[str], None] = print
    ) -> None:
        super().__init__(env)
        self.java = java_binary()
        self.jars = os.pathsep.join(map(str, kafka_jars(announce)))
        self.properties = self.work / "server.properties"
        self.log4j = self.work / "log4j2.properties"

    def prepare(self) -> None:
        controller = free_port()
        text = server_properties(self.port, controller, str(self.work / "data"), "127.0.0.1")
        self.properties.write_text(text)
        self.log4j.write_text(LOG4J2_PROPERTIES)
        subprocess.run(
            format_command(self.java, self.jars, str(self.properties)),
            check=True,
            capture_output=True,
            timeout=120,
        )

    def command(self) -> list[str]:
        return start_command(self.java, self.jars, str(self.properties), str(self.log4j))

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        shutil.rmtree(self.work, ignore_errors=True)
