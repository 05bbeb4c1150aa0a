#!/usr/bin/env bash
# The README's main command: set up a virtualenv with the project on a fresh machine, then run the
# main job (bundled example traces -> Dagster runs -> warehouse in ./lumos_warehouse, Dagster
# instance in ./.dagster_home). Extra arguments go to `python -m pipelines.main`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# (Re-)install when pyproject.toml changed since the last install: pip takes seconds even when
# there is nothing to do.
STAMP=.venv/.lumos-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || ! .venv/bin/python -c "import lumos" 2>/dev/null; then
  .venv/bin/python -m pip install -q -e .
  touch "$STAMP"
fi
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}"
exec .venv/bin/python -m pipelines.main "$@"
