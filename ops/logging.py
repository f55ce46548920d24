"""One logging set-up for every entry point: timestamped lines on stderr, or, with
`LOG_FORMAT=json`, one JSON object a line for log shippers, carrying the running query's id and
its last completed micro-batch (`QUERY`). Spark's own lines then come as JSON objects too, with
the same `ts`, `level`, `logger` and `msg` keys (`jvm_options`)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime

# Spark's own log4j2 set-up whose layout writes a JSON object a line (in spark-core's jar).
_JVM_JSON_LAYOUT = "-Dlog4j2.configurationFile=org/apache/spark/log4j2-json-layout.properties"


@dataclass
class QueryContext:
    """What a JSON line says of the streaming query, once it runs."""

    query_id: str | None = None
    batch_id: int | None = None


QUERY = QueryContext()


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": "WARN" if record.levelno == logging.WARNING else record.levelname,  # Spark's
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if QUERY.query_id is not None:
            line["query_id"] = QUERY.query_id
            line["batch_id"] = QUERY.batch_id
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def json_logs() -> bool:
    return os.environ.get("LOG_FORMAT", "text").lower() == "json"


def setup_logging() -> None:
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    handler = logging.StreamHandler()
    if json_logs():
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(
        level=level if isinstance(logging.getLevelName(level), int) else "INFO", handlers=[handler]
    )
    # py4j logs every gateway call at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def jvm_options(conf: dict[str, str]) -> dict[str, str]:
    """`conf` with the JVMs' (driver's and executors') log layout as `LOG_FORMAT` says, their
    other Java options kept."""
    if not json_logs():
        return conf
    keys = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
    return conf | {key: f"{conf.get(key, '')} {_JVM_JSON_LAYOUT}".strip() for key in keys}
