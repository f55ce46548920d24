"""Apache Kafka itself as the embedded broker: one KRaft node (broker and controller in one JVM,
no ZooKeeper) run from Kafka's own jars, fetched once from Maven Central into the user's cache
and checked against the hashes pinned in `kafka_jars.txt`. Its log lives on disk, so a crashed
broker restarts with what it had acknowledged, as a real one does."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from app.broker.process import BrokerNotInstalled, BrokerProcess, free_port

KAFKA_VERSION = "4.1.1"
PINNED_JARS = Path(__file__).with_name("kafka_jars.txt")
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
DOWNLOAD_TIMEOUT_S = 60.0
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


def pinned_jars() -> list[tuple[str, str]]:
    """(path under a Maven repository, SHA-256) of each jar the broker runs on."""
    jars = []
    for line in PINNED_JARS.read_text().splitlines():
        if line and not line.startswith("#"):
            coordinates, sha256 = line.split()
            group, artifact, version = coordinates.split(":")
            path = f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
            jars.append((path, sha256))
    return jars


def jar_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "streamjoin" / f"kafka-{KAFKA_VERSION}"


def kafka_jars(announce: Callable[[str], None] = print) -> Path:
    """The directory holding Kafka's jars, fetching those missing (`announce` says so once)."""
    cache = jar_cache()
    missing = [(p, h) for p, h in pinned_jars() if not (cache / Path(p).name).exists()]
    if missing:
        announce(f"fetching Apache Kafka {KAFKA_VERSION}'s jars from Maven Central (once)")
        cache.mkdir(parents=True, exist_ok=True)
    for path, sha256 in missing:
        url = f"{MAVEN_CENTRAL}/{path}"
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                body = response.read()
        except OSError as err:
            raise BrokerNotInstalled(f"Apache Kafka's jars could not be fetched: {err}") from None
        if hashlib.sha256(body).hexdigest() != sha256:
            raise BrokerNotInstalled(f"{url} does not have the SHA-256 kafka_jars.txt pins")
        partial = cache / f".{Path(path).name}.part"
        partial.write_bytes(body)
        partial.replace(cache / Path(path).name)  # whole or absent
    return cache


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerNotInstalled("Apache Kafka needs Java (17 or later) on the PATH or JAVA_HOME")
    return java


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def format_command(java: str, jars: str, properties: str) -> list[str]:
    """Format a new node's log directory (its first start only)."""
    return [
        java,
        "-cp",
        f"{jars}/*",
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
        f"{jars}/*",
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
        self.jars = str(kafka_jars(announce))
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
