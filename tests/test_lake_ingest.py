"""An S3 warehouse end to end (issue 38), against a real local S3 server (moto's server mode,
tests/conftest.py) and the real command line: three ingests at once end with the rows of one,
an ingest killed between its uploads and its Delta commit leaves nothing visible and the next
completes, `lumos sql` and `status` answer as on a local warehouse of the same traces, and
`lumos migrate` copies a local warehouse with nothing lost (and nothing done when run again)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import ROOT, lumos

# the answers compared between warehouses: every row of the manifest but its times, each
# rank's events (count, a sum of times, a hash of names) and the trace metadata
QUERIES = (
    "select job, rank, sha256, path, status, error, n_events, events_file from traces order by all",
    "select job, rank, trace_sha256, count(*), sum(ts_ns), sum(hash(name)) from events "
    "group by all order by all",
    "select job, rank, key, value_json from trace_meta order by all",
    "select * exclude (last_ingested_at) from jobs order by all",
)


@pytest.fixture(scope="module")
def inputs(examples: Path, shared_traces: Path) -> list[str]:
    """Eight ranks of one job, a CPU-only trace, and a file that is refused (not Kineto)."""
    return [
        str(examples / "dlrm_8rank"),
        str(shared_traces / "hta" / "cpu_only"),
        str(shared_traces / "param" / "linear" / "linear_et.json.gz"),
    ]


@pytest.fixture(scope="module")
def local_wh(inputs: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("local") / "wh"
    res = lumos("ingest", *inputs, "--warehouse", str(wh), "-q")
    assert res.returncode == 1 and "1 file(s) refused" in res.stderr, res.stderr
    return wh


def _answers(wh: str | Path, env: dict[str, str]) -> list[list[tuple]]:
    """The QUERIES' rows on `wh`, read in this process through the notebook API (the command
    line's `lumos sql` is run by the tests themselves)."""
    from lumos.api import Warehouse

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        wh = Warehouse.open(wh, object_store=True)
        return [[tuple(r.values()) for r in wh.arrow(q).to_pylist()] for q in QUERIES]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def local_answers(local_wh: Path) -> list[list[tuple]]:
    return _answers(local_wh, {})


def _ingest(env: dict[str, str], uri: str, paths: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lumos", "ingest", *paths, "--warehouse", uri, "-q"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sql_and_status_on_s3_answer_as_the_local_warehouse(
    s3_env: dict[str, str], inputs: list[str], local_wh: Path, local_answers: list[list[tuple]]
) -> None:
    uri = f"s3://{s3_env['BUCKET']}/wh"
    res = lumos("status", "--warehouse", uri, env=s3_env)
    assert res.returncode == 2 and f"{uri}: no lumos warehouse here" in res.stderr
    res = lumos("ingest", *inputs, "--warehouse", uri, "-q", env=s3_env)
    assert res.returncode == 1 and "1 file(s) refused" in res.stderr, res.stderr
    assert "9 file(s): 9 ingested" not in res.stdout and "8 ingested" not in res.stdout
    assert "10 file(s): 9 ingested, 0 unchanged, 1 refused" in res.stdout, res.stdout

    from warehouse.lake import LakeManifest

    version = LakeManifest.at(uri, s3_env).version()
    again = lumos("ingest", *inputs, "--warehouse", uri, "-q", env=s3_env)
    assert "10 file(s): 0 ingested, 9 unchanged, 1 refused" in again.stdout, again.stdout
    assert LakeManifest.at(uri, s3_env).version() == version  # a no-op: no commit

    theirs = _answers(uri, s3_env)
    assert theirs == local_answers
    _read_as_delta_tables(uri, s3_env, theirs[1])
    assert len(theirs[0]) == 10 and len(theirs[1]) == 9  # 9 traces' ranks, and a refused file
    csv = lumos("sql", QUERIES[1], "--warehouse", uri, "--format", "csv", env=s3_env)
    local_csv = lumos("sql", QUERIES[1], "--warehouse", str(local_wh), "--format", "csv")
    assert csv.returncode == 0 and csv.stdout == local_csv.stdout, csv.stderr

    local_status = lumos("status", "--warehouse", str(local_wh))
    s3_status = lumos("status", "--warehouse", uri, env=s3_env)
    assert s3_status.returncode == 0, s3_status.stderr
    assert s3_status.stdout.replace(uri, str(local_wh)) == local_status.stdout
    assert "9 file(s) ok, 1 refused" in s3_status.stdout and "linear_et" in s3_status.stdout

    # a read-only query reads the warehouse and nothing else
    res = lumos("sql", "select * from read_csv('/etc/hostname')", "--warehouse", uri, env=s3_env)
    assert res.returncode == 1 and "disabled" in res.stderr, res.stderr
    # a command that reads a warehouse by its paths runs in its mirror: describe answers as on
    # the local warehouse
    local = lumos("describe", "--job", "dlrm_8rank", "--json", "--warehouse", str(local_wh))
    res = lumos("describe", "--job", "dlrm_8rank", "--json", "--warehouse", uri, env=s3_env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json.loads(local.stdout)


def _read_as_delta_tables(uri: str, env: dict[str, str], events: list[tuple]) -> None:
    """Another engine (delta-rs, as Spark or Polars would) reads the events and trace_meta as
    Delta tables, without lumos: the same rows per rank as lumos's own views."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from warehouse.lake import storage_options

    opts = storage_options(env)
    table = DeltaTable(f"{uri}/events", storage_options=opts).to_pyarrow_table()
    counts = table.group_by(["job", "rank"]).aggregate([("ts_ns", "count")])
    got = sorted(zip(*(counts.column(c).to_pylist() for c in counts.column_names), strict=True))
    assert got == sorted((r[0], r[1], r[3]) for r in events)
    meta = DeltaTable(f"{uri}/trace_meta", storage_options=opts).to_pyarrow_table()
    assert set(pc.unique(meta.column("rank")).to_pylist()) == {r[1] for r in events}


def test_three_ingests_at_once_end_with_the_rows_of_one(
    s3_env: dict[str, str], inputs: list[str], local_wh: Path, local_answers: list[list[tuple]]
) -> None:
    uri = f"s3://{s3_env['BUCKET']}/fleet"
    # each process takes the files in another order, so that they race on different files
    orders = [inputs, inputs[::-1], [inputs[1], inputs[0], inputs[2]]]
    procs = [_ingest(s3_env, uri, order) for order in orders]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 1 and "1 file(s) refused" in err, err
    assert _answers(uri, s3_env) == local_answers
    _read_as_delta_tables(uri, s3_env, local_answers[1])  # concurrent adds: each file once


# An ingest killed between the upload of its data files and its Delta commit: the put of the
# first batch's last file is followed by SIGKILL (argv: warehouse URI, then the paths).
_KILLED = """
import os, signal, sys
from warehouse import lake_files
from warehouse.ingest import ingest
put = lake_files.LakeFiles.put
def put_then_die(self, local, relative):
    put(self, local, relative)
    if relative.startswith("trace_meta/"):
        os.kill(os.getpid(), signal.SIGKILL)
lake_files.LakeFiles.put = put_then_die
ingest(sys.argv[2:], warehouse=sys.argv[1])
"""


def test_an_ingest_killed_mid_commit_leaves_nothing_visible(
    s3_env: dict[str, str], inputs: list[str], local_wh: Path, local_answers: list[list[tuple]]
) -> None:
    import boto3

    uri = f"s3://{s3_env['BUCKET']}/killed"
    env = {**os.environ, **s3_env, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-c", _KILLED, uri, *inputs], cwd=ROOT, env=env, timeout=240
    )
    assert res.returncode == -9
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_env["AWS_ENDPOINT_URL"],
        aws_access_key_id=s3_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=s3_env["AWS_SECRET_ACCESS_KEY"],
        region_name=s3_env["AWS_REGION"],
    )
    listed = s3.list_objects_v2(Bucket=s3_env["BUCKET"], Prefix="killed/")
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert any(k.startswith("killed/events/") for k in keys)  # uploaded, never committed
    status = lumos("status", "--warehouse", uri, env=s3_env)
    assert status.returncode == 0, status.stderr
    assert "no traces yet" in status.stdout
    count = lumos("sql", "select count(*) as n from events", "--warehouse", uri, env=s3_env)
    assert count.stdout.split() == ["n", "0"], count.stdout
    assert not any(k.startswith("killed/events/_delta_log/") for k in keys)  # no table yet

    res = lumos("ingest", *inputs, "--warehouse", uri, "-q", env=s3_env)
    assert "10 file(s): 9 ingested, 0 unchanged, 1 refused" in res.stdout, res.stdout
    assert _answers(uri, s3_env) == local_answers
    _read_as_delta_tables(uri, s3_env, local_answers[1])


def test_migrate_copies_a_local_warehouse_with_nothing_lost(
    s3_env: dict[str, str], local_wh: Path, shared_traces: Path, local_answers: list[list[tuple]]
) -> None:
    uri = f"s3://{s3_env['BUCKET']}/migrated"
    res = lumos("migrate", "--from", str(local_wh), "--to", uri, env=s3_env)
    assert res.returncode == 0, res.stderr
    assert "18 data file(s) copied, 0 already there; 10 manifest row(s) committed" in res.stdout
    lines = [ln.split() for ln in res.stdout.splitlines()[2:]]
    assert [ln[0] for ln in lines] == ["traces", "events", "trace_meta", "data"]
    assert all(ln[-1] == "yes" for ln in lines), res.stdout
    assert lines[0][1:3] == ["10", "10"]  # the refused file's row too
    assert _answers(uri, s3_env) == local_answers
    _read_as_delta_tables(uri, s3_env, local_answers[1])

    again = lumos("migrate", "--from", str(local_wh), "--to", uri, env=s3_env)
    assert again.returncode == 0, again.stderr
    assert "0 data file(s) copied, 18 already there; 0 manifest row(s) committed" in again.stdout

    # a difference is found: the S3 warehouse gets a trace the local one lacks
    extra = shared_traces / "hta" / "rank_non_gpu"
    assert lumos("ingest", str(extra), "--warehouse", uri, "-q", env=s3_env).returncode in (0, 1)
    res = lumos("migrate", "--from", str(local_wh), "--to", uri, env=s3_env)
    assert res.returncode == 1 and "differs" in res.stderr
    assert "NO" in res.stdout.splitlines()[2]

    res = lumos("migrate", "--from", str(local_wh.parent / "none"), "--to", uri, env=s3_env)
    assert res.returncode == 2 and "no lumos warehouse here" in res.stderr


def test_windows_and_held_ranks_are_placed_on_s3_as_on_a_local_warehouse(
    s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decisions that read the warehouse's files (a later profiling window, found by the
    steps of the rank's file already in; a rank held by other content) read them from S3."""
    import json

    from tests.test_windows import _windows, _write
    from warehouse.ingest import RANK_HELD, ingest

    folder = tmp_path / "ddp"
    folder.mkdir()
    files = {(r, w): _write(folder, r, w, c) for r in (0, 1) for w, c in enumerate(_windows(r))}
    edited = json.loads(files[(0, 1)].read_text())
    edited["traceEvents"] = edited["traceEvents"][:-1]
    other = tmp_path / "edited.pt.trace.json"
    other.write_text(json.dumps(edited))
    for k, v in s3_env.items():
        monkeypatch.setenv(k, v)
    answers = []
    for wh in (tmp_path / "wh", f"s3://{s3_env['BUCKET']}/windows"):
        # the later window arrives first: the earlier one is placed by reading its steps
        assert not ingest([files[(0, 1)], files[(1, 1)]], warehouse=wh, job="ddp").refused
        report = ingest([files[(0, 0)], files[(1, 0)]], warehouse=wh, job="ddp")
        assert {f.job for f in report.files} == {"ddp/steps-2"}
        report = ingest([other], warehouse=wh, job="ddp")
        assert len(report.refused) == 1 and RANK_HELD in report.refused[0].error
        answers.append(_answers(wh, {}))
    assert answers[0] == answers[1]
