"""Which configuration values are secrets, and how they are kept out of what the service prints.

A value is secret when the registry says its variable is one (`app.config.registry`), or, for
the client and Spark properties passed through, when its name says so (a password, a key, a
token, credentials, JAAS configuration, a registry's user info). Printed configuration masks
those; Spark's own redaction (its plan strings, its UI, its logs) is given the same pattern for
its properties and for the data source options the Kafka clients' properties travel in.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from urllib.parse import urlsplit, urlunsplit

from app.config.registry import PROPERTY_PREFIXES, VARIABLES

# Java regex syntax and Python's alike; matched against a name anywhere (Spark: `find`).
SECRET_NAMES = (
    r"(?i)password|secret|token|credential|jaas|user[._]?info|private|"
    r"ssl[._]key|keystore|truststore|pem|access[._]?key"
)
_SECRET = re.compile(SECRET_NAMES)
MASK = "*********(redacted)"


def is_secret(name: str) -> bool:
    variable = VARIABLES.get(name)
    return variable.secret if variable is not None else bool(_SECRET.search(name))


def without_user_info(url: str) -> str:
    """A URL without the `user:password@` it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{MASK}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def shown_value(name: str, value: str) -> str:
    """A variable's value as it may be printed: masked if secret, a URL without user info."""
    if is_secret(name):
        return MASK
    return without_user_info(value) if "://" in value else value


def shown_variables(env: Mapping[str, str], known: Collection[str]) -> dict[str, str]:
    """The service's variables in `env` (`known`, and the prefixed client properties), sorted,
    each as `shown_value` prints it."""
    shown = {}
    for name in sorted(env):
        if name not in known and not name.startswith(PROPERTY_PREFIXES):
            continue
        shown[name] = shown_value(name, env[name])
    return shown
