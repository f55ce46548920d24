"""Which configuration values are secrets, and how they are kept out of what the service prints.

A value is secret when its variable's name says so (a password, a key, a token, credentials,
JAAS configuration, a registry's user info). Printed configuration masks those; Spark's own
redaction (its plan strings, its UI, its logs) is given the same pattern for its properties and
for the data source options the Kafka clients' properties travel in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from app.config import KNOWN_VARIABLES

# Java regex syntax and Python's alike; matched against a name anywhere (Spark: `find`).
SECRET_NAMES = (
    r"(?i)password|secret|token|credential|jaas|user[._]?info|private|"
    r"ssl[._]key|keystore|truststore|pem|access[._]?key"
)
_SECRET = re.compile(SECRET_NAMES)
MASK = "*********(redacted)"
_PREFIXES = ("KAFKA_", "SCHEMA_REGISTRY_", "SPARK_CONF_")


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def without_user_info(url: str) -> str:
    """A URL without the `user:password@` it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{MASK}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def shown_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The service's variables in `env`, sorted, each secret value masked."""
    shown = {}
    for name in sorted(env):
        if name not in KNOWN_VARIABLES and not name.startswith(_PREFIXES):
            continue
        value = env[name]
        if is_secret(name):
            value = MASK
        elif name.endswith("_URL"):
            value = without_user_info(value)
        shown[name] = value
    return shown
