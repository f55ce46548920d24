"""How a variable's text becomes its value: each parser raises ValueError for text it refuses.

Durations follow one rule everywhere (variables, Flink SQL options): a number with its unit, `0`
the only bare number, since Flink reads a bare number as milliseconds where this service once
read seconds, so neither reading is safe to assume.
"""

from __future__ import annotations

import json
import os
import re

DURATION = "a duration with its unit, like 500ms, 5s, 2 minutes, 1h"
AVAILABLE_NOW = "available-now"
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^\[?[A-Za-z0-9._:-]+\]?:\d{1,5}$")
_DURATION = re.compile(r"^\s*(\d+)\s*([a-zµ]*)\s*$")
# Flink's units (`TimeUtils.parseDuration`), each in nanoseconds: a label written with an `s`
# is Flink's plural, and only those Flink pluralizes take one (`mins` and `hs` it refuses).
_UNIT_NS = {
    **dict.fromkeys(["ns", "nano", "nanos", "nanosecond", "nanoseconds"], 1),
    **dict.fromkeys(["µs", "micro", "micros", "microsecond", "microseconds"], 1_000),
    **dict.fromkeys(["ms", "milli", "millis", "millisecond", "milliseconds"], 1_000_000),
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], 1_000_000_000),
    **dict.fromkeys(["m", "min", "minute", "minutes"], 60_000_000_000),
    **dict.fromkeys(["h", "hour", "hours"], 3_600_000_000_000),
    **dict.fromkeys(["d", "day", "days"], 86_400_000_000_000),
}
# ISO-8601 as java.time.Duration reads it, which Flink tries first: `PT1M`, `P1D`, `PT0.5S`.
_ISO_DURATION = re.compile(
    r"^P(?=[\dT])(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{0,9}))?S)?)?$",
    re.IGNORECASE,
)
_POSTGRES_URL = re.compile(r"^postgres(ql)?://[^\s/:@]+@[^\s/]+/[^\s/?]+$")
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$")


def duration_ms(text: str) -> int:
    """`500ms`, `5s`, `2 minutes`, `1h`, `7d`, `PT1M`, or `0`: Flink's units, whole
    milliseconds (a finer duration cut to them, as Flink's `Duration.toMillis`)."""
    iso = _ISO_DURATION.match(text.strip())
    if iso:
        days, hours, minutes, seconds, fraction = (part or "0" for part in iso.groups())
        whole = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)
        return whole * 1000 + int(fraction.ljust(9, "0")[:3])
    match = _DURATION.match(text.lower())
    if match and match.group(2) == "" and int(match.group(1)) == 0:
        return 0
    if not match or match.group(2) not in _UNIT_NS:
        raise ValueError(text)
    return int(match.group(1)) * _UNIT_NS[match.group(2)] // 1_000_000


def trigger_ms(text: str) -> int | None:
    """A micro-batch interval, or None for `available-now`."""
    return None if text.lower() == AVAILABLE_NOW else duration_ms(text)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value


def whole(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(text)
    return value


def bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",")]
    if not all(_HOST_PORT.match(s) for s in servers):
        raise ValueError(text)
    return ",".join(servers)


def column_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(","))
    if not all(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", n) for n in names):
        raise ValueError(text)
    return names


STARTING_MODES = ("earliest", "latest", "group-offsets")
# `timestamp:<epoch ms>`: each partition from its first record at or after that time (Flink's
# `scan.startup.mode` = `timestamp`)
AT_TIME = "timestamp:"
# In a topic's offsets, where its partitions not named start: a mode (Flink's `specific-offsets`
# starts them at its group's committed offsets, else the earliest)
OTHER_PARTITIONS = "*"


def start_time(mode: str) -> int | None:
    """The epoch milliseconds of a `timestamp:<ms>` start, None for any other."""
    if not mode.startswith(AT_TIME):
        return None
    text = mode[len(AT_TIME) :]
    if not text.isdigit():
        raise ValueError(mode)
    return int(text)


def _a_mode(start: object) -> bool:
    return isinstance(start, str) and (start in STARTING_MODES or start_time(start) is not None)


def _offsets(start: object) -> bool:
    """A topic's partitions' offsets, its other partitions' mode beside them if given."""
    return isinstance(start, dict) and all(
        _a_mode(o)
        if p == OTHER_PARTITIONS
        # a partition as the source names it: "1", not "01" (found by no partition, unread)
        else p.isdigit() and p == str(int(p)) and isinstance(o, int) and o >= -2
        for p, o in start.items()
    )


def starting_offsets(text: str) -> str:
    """`earliest`, `latest`, `group-offsets`, `timestamp:<epoch ms>`, or JSON naming each
    topic's start: one of those modes, or its partitions' offsets `{"partition": offset}` (-2
    earliest, -1 latest), with `"*"` the mode of the partitions not named."""
    if _a_mode(text.lower()):
        return text.lower()
    spec = json.loads(text)
    if not isinstance(spec, dict) or not all(
        _a_mode(start) or _offsets(start) for start in spec.values()
    ):
        raise ValueError(text)
    return text


def folder(text: str) -> str:
    """A directory's path: a directory, or nothing yet (made when first used)."""
    if not text.strip() or (os.path.exists(text) and not os.path.isdir(text)):
        raise ValueError(text)
    return text


def folder_or_off(text: str) -> str:
    return text if text.lower() == "off" else folder(text)


def http_url(text: str) -> str:
    if not re.match(r"^https?://[^\s/]+", text):
        raise ValueError(text)
    return text


def kafka_name(text: str) -> str:
    """A topic name, or a transactional id: Kafka's legal characters."""
    if not TOPIC_NAME.match(text):
        raise ValueError(text)
    return text


def postgres_url(text: str) -> str:
    """`postgresql://user@host:port/db`, with no password in it."""
    if not _POSTGRES_URL.match(text) or ":" in text.split("://", 1)[1].split("@", 1)[0]:
        raise ValueError(text)
    return text


def table_name(text: str) -> str:
    if not _TABLE.match(text):
        raise ValueError(text)
    return text
