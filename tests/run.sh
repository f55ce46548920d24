#!/usr/bin/env bash
# The whole test suite, from a fresh clone: makes .venv, installs the project with its test
# extras, checks lint, runs pytest. Needs Python >= 3.10 and Java 17 on the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -ra --durations=25 "$@"
