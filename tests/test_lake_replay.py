"""Replay, estimate and sweep on an S3 warehouse (issue 38), against a real local S3 server
(moto's server mode, tests/conftest.py) and the real command line: the same traces give on S3 the
replay tables, `lumos status` and the estimates of a local warehouse; a replay killed after
uploading its result files and before its Delta commit leaves nothing visible, and the next one
completes; a replay run again commits nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cli_run import ROOT, lumos

# the replay's answers compared between warehouses (run times and dates left out)
REPLAY_QUERIES = (
    "select * from iteration_replay order by all",
    "select * from replay_quality order by all",
    "select job, inputs_sha256, code_sha256, status, error, explained, n_ranks, n_tasks "
    "from replay_runs order by all",
    "select job, rank, mode, count(*), sum(start_ns), sum(end_ns), sum(crit_src) "
    "from schedules group by all order by all",
    "select * from breakdown order by all",
)
ESTIMATE_QUERIES = (
    "select * exclude (sweep_id, created_at) from estimates order by all",
    "select * exclude (inferred_at) from job_configs order by all",
    "select * exclude (sweep_id, created_at) from estimate_vs_measured order by all",
)
GRID = ROOT / "examples" / "grids" / "gpt_cpu.yaml"


@pytest.fixture(scope="module")
def inputs(examples: Path) -> list[str]:
    """A CPU job of three steps (the estimate's base) and one rank of a GPU job."""
    return [str(examples / "gpt_cpu"), str(examples / "nccl_a100")]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The mirrors of the S3 warehouses in a folder of the test's own."""
    return {"LUMOS_CACHE": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def local_replay(inputs: list[str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A local warehouse of `inputs`, replayed; and what `lumos replay` printed."""
    wh = tmp_path_factory.mktemp("local") / "wh"
    res = lumos("ingest", *inputs, "--warehouse", str(wh), "-q")
    assert res.returncode == 0, res.stderr
    res = lumos("replay", "--warehouse", str(wh))
    assert res.returncode == 0, res.stderr
    return wh, res.stdout


@pytest.fixture(scope="module")
def local_wh(local_replay: tuple[Path, str]) -> Path:
    return local_replay[0]


@pytest.fixture(scope="module")
def bucket(s3_server: str, cache: dict[str, str], fresh_bucket) -> tuple[str, dict]:  # noqa: ANN001
    """A fresh bucket on the local server, and the environment that reaches it."""
    env = fresh_bucket(s3_server)
    return env.pop("BUCKET"), {**env, **cache}


@pytest.fixture(scope="module")
def s3_wh(bucket: tuple[str, dict], inputs: list[str]) -> tuple[str, dict]:
    """An S3 warehouse holding `inputs`, not replayed; and its environment."""
    name, env = bucket
    uri = f"s3://{name}/wh"
    res = lumos("ingest", *inputs, "--warehouse", uri, "-q", env=env)
    assert res.returncode == 0, res.stderr
    return uri, env


@contextmanager
def _warehouse(wh: str | Path, env: dict[str, str]) -> Iterator[object]:
    """`wh` opened in this process through the notebook API, with `env` set meanwhile."""
    from lumos.api import Warehouse

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield Warehouse.open(wh, object_store=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _answers(wh: str | Path, env: dict[str, str], queries: tuple[str, ...]) -> list[list[tuple]]:
    """The queries' rows on `wh` (one connection: one snapshot)."""
    with _warehouse(wh, env) as opened:
        con = opened.connect()
        try:
            return [con.sql(q).fetchall() for q in queries]
        finally:
            con.close()


def _replay_states(uri: str, env: dict[str, str]) -> dict[str, str]:
    """Where each job's replay stands, as `lumos status` says."""
    with _warehouse(uri, env) as opened:
        jobs = opened.status()["jobs"]
        return dict(zip(jobs["job"], jobs["replay"], strict=True))


def _results_version(uri: str, env: dict[str, str]) -> int:
    from deltalake import DeltaTable

    from warehouse.lake import storage_options

    return DeltaTable(f"{uri}/results", storage_options=storage_options(env)).version()


# A replay killed between the upload of its result files and their Delta commit: the put of the
# first result file is followed by SIGKILL (argv: the warehouse URI).
_KILLED = """
import os, signal, sys
from warehouse import lake_files
from lumos.replay.fleet import replay_fleet
put = lake_files.LakeFiles.put
def put_then_die(self, local, relative):
    put(self, local, relative)
    if relative.startswith("tables/"):
        os.kill(os.getpid(), signal.SIGKILL)
lake_files.LakeFiles.put = put_then_die
replay_fleet(sys.argv[1])
"""


def test_replay_on_s3_gives_the_local_tables_and_a_killed_one_leaves_nothing(
    s3_wh: tuple[str, dict], local_replay: tuple[Path, str]
) -> None:
    uri, env = s3_wh
    local_wh, local_printed = local_replay
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED, uri],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        timeout=240,
    )
    assert killed.returncode == -9
    assert _replay_states(uri, env) == {"gpt_cpu": "none", "nccl_a100": "none"}
    res = lumos("sql", "select * from iteration_replay", "--warehouse", uri, env=env)
    assert res.returncode == 1 and "iteration_replay does not exist" in res.stderr, res.stderr

    res = lumos("replay", "--warehouse", uri, env=env)
    assert res.returncode == 0, res.stderr
    assert "2 job(s): 2 replayed, 0 failed" in res.stdout, res.stdout
    # the table printed: the same figures
    assert res.stdout.splitlines()[:-1] == local_printed.splitlines()[:-1]
    theirs = _answers(uri, env, REPLAY_QUERIES)
    assert theirs == _answers(local_wh, {}, REPLAY_QUERIES)
    assert len(theirs[0]) > 0 and {r[0] for r in theirs[2]} == {"gpt_cpu", "nccl_a100"}
    # another engine (delta-rs) reads a result table as a Delta table of its own, without lumos
    from deltalake import DeltaTable

    from warehouse.lake import storage_options

    table = DeltaTable(f"{uri}/tables/iteration_replay", storage_options=storage_options(env))
    rows = sorted(tuple(r.values()) for r in table.to_pyarrow_table().to_pylist())
    assert rows == sorted(theirs[0])
    s3_status = lumos("status", "--warehouse", uri, env=env)
    local_status = lumos("status", "--warehouse", str(local_wh))
    assert s3_status.stdout.replace(uri, str(local_wh)) == local_status.stdout
    assert _replay_states(uri, env) == {"gpt_cpu": "ok", "nccl_a100": "ok"}

    # current: skipped, and no commit
    version = _results_version(uri, env)
    again = lumos("replay", "--warehouse", uri, env=env)
    assert "0 replayed, 2 current" in again.stdout, again.stdout
    assert _results_version(uri, env) == version
    res = lumos("replay", "--job", "nope", "--warehouse", uri, env=env)
    assert res.returncode == 2, res.stderr
    assert f"{uri}: job 'nope' is not in the warehouse (known: gpt_cpu, nccl_a100)" in res.stderr


def test_estimate_and_sweep_on_s3_give_the_local_figures(
    s3_wh: tuple[str, dict], local_wh: Path
) -> None:
    uri, env = s3_wh
    target = ("estimate", "--job", "gpt_cpu", "--set", "layers=4", "dp=2", "--json")
    mine = lumos(*target, "--warehouse", uri, env=env)
    assert mine.returncode == 0, mine.stderr
    assert json.loads(mine.stdout) == json.loads(
        lumos(*target, "--warehouse", str(local_wh)).stdout
    )

    for wh, e in ((uri, env), (str(local_wh), {})):
        res = lumos("sweep", "--job", "gpt_cpu", "--grid", str(GRID), "--warehouse", wh, env=e)
        assert res.returncode == 0 and "wrote 30 rows to estimates" in res.stdout, res.stderr
    theirs = _answers(uri, env, ESTIMATE_QUERIES)
    assert theirs == _answers(local_wh, {}, ESTIMATE_QUERIES)
    assert len(theirs[0]) == 30 and len(theirs[2]) == 1  # the base's own configuration

    res = lumos("estimate", "--job", "gpt_cpu", "--warehouse", f"{uri}-none", env=env)
    assert res.returncode == 2 and f"{uri}-none: no lumos warehouse here" in res.stderr


def test_dagster_ingest_and_replay_on_s3_give_the_local_tables(
    bucket: tuple[str, dict],
    local_wh: Path,
    examples: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ingest job's assets (ingest, checks, replay, catalog) on another prefix of the bucket,
    in process: the replay tables of the job are the local warehouse's."""
    from pipelines.assets.catalog import warehouse_catalog
    from pipelines.assets.ingest import trace_events
    from pipelines.assets.replay import job_replay
    from pipelines.checks import trace_events_checks
    from pipelines.checks_replay import replay_accuracy
    from tests.dagster_run import materialize_job

    name, env = bucket
    uri = f"s3://{name}/dagster"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = materialize_job(
        [trace_events, trace_events_checks, job_replay, replay_accuracy, warehouse_catalog],
        "gpt_cpu",
        examples,
        uri,  # type: ignore[arg-type]
        reports=tmp_path
        / "reports",  # an S3 warehouse's default, ./lumos_reports: not the checkout
        raise_on_error=False,
    )
    assert res.success, [e.message for e in res.all_events if e.is_failure]
    checks = {c.check_name: c.passed for c in res.get_asset_check_evaluations()}
    assert checks == {
        "ranks_complete": True,
        "no_refused_files": True,
        "has_events": True,
        "replay_accuracy": True,
    }
    mine = [[r for r in rows if r[0] == "gpt_cpu"] for rows in _answers(uri, env, REPLAY_QUERIES)]
    local = [
        [r for r in rows if r[0] == "gpt_cpu"] for rows in _answers(local_wh, {}, REPLAY_QUERIES)
    ]
    assert mine == local and len(mine[0]) > 0


def test_a_new_manifest_version_downloads_only_the_files_it_adds(
    s3_server: str,
    fresh_bucket,  # noqa: ANN001
    examples: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After an ingest (a new manifest version), an S3 warehouse's mirror links the data files
    it already holds and downloads only the new job's: a nightly ingest does not make the next
    estimate fetch the whole warehouse again."""
    from warehouse import lake_files
    from warehouse.lake_mirror import mirror

    env = fresh_bucket(s3_server)
    uri = f"s3://{env.pop('BUCKET')}/wh"
    env["LUMOS_CACHE"] = str(tmp_path / "cache")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    fetched: list[str] = []
    get = lake_files.LakeFiles.get

    def counted(self, relative: str, local: str) -> None:  # noqa: ANN001
        fetched.append(relative)
        get(self, relative, local)

    monkeypatch.setattr(lake_files.LakeFiles, "get", counted)

    def mirrored() -> tuple[set[str], list[str]]:
        """The events files of the latest version's mirror, and the data files it fetched."""
        fetched.clear()
        with mirror(uri) as local:
            have = {
                str(p.relative_to(local.root)) for p in local.root.glob("events/job=*/**/*.parquet")
            }
        return have, [f for f in fetched if f.startswith(("events/", "trace_meta/"))]

    for job in ("gpt_cpu", "nccl_a100"):
        res = lumos("ingest", str(examples / job), "--warehouse", uri, "-q", env=env)
        assert res.returncode == 0, res.stderr
        have, data = mirrored()
        if job == "gpt_cpu":
            first = have
            assert len(data) == 2 * len(first) > 0  # every events and trace_meta file, once
        else:
            added = have - first
            assert first < have and all("nccl_a100" in f for f in added)
            assert sorted(data) == sorted(
                [*added, *(f.replace("events/", "trace_meta/", 1) for f in added)]
            )
