"""Shared test fixtures: where the real data lives, and a fresh warehouse per test.

Tests that need `../shared` skip with a reason on a fresh clone that lacks it, except under CI
(`CI=true`), where its absence is a failure: CI must run them.
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

# the session's warehouse of the real replay traces and their replays (`real_wh`, `replays`)
pytest_plugins = ("real_replays",)

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
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real single-rank run of `torch_traces.TINY_GPT` by the ground-truth trainer (~10 s),
    recorded once for the tests that estimate from it: the folder holding its job `base`."""
    from torch_traces import TINY_GPT, require_torch

    require_torch()
    from lumos.groundtruth.config import RunControl, make_config
    from lumos.groundtruth.runner import run_config

    runs = tmp_path_factory.mktemp("tiny") / "runs"
    run_config(
        make_config(TINY_GPT, name="base"), RunControl(repeat=3, steps=1, warmup=1), runs,
        "merged", log=lambda m: None,
    )  # fmt: skip
    return runs


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture()
def warehouse_dir(tmp_path: Path) -> Path:
    return tmp_path / "wh"


# A local S3 server for the tests of an S3 warehouse (tests/test_lake*.py): moto's server mode on
# 127.0.0.1, a real HTTP server speaking S3 (conditional puts included).


def _need_module(module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{module} is not installed: CI installs it with the dev extra")
    pytest.skip(f"{module} not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def s3_server() -> str:
    _need_module("deltalake")
    _need_module("moto")
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _fresh_bucket(endpoint: str) -> dict[str, str]:
    """The standard AWS variables for a new bucket (`BUCKET`) on the local server at
    `endpoint`, created."""
    import boto3

    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "lumos-test",
        "AWS_SECRET_ACCESS_KEY": "lumos-test",
        "AWS_REGION": "us-east-1",
        "BUCKET": f"lumos-{uuid.uuid4().hex[:12]}",
    }
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    ).create_bucket(Bucket=env["BUCKET"])
    return env


@pytest.fixture(scope="session")
def fresh_bucket() -> Callable[[str], dict[str, str]]:
    """`_fresh_bucket`, for fixtures of a wider scope than `s3_env`'s."""
    return _fresh_bucket


@pytest.fixture
def s3_env(s3_server: str) -> dict[str, str]:
    """The standard AWS variables for a fresh bucket on the local server."""
    return _fresh_bucket(s3_server)
