"""The service's container image, built as CI builds it.

No image can be pulled here, so the base is made from Debian's packages: `mmdebstrap` writes a
bookworm root filesystem with Python 3.11 and its venv module to a tarball (~40 s, 171 MB),
`docker import` turns it into `streamjoin-base:bookworm`, kept by the engine between runs. The
Dockerfile is then built on it through its `BASE_IMAGE` argument, from a build context holding
exactly what the Dockerfile copies plus a wheelhouse and the jars `app/jars` lists (build
containers reach Debian's mirror, not PyPI nor Maven Central): the public default base,
`python:3.11-slim-bookworm`, takes the same steps.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.jars import s3a_jars

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "streamjoin-base:bookworm"
IMAGE = "streamjoin:ci"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
CONSTRAINTS = "ops/image-constraints.txt"  # the versions the image installs
CONTEXT = ("Dockerfile", "pyproject.toml", "README.md", "app", "serdes", "state", "ops")


class ImageUnavailable(RuntimeError):
    """What building the image needs is missing from this machine."""


def run_step(command: list[str], what: str, timeout_s: float) -> None:
    # The classic builder: Debian's engine and this client have no BuildKit plugin (buildx).
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{(result.stdout + result.stderr)[-4000:]}")


def has_image(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


@contextmanager
def one_builder() -> Iterator[None]:
    """Held while an image kept by the engine is looked for and built: the suite's processes
    (pytest-xdist's workers) start side by side, and each needs the same images."""
    with open(Path(tempfile.gettempdir()) / "streamjoin-image-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def base_image() -> str:
    """The Debian bookworm base, built from Debian's packages once per Docker engine."""
    with one_builder():
        if not has_image(BASE_IMAGE):
            _build_base()
    return BASE_IMAGE


def _build_base() -> None:
    if shutil.which("mmdebstrap") is None:
        raise ImageUnavailable("mmdebstrap is not installed (Debian package mmdebstrap)")
    with tempfile.TemporaryDirectory(prefix="streamjoin-base-") as work:
        tarball = Path(work) / "bookworm.tar"
        run_step(
            [
                "mmdebstrap",
                "--variant=minbase",
                f"--include={BASE_PACKAGES}",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "bookworm",
                str(tarball),
                f"deb {MIRROR} bookworm main",
                f"deb {MIRROR} bookworm-updates main",
                "deb http://deb.debian.org/debian-security bookworm-security main",
            ],
            "mmdebstrap",
            900,
        )
        run_step(
            ["docker", "import", "--change", "ENV LANG=C.UTF-8", str(tarball), BASE_IMAGE],
            "docker import",
            300,
        )


def build_on(base: str, context: str, tag: str, *build_args: str) -> None:
    """`docker build` of `context` as `tag`, its Dockerfile's BASE_IMAGE being `base`."""
    arguments = [a for value in (f"BASE_IMAGE={base}", *build_args) for a in ("--build-arg", value)]
    command = ["docker", "build", "--network", "host", *arguments, "--tag", tag, context]
    run_step(command, f"docker build of {tag}", 1800)


def service_image() -> str:
    """The Dockerfile built on `base_image()`, as `IMAGE`."""
    base = base_image()
    with tempfile.TemporaryDirectory(prefix="streamjoin-image-") as work:
        context = Path(work)
        skipped = shutil.ignore_patterns("__pycache__")
        for name in CONTEXT:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, context / name, ignore=skipped)
            else:
                shutil.copy2(source, context / name)
        run_step(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--wheel-dir",
                str(context / "wheels"),
                "--constraint",
                str(ROOT / CONSTRAINTS),
                str(ROOT),
                "setuptools>=68",
            ],
            "building the wheelhouse",
            900,
        )
        (context / "jars" / "s3a").mkdir(parents=True)
        for jar in s3a_jars():
            shutil.copy(jar, context / "jars" / "s3a")
        build_on(base, str(context), IMAGE, "PIP_NO_INDEX=1")
    return IMAGE
