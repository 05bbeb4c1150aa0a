#!/usr/bin/env bash
# The README's test command: set up a virtualenv with the project and its dev extras, lint, test.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev,train]"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}"
.venv/bin/python -m pytest -q "$@"
