"""The `lumos` command line, run as a real process: help, ingest, sql formats, status, errors."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import lumos

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dlrm_wh(
    tmp_path_factory: pytest.TempPathFactory, examples: Path
) -> tuple[Path, subprocess.CompletedProcess]:
    wh = tmp_path_factory.mktemp("cli") / "wh"
    res = lumos("ingest", str(examples / "dlrm_8rank"), "--warehouse", str(wh), "--workers", "2")
    return wh, res


@pytest.mark.parametrize("command", ["ingest", "sql", "status"])
def test_help(command: str) -> None:
    res = lumos(command, "--help")
    assert res.returncode == 0
    assert f"lumos {command}" in res.stdout and "--warehouse" in res.stdout


def test_ingest_prints_job_and_summary(dlrm_wh) -> None:
    wh, res = dlrm_wh
    assert res.returncode == 0, res.stderr
    assert (
        "job 'dlrm_8rank' (from the directory / file name): ranks 0, 1, 2, 3, 4, 5, 6, 7"
        in res.stdout
    )
    assert "8 ingested" in res.stdout and "0 refused" in res.stdout


def test_sql_json_is_one_array(dlrm_wh) -> None:
    wh, _ = dlrm_wh
    res = lumos(
        "sql",
        "select rank, count(*) as n, min(ts_ns) as t0 from events group by rank order by rank",
        "--warehouse",
        str(wh),
        "--format",
        "json",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert isinstance(rows, list) and [r["rank"] for r in rows] == list(range(8))
    assert all(set(r) == {"rank", "n", "t0"} and isinstance(r["t0"], int) for r in rows)
    empty = lumos("sql", "select 1 as x where false", "--warehouse", str(wh), "--format", "json")
    assert json.loads(empty.stdout) == []


def test_sql_csv_and_table(dlrm_wh) -> None:
    wh, _ = dlrm_wh
    q = "select job, rank from traces order by rank"
    res = lumos("sql", q, "--warehouse", str(wh), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [int(r["rank"]) for r in rows] == list(range(8))
    assert res.stdout.splitlines()[1] == f"{rows[0]['job']},0"  # no quotes a value does not need
    odd = lumos("sql", "select 'a,b' as x, 'q\"t' as y", "--warehouse", str(wh), "--format", "csv")
    assert list(csv.reader(io.StringIO(odd.stdout)))[1] == ["a,b", 'q"t']
    res = lumos("sql", q, "--warehouse", str(wh))
    assert res.returncode == 0 and "dlrm_8rank" in res.stdout


def test_sql_error_and_missing_warehouse(dlrm_wh, tmp_path: Path) -> None:
    wh, _ = dlrm_wh
    bad = lumos("sql", "select nope from events", "--warehouse", str(wh))
    assert bad.returncode == 1 and "nope" in bad.stderr
    missing = lumos("sql", "select 1", "--warehouse", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert "no lumos warehouse" in missing.stderr and str(tmp_path / "nowhere") in missing.stderr
    assert not (tmp_path / "nowhere").exists()


def test_sql_reads_the_warehouse_and_nothing_else(dlrm_wh, tmp_path: Path) -> None:
    """Issue 34, item 2: a query cannot write the warehouse or anywhere else, read files outside
    it, install extensions, run several statements or unlock its settings; --unsafe can."""
    wh, _ = dlrm_wh
    manifest = sorted(p.name for p in (wh / "manifest").iterdir())
    outside = tmp_path / "out.csv"
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    refused = {
        f"copy (select 1) to '{wh}/manifest/part-x.parquet'": "COPY",
        f"copy (select 1) to '{outside}'": "COPY",
        "install httpfs": "statements are not run",
        "set enable_external_access = true": "SET",
        "select 1; select 2": "one statement",
        f"attach '{tmp_path / 'x.db'}'": "ATTACH",
        "explain analyze select 1": "EXPLAIN ANALYZE",
    }
    for query, why in refused.items():
        res = lumos("sql", query, "--warehouse", str(wh))
        assert res.returncode == 2 and why in res.stderr, (query, res.stderr)
    for query in (f"select * from read_csv('{secret}')", f"select * from glob('{tmp_path}/*')"):
        res = lumos("sql", query, "--warehouse", str(wh))
        assert res.returncode == 1 and "Permission" in res.stderr, (query, res.stderr)
    assert sorted(p.name for p in (wh / "manifest").iterdir()) == manifest
    assert not outside.exists()
    # what it may do: queries, DESCRIBE, SHOW, EXPLAIN, the taxonomy's macros
    for query in ("describe events", "show tables", "explain select 1", "select is_comm('x')"):
        res = lumos("sql", query, "--warehouse", str(wh))
        assert res.returncode == 0, (query, res.stderr)
    unsafe = lumos(
        "sql", f"copy (select 1 as a) to '{outside}'", "--unsafe", "--warehouse", str(wh)
    )
    assert unsafe.returncode == 0 and outside.read_text().strip() == "a\n1"


def test_sql_table_fetches_the_rows_it_shows(dlrm_wh) -> None:
    wh, _ = dlrm_wh
    res = lumos("sql", "select name from events", "--max-rows", "10", "--warehouse", str(wh))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1 + 10 + 1 and lines[-1].startswith("(more than 10 rows")
    full = lumos("sql", "select name from events", "--format", "csv", "--warehouse", str(wh))
    n = lumos("sql", "select count(*) as n from events", "--format", "json", "--warehouse", str(wh))
    assert len(full.stdout.splitlines()) == 1 + json.loads(n.stdout)[0]["n"]


def test_status(dlrm_wh) -> None:
    wh, _ = dlrm_wh
    res = lumos("status", "--warehouse", str(wh))
    assert res.returncode == 0, res.stderr
    assert "dlrm_8rank" in res.stdout and "0-7" in res.stdout
    assert "8 file(s) ok, 0 refused" in res.stdout and "V100" in res.stdout


def test_a_warehouse_uri_is_refused_not_made_a_local_folder(examples: Path, tmp_path: Path) -> None:
    """`--warehouse s3://bucket/wh` (or $LUMOS_WAREHOUSE) became a local folder `s3:/bucket/wh`
    that took the ingest: a command that cannot work on S3 refuses it by name, and any other
    URI scheme is refused, exit 2, nothing written; `file://` is the local path it names (the
    commands that take s3://: tests/test_lake_ingest.py, tests/test_lake_replay.py)."""
    good = examples / "dlrm_8rank" / "worker3_step_12.1694128201557.pt.trace.json.gz"
    res = lumos("groundtruth", "accuracy", str(tmp_path), "--warehouse", "s3://bucket/wh")
    assert res.returncode == 2
    assert "s3://bucket/wh: this command needs a local warehouse directory" in res.stderr
    res = lumos("status", env={"LUMOS_WAREHOUSE": "gs://b/wh"}, cwd=tmp_path)
    assert res.returncode == 2 and "gs://b/wh: a warehouse is a local directory" in res.stderr
    res = lumos("ingest", str(good), "--warehouse", "gs://b/wh", cwd=tmp_path)
    assert res.returncode == 2 and "gs://b/wh: a warehouse is a local directory" in res.stderr
    assert list(tmp_path.iterdir()) == []
    res = lumos("ingest", str(good), "--warehouse", f"file://{tmp_path / 'wh'}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "wh" / "lumos.duckdb").exists()


def test_warehouse_from_env_and_refusal_exit_code(examples: Path, tmp_path: Path) -> None:
    bad = tmp_path / "in" / "empty.json"
    bad.parent.mkdir()
    bad.write_bytes(b"")
    good = examples / "dlrm_8rank" / "worker3_step_12.1694128201557.pt.trace.json.gz"
    env = {"LUMOS_WAREHOUSE": str(tmp_path / "envwh")}
    res = lumos("ingest", str(good), str(bad), "--job", "mixed", env=env, cwd=tmp_path)
    assert res.returncode == 1
    assert "REFUSED" in res.stderr and str(bad) in res.stderr
    assert "1 file(s) refused" in res.stderr
    assert (tmp_path / "envwh" / "lumos.duckdb").exists()
    status = lumos("status", env=env, cwd=tmp_path)
    assert "1 file(s) ok, 1 refused" in status.stdout and str(bad) in status.stdout
    # no $LUMOS_WAREHOUSE: ./lumos_warehouse
    env2 = {k: v for k, v in os.environ.items() if k != "LUMOS_WAREHOUSE"}
    res = subprocess.run(
        [sys.executable, "-m", "lumos", "ingest", str(good)],
        cwd=tmp_path,
        env=env2,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "lumos_warehouse" / "lumos.duckdb").exists()


def test_ingest_bad_argument(tmp_path: Path) -> None:
    (tmp_path / "empty_dir").mkdir()
    res = lumos("ingest", str(tmp_path / "empty_dir"), "--warehouse", str(tmp_path / "wh"))
    assert res.returncode == 2
    assert "no trace files" in res.stderr and str(tmp_path / "empty_dir") in res.stderr
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["ingest", "x.json", "--job", ""],
        ["replay", "--job", " "],
        ["explain", "--job", ""],
        ["export", "--job", "", "--rank", "0", "--step", "1", "--out", "x.json.gz"],
        ["describe", "--job", ""],
    ],
)
def test_an_empty_job_name_is_a_usage_error(argv: list[str], tmp_path: Path) -> None:
    """`--job "$JOB"` with JOB unset: a one-line usage error, no traceback, nothing written."""
    res = lumos(*argv, "--warehouse", str(tmp_path / "wh"), cwd=tmp_path)
    assert res.returncode == 2
    assert "argument --job: a job name cannot be empty" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "wh").exists()


def test_an_empty_job_folder_among_others_is_skipped(tmp_path: Path, examples: Path) -> None:
    """A nightly `lumos ingest inbox/*` where one job's folder is still empty: the others are
    ingested, the empty one is named, and the exit status says something was left out."""
    inbox = tmp_path / "inbox"
    (inbox / "later").mkdir(parents=True)
    shutil.copytree(examples / "gpt_cpu", inbox / "gpt_cpu")
    args = [str(inbox / "gpt_cpu"), str(inbox / "later")]
    res = lumos("ingest", *args, "--warehouse", str(tmp_path / "wh"))
    assert res.returncode == 1, res.stderr
    assert f"SKIPPED {inbox / 'later'}: directory contains no trace files" in res.stderr
    assert "1 ingested" in res.stdout and "1 argument(s) skipped" in res.stdout
    jobs = lumos("sql", "select distinct job from traces", "--warehouse", str(tmp_path / "wh"))
    assert "gpt_cpu" in jobs.stdout and "later" not in jobs.stdout


def test_a_trace_without_profiler_steps_replays_and_explains_its_whole_capture(
    shared_traces: Path, tmp_path: Path
) -> None:
    """A trace recorded without the profiler's step schedule (no ProfilerStep#N) replays as one
    iteration, step 0, the whole capture: replay prints its row and says what it stands for,
    explain breaks it down."""
    wh = str(tmp_path / "wh")
    trace = shared_traces / "hta/critical_path/simple_add"
    assert lumos("ingest", str(trace), "--job", "nostep", "--warehouse", wh).returncode == 0
    res = lumos("replay", "--job", "nostep", "--warehouse", wh)
    assert res.returncode == 0, res.stderr
    assert "job 'nostep': no ProfilerStep#N span in its trace: step 0 is the whole capture" in (
        res.stderr
    )
    assert any(line.split()[:3] == ["nostep", "0", "cpu_step"] for line in res.stdout.splitlines())
    res = lumos("explain", "--job", "nostep", "--warehouse", wh)
    assert res.returncode == 0, res.stderr
    assert "nostep" in res.stdout


def test_a_rank_with_no_scored_step_is_named(shared_traces: Path, tmp_path: Path) -> None:
    """Rank 1 is rank 0's trace with every GPU task cut out: each of its steps launches work the
    capture does not hold (truncated). Replay scores rank 0 and names rank 1 as unscored, where
    it used to drop it from the table without a word."""
    import gzip

    src = shared_traces / "hta/nccl_parser_config/nccl_data.json.gz"
    trace = json.loads(gzip.decompress(src.read_bytes()))
    job = tmp_path / "two"
    job.mkdir()
    (job / "rank-0.json").write_text(json.dumps(trace))
    trace["traceEvents"] = [
        e
        for e in trace["traceEvents"]
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    trace.get("distributedInfo", {})["rank"] = 1
    (job / "rank-1.json").write_text(json.dumps(trace))
    wh = str(tmp_path / "wh")
    assert lumos("ingest", str(job), "--job", "two", "--warehouse", wh).returncode == 0
    res = lumos("replay", "--job", "two", "--warehouse", wh)
    assert res.returncode == 0, res.stderr
    assert (
        "job 'two': rank(s) 1 not scored: every traced step of theirs is warm-up or truncated"
        in (res.stderr)
    )
    ranks = {line.split()[1] for line in res.stdout.splitlines() if line.startswith("two ")}
    assert ranks == {"0"}


def test_unmatched_collectives_are_named(shared_traces: Path, tmp_path: Path) -> None:
    """DLRM ranks 0 and 1, and rank 5 without its 5th collective kernel: the one step's lists
    disagree, so the job's collectives stay unmatched and the multirank replay runs them apart;
    replay says so instead of printing the table alone."""
    from test_collectives import _dlrm_file, _rewrite

    mid = _rewrite(_dlrm_file(shared_traces, 5), tmp_path / "mid" / "w5.json.gz", drop_coll=4)
    wh = str(tmp_path / "wh")
    files = [str(_dlrm_file(shared_traces, r)) for r in (0, 1)] + [str(mid)]
    assert lumos("ingest", *files, "--job", "mid", "--warehouse", wh).returncode == 0
    res = lumos("replay", "--job", "mid", "--warehouse", wh)
    assert res.returncode == 0, res.stderr
    assert "job 'mid': 23 of 23 collective kernels not matched across ranks" in res.stderr


def _traversable_by_others(path: Path) -> bool:
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def test_a_warehouse_the_user_cannot_write_is_a_message(examples: Path) -> None:
    """Issue 34, item 7: `lumos ingest` into a warehouse its user cannot write says so in one
    line naming the path (it was a PermissionError traceback), and writes nothing. Run as
    `nobody` under root (root writes anywhere), else on a warehouse made read-only."""
    import tempfile

    uid = os.geteuid()
    if uid == 0 and (not shutil.which("setpriv") or not _traversable_by_others(ROOT)):
        pytest.skip("as root, needs setpriv and a checkout that user nobody can read")
    top = Path(tempfile.mkdtemp(prefix="lumos-unwritable-"))
    try:
        top.chmod(0o755)
        wh, cache = top / "wh", top / "numba"
        trace = top / "rank0.json.gz"
        shutil.copy(examples / "nccl_a100" / "nccl_data.json.gz", trace)
        assert lumos("ingest", str(trace), "--job", "a", "--warehouse", str(wh)).returncode == 0
        before = sorted((p.name, p.stat().st_mtime_ns) for p in wh.rglob("*"))
        argv = [sys.executable, "-m", "lumos", "ingest", str(trace), "--job", "b"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(cache)}
        if uid == 0:  # numba caches its kernels where this user can write
            cache.mkdir()
            os.chown(cache, 65534, 65534)
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        else:
            wh.chmod(0o555)
        res = subprocess.run(
            [*argv, "--warehouse", str(wh)], env=env, capture_output=True, text=True, timeout=300
        )
        assert res.returncode == 1, res.stderr
        assert "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip().startswith(f"lumos ingest: {wh}/"), res.stderr
        assert "Permission denied" in res.stderr
        assert sorted((p.name, p.stat().st_mtime_ns) for p in wh.rglob("*")) == before
    finally:
        for p in [top, *top.rglob("*")]:
            p.chmod(0o755) if p.is_dir() else None
        shutil.rmtree(top, ignore_errors=True)
