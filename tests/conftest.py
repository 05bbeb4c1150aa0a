"""Shared test fixtures: where the real data lives, and a fresh warehouse per test.

Tests that need `../shared` skip with a reason on a fresh clone that lacks it, except under CI
(`CI=true`), where its absence is a failure: CI must run them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Resolved: CI links ../shared into place, and the warehouse records files by their real path.
SHARED = Path(os.environ.get("LUMOS_SHARED", ROOT.parent / "shared")).resolve()
SHARED_TRACES = SHARED / "traces"
SHARED_OPBENCH = SHARED / "opbench"
EXAMPLES = ROOT / "examples" / "traces"


def _require(path: Path) -> Path:
    if path.exists():
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{path} is missing: CI must run with ../shared beside the clone")
    pytest.skip(f"{path} not present (a fresh clone without ../shared); set LUMOS_SHARED to run")


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    return _require(SHARED_TRACES)


@pytest.fixture(scope="session")
def shared_opbench() -> Path:
    return _require(SHARED_OPBENCH)


@pytest.fixture(scope="session")
def gpu_runs(shared_traces: Path) -> Path:
    """The H100 training runs with their measurements (../shared/traces/gpu_h100)."""
    return _require(shared_traces / "gpu_h100")


@pytest.fixture(scope="session")
def gpu_wh(gpu_runs: Path, tmp_path_factory: pytest.TempPathFactory):
    """A warehouse holding every H100 run, each its own job (`gpu_h100/<run>`)."""
    from lumos.api import Warehouse

    wh = Warehouse.open(tmp_path_factory.mktemp("gpu_h100") / "wh", create=True)
    report = wh.ingest([gpu_runs])
    assert not report.refused, report.refused
    return wh


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture()
def warehouse_dir(tmp_path: Path) -> Path:
    return tmp_path / "wh"
