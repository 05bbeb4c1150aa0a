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
