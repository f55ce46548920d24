"""A Kafka call retried while the cluster answers that it is not ready for it yet.

librdkafka hands some answers of a cluster in motion to the caller as errors instead of
retrying them itself: a partition whose leader is moving (`ListOffsets`), a group whose
coordinator is being loaded or moved (`OffsetFetch`). The same call succeeds a little later;
any other error is the caller's to meet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaException

T = TypeVar("T")

RETRY_BACKOFF_S = 0.1


def retried(call: Callable[[float], T], retryable: frozenset[int], timeout_s: float) -> T:
    """`call(seconds left)` until it returns, again every `RETRY_BACKOFF_S` while it raises a
    `KafkaException` whose code is `retryable`, for up to `timeout_s` in all; any other error,
    or one that outlasts it, is raised."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call(deadline - time.monotonic())
        except KafkaException as err:
            if err.args[0].code() not in retryable or time.monotonic() >= deadline:
                raise
        time.sleep(RETRY_BACKOFF_S)
