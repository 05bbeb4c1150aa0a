"""Graph tables (lumos_sql/graph) and replay on a tiny hand-written Kineto trace.

One thread, one stream, two profiler steps; each step launches one kernel and then synchronizes
on the stream. Times in the trace are us; expected values below are worked out by hand from the
rules in lumos/replay/constants.py (defaults: launch latency 3 us, gap 2 us with too few samples;
sync return latency = the one observed 185 - 160 = 25 us).
"""

from __future__ import annotations

import json

import duckdb
import pytest

from lumos.replay.run import replay_job
from warehouse.ingest import ingest


def _x(name, cat, ts, dur, **kw):  # noqa: ANN001, ANN202
    ev = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": 1}
    args = {k: v for k, v in kw.items() if k not in ("pid", "tid")}
    ev.update({k: v for k, v in kw.items() if k in ("pid", "tid")})
    if args:
        ev["args"] = args
    return ev


def _gpu(name, ts, dur, corr):  # noqa: ANN001, ANN202
    return {
        "ph": "X",
        "name": name,
        "cat": "kernel",
        "ts": ts,
        "dur": dur,
        "pid": 0,
        "tid": 7,
        "args": {"device": 0, "stream": 7, "correlation": corr},
    }


EVENTS = [
    _x("ProfilerStep#1", "user_annotation", 100, 100),
    _x("aten::add", "cpu_op", 110, 20),
    _x("cudaLaunchKernel", "cuda_runtime", 115, 5, correlation=1),
    _gpu("k1", 125, 35, 1),
    _x("aten::item", "cpu_op", 140, 50),
    _x("cudaStreamSynchronize", "cuda_runtime", 145, 40, correlation=2),
    _x("ProfilerStep#2", "user_annotation", 200, 100),
    _x("aten::mul", "cpu_op", 210, 20),
    _x("cudaLaunchKernel", "cuda_runtime", 212, 4, correlation=3),
    _gpu("k2", 220, 30, 3),
    _x("aten::item", "cpu_op", 260, 35),
    _x("cudaStreamSynchronize", "cuda_runtime", 262, 30, correlation=4),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("tiny")
    trace = root / "tiny.json"
    trace.write_text(json.dumps({"traceEvents": EVENTS}))
    wh = root / "wh"
    ingest([trace], warehouse=wh, job="tiny")
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    res = replay_job(con, "tiny")
    yield con, res
    con.close()


def test_tasks_cut_ops_at_runtime_calls(tiny) -> None:  # noqa: ANN001
    con, _ = tiny
    rows = con.sql(
        "SELECT task, role, ts_ns, dur_ns, gap_ns, rt_mode, rt_arg FROM tasks ORDER BY task"
    ).fetchall()
    roles = [r[1] for r in rows]
    assert roles == [
        "op",
        "launch",
        "op",
        "kernel",
        "op",
        "stream_sync",
        "op",
        "op",
        "launch",
        "op",
        "kernel",
        "op",
        "stream_sync",
        "op",
    ]
    # origin = first task (110 us); the piece of aten::item before its sync keeps a 10 us gap
    assert rows[4][2:5] == (30_000, 5_000, 10_000)
    # the sync waits at runtime (Rt.STREAM = 1) on the stream, processor 1
    assert rows[5][5:] == (1, 1)


def test_deps_launch_by_correlation(tiny) -> None:  # noqa: ANN001
    con, _ = tiny
    assert con.sql("SELECT src, dst, kind FROM deps ORDER BY dst").fetchall() == [
        (1, 3, "launch"),
        (8, 10, "launch"),
    ]


@pytest.mark.parametrize("runtime", ["xpu_runtime", "privateuse1_runtime", "hip_runtime"])
def test_other_backends_runtime_calls_launch_by_correlation(tmp_path, runtime: str) -> None:  # noqa: ANN001
    """Intel XPU, out-of-tree (PrivateUse1) and AMD traces name their host runtime category
    otherwise: the same calls give the same tasks and launch edges as on CUDA."""
    events = [{**e, "cat": runtime} if e["cat"] == "cuda_runtime" else e for e in EVENTS]
    res = _replayed(tmp_path, "backend", events)
    deps = [(r["src"], r["dst"], r["kind"]) for r in res.tables["deps"].to_pylist()]
    assert sorted(deps, key=lambda d: d[1]) == [(1, 3, "launch"), (8, 10, "launch")]
    roles = [r["role"] for r in res.tables["tasks"].to_pylist()]
    assert roles.count("launch") == 2 and roles.count("stream_sync") == 2


def test_iterations(tiny) -> None:  # noqa: ANN001
    con, _ = tiny
    got = con.sql(
        "SELECT step, cpu_step_ns, period_ns, gpu_span_ns, warmup, truncated FROM iterations"
    ).fetchall()
    assert got == [
        (1, 100_000, 100_000, 35_000, True, False),
        (2, 100_000, None, 30_000, False, False),
    ]


def test_model_schedule_by_hand(tiny) -> None:  # noqa: ANN001
    _, res = tiny
    s = {
        (r["mode"], r["task"]): (r["start_ns"], r["end_ns"])
        for r in res.tables["schedules"].to_pylist()
    }
    # k1: launch ends at 10 us, + 3 us latency + 2 us gap
    assert s[("model", 3)] == (15_000, 50_000)
    # sync: starts 35 us, returns 25 us after k1 ends
    assert s[("model", 5)] == (35_000, 75_000)
    # k2: launch [102, 106] after a 20 us idle gap, + 5 us
    assert s[("model", 10)] == (111_000, 141_000)
    # second sync: k2 done long before: start 152 + its own 25 us
    assert s[("model", 12)] == (152_000, 177_000)
    # identity: GPU tasks at their traced offsets
    assert s[("identity", 3)] == (15_000, 50_000)
    assert s[("identity", 10)] == (110_000, 140_000)
    rep = {
        (r["step"], r["metric"], r["mode"]): r["replayed_ns"]
        for r in res.tables["iteration_replay"].to_pylist()
    }
    assert rep[(1, "cpu_step", "model")] == 100_000
    assert rep[(2, "cpu_step", "model")] == 95_000
    assert rep[(1, "period", "model")] == 100_000
    assert rep[(1, "gpu_span", "model")] == 35_000


# --- SM occupancy and pageable copies -------------------------------------------------------
# W (stream 7) fills every SM for 20 waves: 640 warps per SM at 50 % occupancy = 32 resident
# warps (of 64). X (stream 20) is launched at 150-155 us, ready long before W ends, and starts in
# W's last waves (310 us against W's end 325 us). N (stream 21) starts while a kernel of one wave
# (64 warps per SM at 100 %) runs: no SM wait. The pageable HtoD copy's call [405, 540] is still
# running when its DMA starts (420) and returns before the DMA ends (550): a staging copy.
def _k(name, stream, ts, dur, corr, **geo):  # noqa: ANN001, ANN202
    ev = _gpu(name, ts, dur, corr)
    ev["tid"] = stream
    ev["args"]["stream"] = stream
    ev["args"].update(geo)
    return ev


WIDE = {"blocks per SM": 40.0, "warps per SM": 640.0, "est. achieved occupancy %": 50}
ONE_WAVE = {"blocks per SM": 1.0, "warps per SM": 64.0, "est. achieved occupancy %": 100}
SM_EVENTS = [
    _x("ProfilerStep#1", "user_annotation", 100, 500),
    _x("aten::mm", "cpu_op", 110, 20),
    _x("cudaLaunchKernel", "cuda_runtime", 112, 5, correlation=1),
    _k("W", 7, 125, 200, 1, **WIDE),
    _x("aten::permute", "cpu_op", 140, 20),
    _x("cudaStreamWaitEvent", "cuda_runtime", 142, 3, correlation=2),
    _x("cudaLaunchKernel", "cuda_runtime", 150, 5, correlation=3),
    _k("X", 20, 310, 10, 3, **ONE_WAVE),
    _x("aten::mul", "cpu_op", 330, 20),
    _x("cudaLaunchKernel", "cuda_runtime", 332, 5, correlation=5),
    _k("V", 7, 340, 50, 5, **ONE_WAVE),
    _x("cudaLaunchKernel", "cuda_runtime", 343, 5, correlation=6),
    _k("N", 21, 352, 5, 6, **ONE_WAVE),
    _x("aten::copy_", "cpu_op", 400, 160),
    _x("cudaMemcpyAsync", "cuda_runtime", 405, 135, correlation=4),
    {**_k("Memcpy HtoD (Pageable -> Device)", 7, 420, 130, 4), "cat": "gpu_memcpy"},
]


@pytest.fixture(scope="module")
def sm(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("sm")
    trace = root / "sm.json"
    trace.write_text(json.dumps({"traceEvents": SM_EVENTS}))
    wh = root / "wh"
    ingest([trace], warehouse=wh, job="sm")
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    res = replay_job(con, "sm", modes=("model",))
    yield con, res
    con.close()


def _task(con, name: str) -> int:  # noqa: ANN001
    return con.execute("SELECT task FROM tasks WHERE name = ?", [name]).fetchall()[0][0]


def test_sm_wait_edge_from_a_multi_wave_kernel(sm) -> None:  # noqa: ANN001
    con, res = sm
    w, x, v, n = (_task(con, k) for k in ("W", "X", "V", "N"))
    edges = con.sql("SELECT src, dst FROM deps WHERE kind = 'sm_wait'").fetchall()
    assert edges == [(w, x)]  # not (V, N): V runs in one wave
    s = {r["task"]: (r["start_ns"], r["end_ns"]) for r in res.tables["schedules"].to_pylist()}
    # X waits for W's end, then the 2 us inter-op gap (default: too few samples)
    assert s[x][0] == s[w][1] + 2_000
    # N does not wait for V
    assert s[n][0] < s[v][1]


def test_pageable_staging_copy_waits_for_its_dma(sm) -> None:  # noqa: ANN001
    con, res = sm
    roles = con.sql(
        "SELECT role FROM tasks WHERE name = 'cudaMemcpyAsync' ORDER BY task"
    ).fetchall()
    assert roles == [("copy_issue",), ("copy_wait",)]
    copy = _task(con, "Memcpy HtoD (Pageable -> Device)")
    wait = con.sql("SELECT task FROM tasks WHERE role = 'copy_wait'").fetchall()[0][0]
    s = {r["task"]: (r["start_ns"], r["end_ns"]) for r in res.tables["schedules"].to_pylist()}
    # the call returns once its DMA is done (the observed return latency is clamped at 0)
    assert s[wait][1] == s[copy][1]


# --- inferred inter-stream edge -------------------------------------------------------------
# No cuda_sync events: K2 (stream 20) is launched after a cudaStreamWaitEvent and starts 36 us
# later than its launch explains, 4 us before K1 (stream 7, launched before the wait) ends. The
# trace's timer noise is the largest same-stream overlap: K3 starts 6 us before K1 ends, so
# K1 -> K2 is within noise and is inferred. K4 (stream 7) is launched after the wait: it cannot
# be in the waited event, although it ends just before K5 (stream 20, launched after a second
# wait) starts; K5's only candidate launched before that wait is K3, which ends 40 us earlier
# and does not explain K5's delay, so K5 gets no edge.
WAIT_EVENTS = [
    _x("ProfilerStep#1", "user_annotation", 100, 400),
    _x("aten::mm", "cpu_op", 110, 70),
    _x("cudaLaunchKernel", "cuda_runtime", 112, 5, correlation=1),
    _k("K1", 7, 125, 75, 1),
    _x("cudaStreamWaitEvent", "cuda_runtime", 140, 3, correlation=2),
    _x("cudaLaunchKernel", "cuda_runtime", 150, 5, correlation=3),
    _k("K2", 20, 196, 10, 3),
    _x("cudaLaunchKernel", "cuda_runtime", 160, 5, correlation=4),
    _k("K3", 7, 194, 20, 4),
    _x("aten::add", "cpu_op", 230, 60),
    _x("cudaStreamWaitEvent", "cuda_runtime", 232, 3, correlation=5),
    _x("cudaLaunchKernel", "cuda_runtime", 240, 5, correlation=6),
    _k("K4", 7, 250, 50, 6),
    _x("cudaLaunchKernel", "cuda_runtime", 260, 5, correlation=7),
    _k("K5", 20, 302, 10, 7),
]


@pytest.fixture(scope="module")
def waits(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("waits")
    trace = root / "waits.json"
    trace.write_text(json.dumps({"traceEvents": WAIT_EVENTS}))
    wh = root / "wh"
    ingest([trace], warehouse=wh, job="waits")
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    res = replay_job(con, "waits", modes=("model",))
    yield con, res
    con.close()


def test_inferred_stream_wait_within_timer_noise_and_causal(waits) -> None:  # noqa: ANN001
    con, res = waits
    k1, k2 = _task(con, "K1"), _task(con, "K2")
    edges = con.sql("SELECT src, dst FROM deps WHERE kind = 'stream_wait_inferred'").fetchall()
    assert edges == [(k1, k2)]
    s = {r["task"]: (r["start_ns"], r["end_ns"]) for r in res.tables["schedules"].to_pylist()}
    assert s[k2][0] == s[k1][1] + 2_000  # K1's end + the default 2 us gap


def test_an_inferred_wait_source_starts_before_its_waiter(tmp_path) -> None:  # noqa: ANN001
    """K3 overlaps K1 by 50 us on stream 7, so the trace's timer noise is wide. K5 (stream 7,
    launched before the wait) is short and runs from 5 us after K2 (stream 20, launched after
    the wait) started: it ends within the noise band after K2's start, yet it cannot be what K2
    waited for. No inferred edge comes from a task that started after its destination."""
    events = [
        _x("ProfilerStep#1", "user_annotation", 100, 400),
        _x("aten::mm", "cpu_op", 110, 70),
        _x("cudaLaunchKernel", "cuda_runtime", 112, 5, correlation=1),
        _k("K1", 7, 125, 75, 1),
        _x("cudaLaunchKernel", "cuda_runtime", 120, 5, correlation=2),
        _k("K3", 7, 150, 60, 2),
        _x("cudaLaunchKernel", "cuda_runtime", 130, 5, correlation=3),
        _k("K5", 7, 305, 5, 3),
        _x("cudaStreamWaitEvent", "cuda_runtime", 140, 3, correlation=4),
        _x("cudaLaunchKernel", "cuda_runtime", 150, 5, correlation=5),
        _k("K2", 20, 300, 20, 5),
    ]
    res = _replayed(tmp_path, "late_src", events)
    tasks = {t["task"]: t for t in res.tables["tasks"].to_pylist()}
    inferred = [
        (tasks[d["src"]]["name"], tasks[d["dst"]]["name"])
        for d in res.tables["deps"].to_pylist()
        if d["kind"] == "stream_wait_inferred"
    ]
    assert ("K5", "K2") not in inferred
    assert all(
        tasks[d["src"]]["ts_ns"] < tasks[d["dst"]]["ts_ns"]
        for d in res.tables["deps"].to_pylist()
        if d["kind"] == "stream_wait_inferred"
    )


def _replayed(tmp_path, job: str, events: list[dict]):  # noqa: ANN001, ANN202
    """The replay of a trace of `events`, ingested as `job` into a fresh warehouse."""
    trace = tmp_path / f"{job}.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    wh = tmp_path / "wh"
    ingest([trace], warehouse=wh, job=job)
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    try:
        return replay_job(con, job)
    finally:
        con.close()


def _steps(*spans: tuple[int, int, int]) -> list[dict]:
    """ProfilerStep#n at ts (µs) lasting dur, each holding one 20 µs op 10 µs in (none when the
    step is shorter than that)."""
    out = []
    for n, ts, dur in spans:
        out.append(_x(f"ProfilerStep#{n}", "user_annotation", ts, dur))
        if dur >= 30:
            out.append(_x("aten::add", "cpu_op", ts + 10, 20))
    return out


def test_period_only_between_consecutive_steps(tmp_path) -> None:  # noqa: ANN001
    """A profiler that traces one step per cycle numbers them #2, #5, #8: the time from #2 to #5
    spans untraced steps, so it is no period; #5 to #6 is."""
    events = _steps((2, 100, 50), (5, 400, 50), (6, 470, 50))
    its = _replayed(tmp_path, "cycles", events).tables["iterations"].to_pylist()
    rows = sorted((r["step"], r["period_ns"]) for r in its)
    assert rows == [(2, None), (5, 70_000), (6, None)]


def test_a_kernel_before_a_short_call_is_skew_not_an_early_launch(tmp_path) -> None:  # noqa: ANN001
    """CPU and GPU clocks disagree by a few us: K3 starts 3 us before its 3 us launch call, which
    is shorter than the rank's launch call (5 us). The call cannot be split into a launch and a
    tail (the tail would last -2 us and the whole job failed to replay): it stays one launch."""
    events = [
        _x("ProfilerStep#1", "user_annotation", 100, 200),
        _x("aten::add", "cpu_op", 110, 20),
        _x("cudaLaunchKernel", "cuda_runtime", 112, 5, correlation=1),
        _gpu("K1", 125, 10, 1),
        _x("aten::mul", "cpu_op", 140, 20),
        _x("cudaLaunchKernel", "cuda_runtime", 142, 5, correlation=2),
        _gpu("K2", 150, 10, 2),
        _x("aten::sub", "cpu_op", 170, 20),
        _x("cudaLaunchKernel", "cuda_runtime", 175, 3, correlation=3),
        _gpu("K3", 172, 10, 3),
    ]
    res = _replayed(tmp_path, "skew", events)
    tasks = res.tables["tasks"].to_pylist()
    third = [(t["role"], t["dur_ns"]) for t in tasks if t["name"] == "cudaLaunchKernel"][2:]
    assert third == [("launch", 3_000)]
    assert min(t["dur_ns"] for t in tasks) >= 0
    s = {r["task"]: r for r in res.tables["schedules"].to_pylist() if r["mode"] == "model"}
    k3 = next(t["task"] for t in tasks if t["name"] == "K3")
    call = [t["task"] for t in tasks if t["name"] == "cudaLaunchKernel"][2]
    assert s[k3]["start_ns"] >= s[call]["end_ns"]  # launched by its call, whatever the clocks say


def test_a_step_without_tasks_leaves_the_period_before_it_unreplayed(tmp_path) -> None:  # noqa: ANN001
    """ProfilerStep#2 lasts 0 us and holds no task, so it is not replayed: step 1's replayed
    period cannot end at step 3's start (twice the measured period), it is not scored at all."""
    events = _steps((1, 100, 50), (2, 170, 0), (3, 240, 50), (4, 310, 50))
    rows = _replayed(tmp_path, "zero_step", events).tables["iteration_replay"].to_pylist()
    period = sorted(
        (r["step"], r["measured_ns"], r["replayed_ns"])
        for r in rows
        if r["metric"] == "period" and r["mode"] == "model"
    )
    assert period == [(3, 70_000, 70_000)]


def test_a_group_is_named_by_its_outermost_op_whatever_the_file_order(tmp_path) -> None:  # noqa: ANN001
    """Two ops start together and the child is written first: the longer one is the parent and
    names the top-level task (the window orders a thread's ops by start, then end descending)."""
    events = [
        _x("ProfilerStep#1", "user_annotation", 100, 100),
        _x("aten::_to_copy", "cpu_op", 110, 20),
        _x("aten::to", "cpu_op", 110, 30),
        _x("aten::empty", "cpu_op", 112, 3),
    ]
    res = _replayed(tmp_path, "child_first", events)
    ops = [(r["name"], r["event_idx"], r["dur_ns"]) for r in res.tables["tasks"].to_pylist()]
    assert ops == [("aten::to", 2, 30_000)]


def test_threads_follow_the_row_groups_and_are_restored(tiny) -> None:  # noqa: ANN001
    """A small job's graph is built on one DuckDB thread (a second one only spins) and the
    connection gets its own setting back; a big one keeps every thread the connection had."""
    from warehouse.catalog import DUCKDB_ROW_GROUP, threads_for, threads_for_rows

    assert threads_for_rows(10, 8) == 1
    assert threads_for_rows(3 * DUCKDB_ROW_GROUP + 1, 8) == 3
    assert threads_for_rows(100 * DUCKDB_ROW_GROUP, 4) == 4
    con = duckdb.connect(config={"threads": 3})
    setting = "SELECT current_setting('threads')"
    with threads_for(con, 2 * DUCKDB_ROW_GROUP) as n:
        assert n == 2 and con.execute(setting).fetchone()[0] == 2
    assert con.execute(setting).fetchone()[0] == 3
    with pytest.raises(RuntimeError), threads_for(con, 0):
        assert con.execute(setting).fetchone()[0] == 1
        raise RuntimeError("restored on the way out, too")
    assert con.execute(setting).fetchone()[0] == 3
    cat, _ = tiny
    cat.execute("SET threads = 2")
    replay_job(cat, "tiny")
    assert cat.execute(setting).fetchone()[0] == 2


def test_replay_arrays_are_read_in_task_order_whatever_the_scan_gives() -> None:
    """graph_tasks.sql relies on the stored order of `tasks`; should a scan ever return rows in
    another order, the replay's reader sorts them (and leaves an ordered table as it is)."""
    import numpy as np
    import pyarrow as pa

    from lumos.replay.run import _in_task_order

    rank = np.repeat([0, 1, 2], 4)
    task = np.tile(np.arange(4), 3)
    ordered = pa.table({"rank": rank, "task": task, "x": np.arange(12)})
    assert _in_task_order(ordered) is ordered
    shuffled = ordered.take(np.random.default_rng(3).permutation(12))
    assert _in_task_order(shuffled).equals(ordered)
    # a repeated (rank, task) is not an order the replay can use: sorted, not passed through
    dup = pa.table({"rank": [0, 0], "task": [1, 1], "x": [0, 1]})
    assert _in_task_order(dup) is not dup and _in_task_order(dup).num_rows == 2
