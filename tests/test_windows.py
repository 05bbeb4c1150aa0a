"""Several profiling windows of one distributed run (warehouse/windows.py): torch.profiler with
`schedule(repeat=N)` writes one file per window and rank, each with the same
`distributedInfo.rank`. They are built here from the real 2-rank DDP run of the corpus, whose
trace of each rank holds five windows (steps 2, 5, 8, 11, 14): each rank's trace is cut at the
middle of the idle time between two windows, keeping its metadata and top-level keys and dropping
the keys lumos's own recorder adds (`job_name` above all), as a plain torch.profiler run writes
them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lumos.api import Warehouse
from warehouse.ingest import RANK_HELD, ingest

RUN = Path(__file__).parent / "data" / "corpus" / "dp2"
RECORDER_KEYS = ("job_name", "lumos_groundtruth", "lumosCycles", "traceName", "trace_id")


def _windows(rank: int) -> list[dict]:
    """Rank `rank`'s trace as two window files' contents: steps 2 and 5."""
    data = json.loads(gzip.open(RUN / f"rank-{rank}.pt.trace.json.gz").read())
    top = {k: v for k, v in data.items() if k != "traceEvents" and k not in RECORDER_KEYS}
    events = data["traceEvents"]
    steps = {e["name"]: e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    a, b = steps["ProfilerStep#2"], steps["ProfilerStep#5"]
    cut = (a["ts"] + a["dur"] + b["ts"]) / 2
    limit = b["ts"] + b["dur"] + (b["ts"] - cut)  # window 2 ends before step 8's window
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    first = [e for e in timed if e["ts"] < cut]
    second = [e for e in timed if cut <= e["ts"] < limit]
    return [{**top, "traceEvents": meta + first}, {**top, "traceEvents": meta + second}]


def _write(folder: Path, rank: int, window: int, content: dict) -> Path:
    # the tensorboard handler's naming: <host>_<pid>.<ms>.pt.trace.json (no rank in the name)
    path = folder / f"node_{4100 + rank}.{1700000000000 + 1000 * window + rank}.pt.trace.json"
    path.write_text(json.dumps(content))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[tuple[int, int], Path]:
    folder = tmp_path_factory.mktemp("runs") / "ddp"
    folder.mkdir()
    return {
        (rank, w): _write(folder, rank, w, content)
        for rank in (0, 1)
        for w, content in enumerate(_windows(rank))
    }


def _steps_by_job(wh: Warehouse) -> dict[tuple[str, int], list[str]]:
    df = wh.sql(
        "SELECT job, rank, list(DISTINCT name ORDER BY name) AS steps FROM events "
        "WHERE cat = 'user_annotation' AND name LIKE 'ProfilerStep#%' GROUP BY job, rank"
    )
    return {
        (j, int(r)): list(s) for j, r, s in zip(df["job"], df["rank"], df["steps"], strict=True)
    }


@pytest.mark.parametrize("order", ["in time", "later window first"])
def test_windows_of_one_rank_become_jobs_whose_ranks_meet(files, tmp_path, order):
    wh_dir = tmp_path / "wh"
    if order == "in time":
        report = ingest([files[(0, 0)].parent], warehouse=wh_dir)
        first, later = "ProfilerStep#2", "ProfilerStep#5"
    else:  # the later window's files arrive in an earlier nightly ingest
        report = ingest([files[(0, 1)], files[(1, 1)]], warehouse=wh_dir, job="ddp")
        report = ingest([files[(0, 0)], files[(1, 0)]], warehouse=wh_dir, job="ddp")
        first, later = "ProfilerStep#5", "ProfilerStep#2"
    assert not report.refused, [f.error for f in report.refused]
    window = "ddp/steps-" + later.removeprefix("ProfilerStep#")
    wh = Warehouse.open(wh_dir)
    # every rank of each window in one job, its events (job column included) and its metadata
    assert _steps_by_job(wh) == {
        ("ddp", 0): [first],
        ("ddp", 1): [first],
        (window, 0): [later],
        (window, 1): [later],
    }
    meta = wh.sql("SELECT DISTINCT job, rank FROM trace_meta ORDER BY job, rank")
    assert list(zip(meta["job"], meta["rank"], strict=True)) == sorted(
        [("ddp", 0), ("ddp", 1), (window, 0), (window, 1)]
    )
    assert report.jobs[window] == "window"
    moved = [f for f in report.files if f.job == window]
    assert moved and all("another profiling window of job 'ddp'" in f.note for f in moved)

    # the same files again: nothing written, each reported where it went
    before = sorted(p.name for p in (wh_dir / "manifest").glob("*"))
    again = ingest([files[(0, 0)].parent], warehouse=wh_dir, job="ddp")
    assert {f.action for f in again.files} == {"unchanged"}
    assert sorted(p.name for p in (wh_dir / "manifest").glob("*")) == before
    assert sorted(f.job for f in again.files) == ["ddp", "ddp", window, window]


def test_overlapping_steps_of_one_rank_are_still_a_conflict(files, tmp_path):
    """The same rank's file with the same steps but other content is not another window."""
    wh_dir = tmp_path / "wh"
    assert not ingest([files[(0, 0)]], warehouse=wh_dir, job="ddp").refused
    data = json.loads(files[(0, 0)].read_text())
    data["traceEvents"] = data["traceEvents"][:-1]
    other = tmp_path / "edited.pt.trace.json"
    other.write_text(json.dumps(data))
    report = ingest([other], warehouse=wh_dir, job="ddp")
    assert len(report.refused) == 1 and RANK_HELD in report.refused[0].error
    assert set(_steps_by_job(Warehouse.open(wh_dir))) == {("ddp", 0)}


def test_a_window_does_not_join_a_job_holding_another_window(files, tmp_path):
    """Rank 1's first window arrives when the job holds only rank 0's second: no rank is held
    twice, but the file runs outside the job's time span and profiles other steps."""
    wh_dir = tmp_path / "wh"
    for key in [(0, 1), (1, 0), (1, 1), (0, 0)]:
        report = ingest([files[key]], warehouse=wh_dir, job="ddp")
        assert not report.refused, report.refused[0].error
    assert _steps_by_job(Warehouse.open(wh_dir)) == {
        ("ddp", 0): ["ProfilerStep#5"],
        ("ddp", 1): ["ProfilerStep#5"],
        ("ddp/steps-2", 0): ["ProfilerStep#2"],
        ("ddp/steps-2", 1): ["ProfilerStep#2"],
    }


def test_dagster_partition_ingests_and_replays_its_windows(files, tmp_path):
    """One inbox job whose files hold two windows: the partition's ingest names the window job it
    made, and its replay step replays (and its check judges) both jobs."""
    from dagster_run import materialize_job

    from pipelines.assets.ingest import trace_events
    from pipelines.assets.replay import job_replay
    from pipelines.checks_replay import replay_accuracy

    inbox, wh_dir = tmp_path / "inbox", tmp_path / "wh"
    (inbox / "ddp").mkdir(parents=True)
    for path in files.values():
        (inbox / "ddp" / path.name).write_bytes(path.read_bytes())
    result = materialize_job([trace_events, job_replay, replay_accuracy], "ddp", inbox, wh_dir)
    assert result.success
    (ingested,) = result.asset_materializations_for_node("trace_events")
    assert ingested.metadata["window_jobs"].value == "ddp/steps-5 (ranks 0,1)"
    assert ingested.metadata["ranks"].value == "0,1"
    assert ingested.metadata["files"].value == 2
    (replayed,) = result.asset_materializations_for_node("job_replay")
    assert replayed.metadata["jobs"].value == "ddp, ddp/steps-5"
    assert replayed.metadata["ranks"].value == 4
    check = next(e for e in result.get_asset_check_evaluations())
    # both jobs' ranks are judged: each window is one step, so cpu_step of each of its ranks
    judged = Warehouse.open(wh_dir).sql(
        "SELECT job, count(*) AS n FROM replay_quality WHERE mode = 'model' AND n_steps > 0 "
        "GROUP BY job ORDER BY job"
    )
    assert list(zip(judged["job"], judged["n"], strict=True)) == [("ddp", 2), ("ddp/steps-5", 2)]
    assert check.metadata["metrics_checked"].value == 4
    runs = Warehouse.open(wh_dir).sql("SELECT job, status FROM replay_runs ORDER BY job")
    assert list(zip(runs["job"], runs["status"], strict=True)) == [
        ("ddp", "ok"),
        ("ddp/steps-5", "ok"),
    ]
