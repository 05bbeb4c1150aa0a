"""Explanations (issue 3 item 5): breakdown, SM utilisation, critical path.

A tiny hand-built trace whose breakdown and utilisation are computed by hand here, the interval
and critical-path kernels on hand-made arrays, and invariants on the bundled real traces (the
session warehouse `explain_wh`: the bundled nccl_a100 and dlrm_8rank examples, replayed).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from kernels.intervals import critical_walk, cumulative, timeline
from lumos.commands import explain as explain_cmd
from lumos.explain.inputs import ExplainInputError, from_replay, from_tables, load_job
from lumos.explain.run import explain, explain_job
from lumos.explain.utilization import utilization
from lumos.replay.run import job_collectives, replay_job
from lumos.replay.run import run as replay_run
from warehouse.ingest import ingest


def _x(name, cat, ts, dur, **args):  # noqa: ANN001, ANN003, ANN202
    ev = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": 1}
    if args:
        ev["args"] = args
    return ev


def _gpu(name, ts, dur, corr, stream, cat="kernel"):  # noqa: ANN001, ANN202
    return {
        "ph": "X",
        "name": name,
        "cat": cat,
        "ts": ts,
        "dur": dur,
        "pid": 0,
        "tid": stream,
        "args": {"device": 0, "stream": stream, "correlation": corr},
    }


# One step. GPU (us): gemm [120, 160] and gemm2 [210, 230] and a memset [235, 240] on stream 7;
# an NCCL all-reduce [140, 200] on stream 8.
TINY = [
    _x("ProfilerStep#1", "user_annotation", 100, 200),
    _x("aten::mm", "cpu_op", 110, 20),
    _x("cudaLaunchKernel", "cuda_runtime", 112, 5, correlation=1),
    _gpu("gemm", 120, 40, 1, 7),
    _x("nccl:all_reduce", "cpu_op", 130, 20),
    _x("cudaLaunchKernel", "cuda_runtime", 132, 5, correlation=2),
    _gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 140, 60, 2, 8),
    _x("aten::mm", "cpu_op", 150, 20),
    _x("cudaLaunchKernel", "cuda_runtime", 152, 5, correlation=3),
    _gpu("gemm2", 210, 20, 3, 7),
    _x("aten::zero_", "cpu_op", 170, 10),
    _x("cudaMemsetAsync", "cuda_runtime", 171, 4, correlation=4),
    _gpu("Memset (Device)", 235, 5, 4, 7, cat="gpu_memset"),
    _x("aten::item", "cpu_op", 180, 110),
    _x("cudaStreamSynchronize", "cuda_runtime", 185, 100, correlation=5),
]


def build_explain_wh(examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ingest, replay and explain the bundled traces and TINY once per session (also used by
    tests/test_export.py: the directory is reused when it is complete)."""
    root = tmp_path_factory.getbasetemp() / "explain_shared"
    if (root / "done").is_file():
        return root / "wh"
    root.mkdir(exist_ok=True)
    tiny = root / "tiny.json"
    tiny.write_text(json.dumps({"traceEvents": TINY}))
    wh = root / "wh"
    ingest([tiny], warehouse=wh, job="tiny", build_catalog=False)
    ingest([examples / "nccl_a100"], warehouse=wh, job="nccl", build_catalog=False)
    ingest([examples / "dlrm_8rank"], warehouse=wh, job="dlrm")
    replay_run(wh)
    for job in ("tiny", "nccl", "dlrm"):
        explain_job(wh, job)
    (root / "done").touch()
    return wh


@pytest.fixture(scope="session")
def explain_wh(examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_explain_wh(examples, tmp_path_factory)


def _table(wh: Path, name: str, job: str) -> list[dict]:
    con = duckdb.connect()
    try:
        return (
            con.sql(f"SELECT * FROM read_parquet('{wh}/{name}/job={job}/*.parquet')")  # noqa: S608
            .to_arrow_table()
            .to_pylist()
        )
    finally:
        con.close()


def test_tiny_breakdown_by_hand(explain_wh: Path) -> None:
    rows = {r["mode"]: r for r in _table(explain_wh, "breakdown", "tiny")}
    m = rows["measured"]
    # span [120, 240] us, origin 110 us; compute = [120,160] + [210,230] + [235,240] = 65,
    # communication = [140,200] = 60, both = [140,160] = 20, idle = [200,210] + [230,235]
    assert (m["span_start_ns"], m["span_end_ns"]) == (10_000, 130_000)
    assert m["exposed_compute_ns"] == 45_000
    assert m["overlapped_ns"] == 20_000
    assert m["exposed_comm_ns"] == 40_000
    assert m["idle_ns"] == 15_000
    assert m["n_gpu_tasks"] == 4
    assert set(rows) == {"measured", "model", "identity"}


def test_tiny_utilization_bins_by_hand(explain_wh: Path) -> None:
    [view] = list(load_job(explain_wh, "tiny").ranks())
    rows = utilization(view, "measured", bin_ns=50_000).to_pylist()
    # bins [120,170] [170,220] [220,240] us: busy 50, 30 + 10, 10 + 5
    assert [(r["bin"], r["bin_ns"], r["busy_ns"]) for r in rows] == [
        (0, 50_000, 50_000),
        (1, 50_000, 40_000),
        (2, 20_000, 15_000),
    ]
    assert [r["busy_share"] for r in rows] == [1.0, 0.8, 0.75]
    # the stored 1 ms timeline: one bin holding the whole 120 us span
    [stored] = [r for r in _table(explain_wh, "sm_utilization", "tiny") if r["mode"] == "measured"]
    assert (stored["bin_ns"], stored["busy_ns"]) == (120_000, 105_000)


def test_timeline_and_cumulative_by_hand() -> None:
    start = np.array([0, 5, 20, 8], np.int64)
    end = np.array([10, 12, 30, 9], np.int64)
    cls = np.array([0, 0, 1, 1], np.int64)
    bounds, mask = timeline(start, end, cls)
    # [0,8) compute, [8,9) both, [9,12) compute, [12,20) idle, [20,30) comm
    assert bounds.tolist() == [0, 8, 9, 12, 20, 30]
    assert mask.tolist() == [1, 3, 1, 0, 2, 0]
    cum = cumulative(bounds, mask, 4, np.array([-5, 8, 10, 25, 40], np.int64))
    assert cum.tolist() == [
        [0, 0, 0, 0],
        [0, 8, 0, 0],
        [0, 9, 0, 1],
        [8, 11, 5, 1],
        [8, 11, 10, 1],
    ]


def test_critical_walk_by_hand() -> None:
    # 0: CPU [0,10]; 1: launch [10,12] (proc after 0); 2: GPU [15,40] (edge from 1);
    # 3: sync [12,45] (runtime: 2 ends 40 + 5); 4: a launch held by back-pressure until 2 starts
    start = np.array([0, 10, 15, 12, 11], np.int64)
    end = np.array([10, 12, 40, 45, 15], np.int64)
    crit = np.array([-1, 0, 1, 2, 2], np.int64)
    ptr, task, lo, hi, src = critical_walk(
        start, end, crit, np.array([3, 4, 3], np.int64), np.array([0, 0, 20], np.int64)
    )
    assert ptr.tolist() == [0, 4, 8, 10]
    assert task[:4].tolist() == [3, 2, 1, 0]
    assert list(zip(lo[:4].tolist(), hi[:4].tolist(), strict=True)) == [
        (40, 45),
        (12, 40),
        (10, 12),
        (0, 10),
    ]
    # task 4 ended when task 2 started: the path hands over at 2's start
    assert task[4:8].tolist() == [4, 2, 1, 0]
    assert list(zip(lo[4:8].tolist(), hi[4:8].tolist(), strict=True)) == [
        (15, 15),
        (12, 15),
        (10, 12),
        (0, 10),
    ]
    # clipped at a window start of 20
    assert task[8:].tolist() == [3, 2]
    assert (lo[9], hi[9]) == (20, 40)
    assert src.tolist()[:4] == [2, 1, 0, -1]


@pytest.mark.parametrize("job", ["nccl", "dlrm", "tiny"])
def test_breakdown_invariants(explain_wh: Path, job: str) -> None:
    rows = _table(explain_wh, "breakdown", job)
    assert rows
    for r in rows:
        parts = r["exposed_compute_ns"] + r["overlapped_ns"] + r["exposed_comm_ns"] + r["idle_ns"]
        assert parts == r["span_ns"] == r["span_end_ns"] - r["span_start_ns"], r
        assert min(r["exposed_compute_ns"], r["overlapped_ns"], r["exposed_comm_ns"]) >= 0
        assert r["idle_ns"] >= 0


def test_measured_span_is_the_iterations_gpu_span(explain_wh: Path) -> None:
    for job in ("nccl", "dlrm"):
        its = {(r["rank"], r["step"]): r for r in _table(explain_wh, "iterations", job)}
        rows = [r for r in _table(explain_wh, "breakdown", job) if r["mode"] == "measured"]
        assert len(rows) == sum(1 for r in its.values() if r["gpu_span_ns"] is not None)
        for r in rows:
            it = its[(r["rank"], r["step"])]
            assert r["span_ns"] == it["gpu_span_ns"]
            assert r["n_gpu_tasks"] == it["n_gpu_tasks"]


def test_nccl_trace_has_communication(explain_wh: Path) -> None:
    rows = [r for r in _table(explain_wh, "breakdown", "nccl") if r["mode"] == "measured"]
    assert all(r["exposed_comm_ns"] + r["overlapped_ns"] > 0 for r in rows)
    # the identity replay keeps traced GPU offsets: its breakdown is the measured one within 1%
    ident = {
        r["step"]: r for r in _table(explain_wh, "breakdown", "nccl") if r["mode"] == "identity"
    }
    for r in rows:
        i = ident[r["step"]]
        for k in ("exposed_compute_ns", "overlapped_ns", "exposed_comm_ns", "idle_ns"):
            assert abs(i[k] - r[k]) <= 0.01 * r["span_ns"], (k, r, i)


def test_utilization_matches_breakdown(explain_wh: Path) -> None:
    for job in ("nccl", "dlrm"):
        busy: dict[tuple, int] = {}
        for r in _table(explain_wh, "sm_utilization", job):
            key = (r["rank"], r["step"], r["mode"])
            busy[key] = busy.get(key, 0) + r["busy_ns"]
            assert 0.0 <= r["busy_share"] <= 1.0
            assert 0 < r["bin_ns"] <= 1_000_000
        for r in _table(explain_wh, "breakdown", job):
            assert busy[(r["rank"], r["step"], r["mode"])] == r["span_ns"] - r["idle_ns"]


@pytest.mark.parametrize("job", ["nccl", "dlrm", "tiny"])
def test_critical_path_is_contiguous_and_sums_to_the_window(explain_wh: Path, job: str) -> None:
    path = _table(explain_wh, "critical_path", job)
    summary = _table(explain_wh, "critical_path_summary", job)
    sched = {(r["rank"], r["mode"], r["task"]): r for r in _table(explain_wh, "schedules", job)}
    by: dict[tuple, list[dict]] = {}
    for r in path:
        by.setdefault((r["rank"], r["step"], r["mode"]), []).append(r)
    share: dict[tuple, float] = {}
    for s in summary:
        key = (s["rank"], s["step"], s["mode"])
        share[key] = share.get(key, 0.0) + s["share"]
        win = (s["window_start_ns"], s["window_end_ns"])
        nodes = sorted(by[key], key=lambda r: r["pos"])
        assert nodes[0]["hi_ns"] == win[1] and nodes[-1]["lo_ns"] == win[0]
        for a, b in zip(nodes, nodes[1:], strict=False):
            assert a["lo_ns"] == b["hi_ns"]  # contiguous, last first
            assert a["src"] == b["task"]  # along crit_src
            assert sched[(key[0], key[2], a["task"])]["crit_src"] == a["src"]
        for n in nodes:
            assert n["exec_ns"] + n["gap_ns"] == n["hi_ns"] - n["lo_ns"] >= 0
    assert share and all(abs(v - 1.0) < 1e-9 for v in share.values())


def test_tiny_critical_path_waits_on_the_gpu(explain_wh: Path) -> None:
    rows = [r for r in _table(explain_wh, "critical_path", "tiny") if r["mode"] == "model"]
    cats = {r["exec_cat"] for r in rows} | {r["gap_cat"] for r in rows if r["gap_ns"]}
    # the step ends after a stream sync that waits for the memset behind gemm2 (no comm on it:
    # the all-reduce on stream 8 ends long before)
    assert {"sync", "gpu_compute", "launch", "cpu"} <= cats
    assert "communication" not in cats


def test_missing_replay_is_a_clear_error(explain_wh: Path) -> None:
    with pytest.raises(ExplainInputError, match="run `lumos replay --job nope` first"):
        load_job(explain_wh, "nope")


def test_explain_command_prints(explain_wh: Path, capsys: pytest.CaptureFixture) -> None:
    from lumos.cli import main

    assert explain_cmd.register  # the module is the CLI's
    assert main(["explain", "--job", "nccl", "--warehouse", str(explain_wh), "--step", "5"]) == 0
    out = capsys.readouterr().out
    assert "measured" in out and "model" in out and "critical path" in out
    assert main(["explain", "--job", "nccl", "--warehouse", str(explain_wh), "--step", "99"]) == 2


def test_replay_writes_the_collectives_of_multi_rank_jobs(explain_wh: Path) -> None:
    """`lumos replay` keeps the cross-rank matching it replays the multirank mode with: the
    DLRM job's 5 all_to_all and 3 all-reduce kernels on each of its 8 ranks (trace README), all
    matched; single-rank jobs have none."""
    from lumos.api import Warehouse
    from warehouse.catalog import build_catalog

    build_catalog(explain_wh)
    rows = Warehouse.open(explain_wh).sql(
        "select job, count(distinct rank) as ranks, count(*) as n, "
        "count(*) filter (where status = 'matched') as matched from collectives group by job"
    )
    assert rows.to_dict("records") == [{"job": "dlrm", "ranks": 8, "n": 64, "matched": 64}]


@pytest.mark.parametrize("job", ["dlrm", "nccl"])
def test_inputs_from_the_replay_connection_explain_the_same(explain_wh: Path, job: str) -> None:
    """`from_replay` (the replay's own temp tables), `from_tables` (its Arrow results) and
    `load_job` (the files `lumos replay` wrote) are three roads to the same explanations."""
    con = duckdb.connect(str(explain_wh / "lumos.duckdb"), read_only=True)
    try:
        res = replay_job(con, job, collectives=job_collectives(explain_wh, con, job))
        via_con = explain(from_replay(con, job, res.tables))
    finally:
        con.close()
    assert via_con["critical_path"].num_rows > 0
    for other in (explain(from_tables(job, res.tables)), explain(load_job(explain_wh, job))):
        assert sorted(other) == sorted(via_con)
        for name, table in via_con.items():
            assert table.equals(other[name]), name
