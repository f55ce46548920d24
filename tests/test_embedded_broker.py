"""The embedded Apache Kafka node's storage formatting."""

from __future__ import annotations

import base64

from app.broker.apache_kafka import cluster_id


def test_a_cluster_id_never_starts_with_a_dash_that_kafka_storage_reads_as_an_option() -> None:
    # 0xF8 makes the first base64 character '-'; the second draw must be taken instead.
    draws = iter([b"\xf8" + bytes(15), b"\x01" + bytes(15)])
    made = cluster_id(lambda: next(draws))
    assert made == base64.urlsafe_b64encode(b"\x01" + bytes(15)).decode().rstrip("=")
    assert len(made) == 22
