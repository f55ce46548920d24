#!/usr/bin/env bash
# The whole test suite, from a fresh clone: makes .venv, installs the project with its test
# extras, checks lint, runs pytest. Needs Python >= 3.10 and Java 17 on the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Two processes side by side (pytest-xdist), each test file whole in one of them (its module's
# fixtures set up once): the suite's tests wait on brokers, JVMs and services for much of their
# time, which the other process fills. `-n 0` runs them in this one process.
exec .venv/bin/python -m pytest -ra --durations=25 -n 2 --dist loadfile "$@"
