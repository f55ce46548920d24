"""How much a join multiplies its input (its fan-out), and which keys make it so (hot keys).

A change of a key that holds n rows of the other input emits up to n changes (2n for an
update's -U/+U), so one key in every order (a default product, a NULL-ish customer) can make a
join's output, and its micro-batches, grow far past its input. A join counts, per input change,
the changes it emitted, in the buckets of a histogram (`streamjoin_join_fanout`), and names in a
log line a key that holds more than `hot_rows` rows of one input, at most once a minute per key
and worker (`streamjoin_hot_key_reports_total`): the key to look at, not a stream of lines.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from typing import Any

from ops.metrics import FANOUT_BOUNDS, fanout_labels

HOT_KEY_LOG_INTERVAL_S = 60.0
_LOGGED_KEYS = 1_000  # keys remembered as logged before the stale ones are forgotten

log = logging.getLogger(__name__)


class Fanout:
    """One task's counts: changes emitted per input change, by bucket, and hot-key reports;
    `take` hands them to the accumulator as `{("fanout", bound) | ("fanout", "sum") |
    ("hot", input): count}`."""

    def __init__(self, hot_rows: int) -> None:
        """`hot_rows`: a key holding more rows of one input is logged (0: never)."""
        self.hot_rows = hot_rows
        self.buckets = [0] * (len(FANOUT_BOUNDS) + 1)
        self.emitted_total = 0
        self.hot: dict[str, int] = {}
        self.logged: dict[tuple[str, Any], float] = {}

    def emitted(self, changes: int) -> None:
        """One input change emitted `changes` changes."""
        self.buckets[bisect_left(FANOUT_BOUNDS, changes)] += 1
        self.emitted_total += changes

    def held(self, side: str, key: Any, rows: int) -> None:
        """The key holds `rows` rows of input `side` after a micro-batch's changes."""
        if self.hot_rows <= 0 or rows <= self.hot_rows:
            return
        now = time.monotonic()
        last = self.logged.get((side, key))
        if last is not None and now - last < HOT_KEY_LOG_INTERVAL_S:
            return
        if len(self.logged) >= _LOGGED_KEYS:
            self.logged = {
                seen: when
                for seen, when in self.logged.items()
                if now - when < HOT_KEY_LOG_INTERVAL_S
            }
        self.logged[(side, key)] = now
        self.hot[side] = self.hot.get(side, 0) + 1
        log.warning(
            "hot key: %r holds %d rows of input %s (HOT_KEY_ROWS=%d): each of its changes "
            "emits a change per matching row",
            key,
            rows,
            side,
            self.hot_rows,
        )

    def take(self) -> dict[tuple[str, str], int]:
        """The counts since the last call."""
        counts: dict[tuple[str, str], int] = {
            ("fanout", label): n
            for label, n in zip(fanout_labels(), self.buckets, strict=True)
            if n
        }
        if counts:
            counts[("fanout", "sum")] = self.emitted_total
        counts |= {("hot", side): n for side, n in self.hot.items()}
        self.buckets = [0] * len(self.buckets)
        self.emitted_total = 0
        self.hot = {}
        return counts
