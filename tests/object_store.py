"""An S3-compatible object store on loopback (moto's server): where Tansu keeps its data across
a broker restart when Apache Kafka cannot be had (`tests.kafka_broker.crashable_broker`)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

from app.broker import free_port

BUCKET = "tansu"


class ObjectStore:
    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def tansu_env(self) -> dict[str, str]:
        """What Tansu's `s3://` storage engine reads to find this store."""
        return {
            "AWS_ACCESS_KEY_ID": "streamjoin",
            "AWS_SECRET_ACCESS_KEY": "streamjoin",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def __enter__(self) -> ObjectStore:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                create = urllib.request.Request(f"{self.endpoint}/{BUCKET}", method="PUT")
                urllib.request.urlopen(create, timeout=2).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise
                time.sleep(0.2)

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
