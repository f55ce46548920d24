"""The service's own processes: how one runs a module of the service, and whether one still runs
(for files named after, or holding, the process that wrote them: a process killed with its tree
leaves its files behind, and they must not speak for it)."""

from __future__ import annotations

import os
import sys

# Python's `-m module` puts the working directory first on the module's path, and a folder there
# named like one of the service's packages (a user's own `app` or `state`) is imported instead
# of the service's. This option (Python 3.11) leaves it off.
SAFE_PATH = "-P"


def python_module(module: str, *arguments: str) -> list[str]:
    """The command that runs `module` of the service in this interpreter, as `python -m` does,
    importing the service's code wherever it is started."""
    return [sys.executable, SAFE_PATH, "-m", module, *arguments]


def running(pid: int) -> bool:
    """Whether process `pid` exists (another user's counts: it cannot be signalled, but runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
