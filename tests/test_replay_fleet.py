"""`lumos replay` over a fleet: current jobs skipped, changed jobs replayed again, failures kept
apart and recorded, a process pool equal to the serial run. Real traces (bundled DLRM ranks and
the GPT CPU run), a real warehouse, the command line as a real process."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from cli_run import lumos

from lumos.replay.fleet import replay_fleet
from warehouse.layout import encode_job

RESULT_TABLES = ("iteration_replay", "replay_quality", "schedules", "breakdown", "replay_runs")


def _runs(wh: Path) -> dict[str, dict]:
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    try:
        rows = con.sql("FROM replay_runs").to_arrow_table().to_pylist()
    finally:
        con.close()
    return {r["job"]: r for r in rows}


def _mtimes(wh: Path, job: str) -> dict[str, int]:
    return {
        t: (wh / t / f"job={encode_job(job)}" / "part.parquet").stat().st_mtime_ns
        for t in RESULT_TABLES
    }


def _states(wh: Path) -> dict[str, str]:
    """The `replay` column of `lumos status`, by job (through the Python API it prints)."""
    from lumos.api import Warehouse

    jobs = Warehouse.open(wh).status()["jobs"]
    return dict(zip(jobs["job"], jobs["replay"], strict=True))


def _ok(res) -> None:  # noqa: ANN001
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_second_run_skips_current_jobs_and_replays_changed_ones(
    tmp_path: Path, examples: Path
) -> None:
    wh = str(tmp_path / "wh")
    dlrm = sorted((examples / "dlrm_8rank").glob("*.gz"))
    _ok(lumos("ingest", str(examples / "gpt_cpu"), "--warehouse", wh))
    _ok(lumos("ingest", str(dlrm[0]), "--job", "pair", "--warehouse", wh))

    first = lumos("replay", "--warehouse", wh)
    _ok(first)
    assert "2 job(s): 2 replayed, 0 failed" in first.stdout
    runs = _runs(Path(wh))
    assert {j: (r["status"], r["n_ranks"], r["explained"]) for j, r in runs.items()} == {
        "gpt_cpu": ("ok", 1, True),
        "pair": ("ok", 1, True),
    }
    assert all(r["n_tasks"] > 0 and r["error"] is None for r in runs.values())
    before = {job: _mtimes(Path(wh), job) for job in runs}

    # nothing changed: nothing is replayed or rewritten
    second = lumos("replay", "--warehouse", wh)
    _ok(second)
    assert "0 replayed, 2 current" in second.stdout
    assert {job: _mtimes(Path(wh), job) for job in runs} == before

    # a second rank joins `pair`: `lumos status` says its replay is stale, and only that job is
    # replayed, with the new inputs
    _ok(lumos("ingest", str(dlrm[1]), "--job", "pair", "--warehouse", wh))
    states = _states(Path(wh))
    assert states == {"gpt_cpu": "ok", "pair": "stale: files changed"}, states
    third = lumos("replay", "--warehouse", wh)
    _ok(third)
    assert "2 job(s): 1 replayed, 1 current" in third.stdout
    after = _runs(Path(wh))
    assert after["pair"]["n_ranks"] == 2
    assert after["pair"]["inputs_sha256"] != runs["pair"]["inputs_sha256"]
    assert after["gpt_cpu"] == runs["gpt_cpu"]
    assert _states(Path(wh)) == {"gpt_cpu": "ok", "pair": "ok"}
    assert "stale" not in lumos("status", "--warehouse", wh).stdout
    assert _mtimes(Path(wh), "gpt_cpu") == before["gpt_cpu"]
    ranks = {
        r["rank"]
        for r in pq.read_table(
            Path(wh) / "replay_quality" / "job=pair" / "part.parquet"
        ).to_pylist()
    }
    assert ranks == {0, 1}

    # a job named explicitly and current is shown from its stored rows; --force replays it
    shown = lumos("replay", "--job", "gpt_cpu", "--warehouse", wh)
    _ok(shown)
    assert "0 replayed, 1 current" in shown.stdout and "\ngpt_cpu " in shown.stdout
    forced = lumos("replay", "--job", "gpt_cpu", "--force", "--warehouse", wh)
    _ok(forced)
    assert "1 job(s): 1 replayed" in forced.stdout
    assert _mtimes(Path(wh), "gpt_cpu")["replay_runs"] > before["gpt_cpu"]["replay_runs"]

    # without explanations the run is not current for a later run that wants them
    _ok(lumos("replay", "--job", "pair", "--force", "--no-explain", "--warehouse", wh))
    assert _runs(Path(wh))["pair"]["explained"] is False
    assert "1 replayed" in lumos("replay", "--job", "pair", "--warehouse", wh).stdout


def test_a_failing_job_is_recorded_and_not_retried_until_it_changes(
    tmp_path: Path, examples: Path
) -> None:
    wh = tmp_path / "wh"
    dlrm = sorted((examples / "dlrm_8rank").glob("*.gz"))
    _ok(lumos("ingest", str(dlrm[0]), "--job", "good", "--warehouse", str(wh)))
    _ok(lumos("ingest", str(dlrm[2]), "--job", "broken", "--warehouse", str(wh)))
    # the job's result folder cannot be made (a file stands where it goes: a full or read-only
    # disk looks the same to the writer): its replay fails, the other job's does not
    (wh / "tasks").mkdir(parents=True, exist_ok=True)
    (wh / "tasks" / "job=broken").write_text("not a folder")
    res = lumos("replay", "--warehouse", str(wh))
    assert res.returncode == 1
    assert "2 job(s): 1 replayed, 1 failed" in res.stdout
    assert "job 'broken' could not be replayed:" in res.stderr
    assert "job=broken" in res.stderr
    runs = _runs(wh)
    assert runs["good"]["status"] == "ok"
    assert runs["broken"]["status"] == "failed" and runs["broken"]["error"]
    assert _states(wh) == {"good": "ok", "broken": "failed"}

    again = lumos("replay", "--warehouse", str(wh))
    assert again.returncode == 1
    assert "0 replayed, 1 current (skipped; --force replays them), 0 failed, 1 still failing" in (
        again.stdout
    )
    assert "failed before on the same files and code" in again.stderr
    assert _runs(wh)["broken"]["replayed_at"] == runs["broken"]["replayed_at"]

    # the disk is fixed and the job gains a rank: its inputs changed, so it is tried again
    (wh / "tasks" / "job=broken").unlink()
    _ok(lumos("ingest", str(dlrm[3]), "--job", "broken", "--warehouse", str(wh)))
    fixed = lumos("replay", "--warehouse", str(wh))
    _ok(fixed)
    assert "2 job(s): 1 replayed, 1 current" in fixed.stdout
    assert _runs(wh)["broken"]["status"] == "ok"


def test_a_pool_of_workers_gives_the_serial_results(tmp_path: Path, examples: Path) -> None:
    wh = tmp_path / "wh"
    _ok(lumos("ingest", str(examples / "gpt_cpu"), "--warehouse", str(wh)))
    dlrm = sorted((examples / "dlrm_8rank").glob("*.gz"))
    for i, f in enumerate(dlrm[:3]):
        _ok(lumos("ingest", str(f), "--job", f"dlrm_{i}", "--warehouse", str(wh)))
    # a multi-rank job: its collectives open the catalog a second time inside the worker
    _ok(lumos("ingest", *map(str, dlrm[3:5]), "--job", "dlrm_pair", "--warehouse", str(wh)))

    def tables() -> dict[str, list[dict]]:
        con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
        try:
            return {
                t: con.sql(f"FROM {t} ORDER BY ALL").to_arrow_table().to_pylist()
                for t in ("iteration_replay", "replay_quality", "critical_path_summary")
            }
        finally:
            con.close()

    done: list[tuple[str, int, int]] = []
    serial = replay_fleet(wh, on_job=lambda o, i, n: done.append((o.job, i, n)))
    assert serial.count("replayed") == 5 and not serial.failed
    assert [i for _, i, _ in done] == [1, 2, 3, 4, 5] and {n for *_, n in done} == {5}
    _ok(lumos("status", "--warehouse", str(wh)))  # rebuilds the catalog with the new views
    want = tables()
    assert want["iteration_replay"]

    pooled = replay_fleet(wh, force=True, workers=2)
    assert pooled.count("replayed") == 5 and not pooled.failed, pooled.outcomes
    assert [o.job for o in pooled.outcomes] == [o.job for o in serial.outcomes]
    assert tables() == want


def test_unknown_job_and_bad_workers_are_argument_errors(tmp_path: Path, examples: Path) -> None:
    wh = str(tmp_path / "wh")
    _ok(lumos("ingest", str(examples / "gpt_cpu"), "--warehouse", wh))
    res = lumos("replay", "--job", "nope", "--warehouse", wh)
    assert res.returncode == 2 and "job 'nope' is not in the warehouse" in res.stderr
    # a job whose every file was refused exists, but has nothing to replay: the error says why
    bad = tmp_path / "broken" / "trace.json"
    bad.parent.mkdir()
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": "soon"}]}')
    assert lumos("ingest", str(bad), "--job", "broken", "--warehouse", wh).returncode == 1
    for cmd in (("replay",), ("describe",), ("estimate", "--set", "layers=2")):
        res = lumos(*cmd, "--job", "broken", "--warehouse", wh)
        assert res.returncode == 2, res.stderr
        assert "job 'broken' has no ingested trace: its files were refused" in res.stderr
        assert f"{bad}: event 0: ts" in res.stderr, res.stderr
    res = lumos("replay", "--workers", "0", "--warehouse", wh)
    assert res.returncode == 2 and "--workers must be at least 1" in res.stderr
    with pytest.raises(ValueError, match="workers must be at least 1"):
        replay_fleet(wh, workers=0)


def test_the_code_hash_covers_every_sql_folder_replay_and_explain_read() -> None:
    """A job is replayed again when lumos changes (`code_sha256`): every lumos_sql folder the
    replay and explanation code loads must be in what is hashed, or a change there is missed
    (collectives/ was, while the multi-rank replay matched its collectives with it)."""
    import re

    from lumos.replay import fleet

    root = Path(fleet.__file__).resolve().parents[2]
    read = set()
    for pkg in ("lumos/replay", "lumos/explain"):
        for py in (root / pkg).glob("*.py"):
            read |= set(re.findall(r'lumos_sql\.(?:load|render)\(f?"([a-z_]+)/', py.read_text()))
    hashed = {g.split("/")[0] for pkg, g in fleet._CODE_GLOBS if pkg == "lumos_sql"}
    assert read and read <= hashed, read - hashed
