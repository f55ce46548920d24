"""Jars the service runs beside pyspark's own, fetched from Maven Central, whole and checked
against the SHA-256 each list pins, into one directory per list: the user's cache, or the
directory STREAMJOIN_JARS names (the image's, filled when it is built, so that nothing is
fetched at start). Each list (`<name>.txt` here) holds `group:artifact:version sha256` lines.

    python -m app.jars s3a kafka_broker    # fetch those lists now
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.request
from collections.abc import Callable
from importlib import resources
from pathlib import Path

log = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
DOWNLOAD_TIMEOUT_S = 60.0


class JarsUnavailable(RuntimeError):
    """A list's jars are not here and could not be fetched (the reason is the message)."""


def pinned(name: str, listing: Path | None = None) -> list[tuple[str, str]]:
    """(path under a Maven repository, SHA-256) of each jar the list `name` pins (here, or in
    the file `listing`: a bench's)."""
    text = (listing or resources.files(__name__).joinpath(f"{name}.txt")).read_text()
    jars = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            coordinates, sha256 = line.split()
            group, artifact, version = coordinates.split(":")
            path = f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
            jars.append((path, sha256))
    return jars


def user_cache() -> Path:
    """The service's folder in the user's cache: what it keeps between runs by default."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamjoin"


def jar_home() -> Path:
    if named := os.environ.get("STREAMJOIN_JARS"):
        return Path(named)
    return user_cache() / "jars"


def fetched(
    name: str, what: str, announce: Callable[[str], None] = print, listing: Path | None = None
) -> list[Path]:
    """The jars of the list `name` (or the file `listing`), fetching those missing (`announce`
    says so once, naming `what` they are for)."""
    directory = jar_home() / name
    jars = pinned(name, listing)
    missing = [(p, h) for p, h in jars if not (directory / Path(p).name).exists()]
    if missing:
        announce(f"fetching {what}'s jars from Maven Central (once)")
        directory.mkdir(parents=True, exist_ok=True)
    for path, sha256 in missing:
        url = f"{MAVEN_CENTRAL}/{path}"
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                body = response.read()
        except OSError as err:
            raise JarsUnavailable(f"{what}'s jars could not be fetched: {err}") from None
        if hashlib.sha256(body).hexdigest() != sha256:
            raise JarsUnavailable(f"{url} does not have the SHA-256 {name}.txt pins")
        partial = directory / f".{Path(path).name}.part"
        partial.write_bytes(body)
        partial.replace(directory / Path(path).name)  # whole or absent
    return [directory / Path(p).name for p, _ in jars]


def s3a_jars() -> list[Path]:
    """hadoop-aws's jars, for checkpoints on an object store."""
    return fetched("s3a", "hadoop-aws (s3a:// checkpoints)", log.info)
