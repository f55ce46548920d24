"""An S3-compatible object store on loopback (moto's server): where the service keeps an
`s3a://` checkpoint, and where Tansu keeps its data across a broker restart when Apache Kafka
cannot be had (`tests.kafka_broker.crashable_broker`)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

from app.broker import free_port


class ObjectStore:
    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
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

    def s3a_env(self) -> dict[str, str]:
        """The service's variables for an `s3a://` checkpoint in this store: S3A's settings
        for an endpoint on loopback, and the credentials S3A reads from the environment. S3A's
        optimized copy of a local file (the state store's uploads) goes through the AWS SDK's
        async client, which sends `Expect: 100-continue`, and moto's server answers it in a
        way that client takes for a failure (status 100): S3A copies through its other path."""
        hadoop = "SPARK_CONF_spark.hadoop.fs.s3a"
        return {
            f"{hadoop}.endpoint": self.endpoint,
            f"{hadoop}.endpoint.region": "us-east-1",
            f"{hadoop}.path.style.access": "true",
            f"{hadoop}.connection.ssl.enabled": "false",
            f"{hadoop}.optimized.copy.from.local.enabled": "false",
            "AWS_ACCESS_KEY_ID": "streamjoin",
            "AWS_SECRET_ACCESS_KEY": "streamjoin",
        }

    def names(self, prefix: str) -> list[str]:
        """The names of the objects under `prefix`."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="streamjoin",
            aws_secret_access_key="streamjoin",
        )
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def __enter__(self) -> ObjectStore:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                create = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
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
