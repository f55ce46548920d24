"""Whether a process still runs, for files named after (or holding) the process that wrote them:
a process killed with its tree leaves its files behind, and they must not speak for it."""

from __future__ import annotations

import os


def running(pid: int) -> bool:
    """Whether process `pid` exists (another user's counts: it cannot be signalled, but runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
