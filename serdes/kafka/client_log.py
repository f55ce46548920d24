"""librdkafka's own log lines through Python logging, in the service's format.

Left to itself librdkafka writes its lines (`%6|…|BGQUEUE|…`) straight to stderr, which breaks
`LOG_FORMAT=json` (one JSON object a line) in the driver and in Spark's Python workers alike.
Every client the service creates is given a `logger`; in a Python worker, which never ran the
entry point's set-up, the first client sets logging up the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ops.logging import setup_logging

KAFKA_LOGGER = "streamjoin.kafka"


def logged(config: Mapping[str, object]) -> dict[str, object]:
    """`config` with librdkafka's log lines sent to the `streamjoin.kafka` logger."""
    if not logging.getLogger().handlers:
        setup_logging()
    return {**config, "logger": logging.getLogger(KAFKA_LOGGER)}
