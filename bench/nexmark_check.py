"""A result of a Nexmark query as a count and a checksum of its rows, the same for Flink's rows
(`bench/nexmark_flink.py --check`) and the service's (its output topic's JSON): two results are
equal, as multisets of rows, when both are. Python's standard library only: the Flink venv
imports it too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any


def canonical(value: Any) -> Any:
    """A value as the JSON of the output writes it: a timestamp as Flink's JSON format writes
    it, `yyyy-MM-dd HH:mm:ss` and the fraction's digits up to the last that is not 0, to the
    nearest millisecond (PyFlink hands 1.003 s over as 1.002999)."""
    if isinstance(value, datetime):
        epoch = datetime(1970, 1, 1, tzinfo=value.tzinfo)
        moment = epoch + timedelta(milliseconds=round((value - epoch) / timedelta(milliseconds=1)))
        fraction = f"{moment.microsecond:06d}".rstrip("0")
        return moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{fraction}" if fraction else "")
    return value


def checksum(rows: Iterable[Sequence[Any]]) -> dict[str, Any]:
    """`{"rows": n, "checksum": hex}`: the sum of the rows' hashes, whatever their order."""
    count, total = 0, 0
    for row in rows:
        text = json.dumps([canonical(v) for v in row], separators=(",", ":"))
        total += int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        count += 1
    return {"rows": count, "checksum": f"{total % (1 << 64):016x}"}
