"""One logging set-up for every entry point: timestamped lines on stderr."""

from __future__ import annotations

import logging
import os


def setup_logging() -> None:
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level if isinstance(logging.getLevelName(level), int) else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # py4j logs every gateway call at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
