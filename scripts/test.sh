#!/usr/bin/env bash
# The README's test command: set up a virtualenv with the project and its dev extras, lint, test.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev,train]"
# The report tests open the HTML reports in the distribution's Chromium, driven by playwright
# (`playwright install` would download a browser build). ~45 s on Debian 12 when absent.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}"
.venv/bin/python -m pytest -q --durations=15 "$@"
