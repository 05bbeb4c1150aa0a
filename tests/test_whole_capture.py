"""Traces without ProfilerStep (a profiler used without a schedule): one iteration, the whole
capture of the busiest CPU thread, replayed and scored like a step.

The window (thread, first start, last end) is computed here again from the raw JSON with the
standard `json` module (timestamps read as exact decimals), and the replay of every such real
trace is held to the step bound on its CPU span. Also MTIA's runtime regions: a runtime event that
wraps operators of its own thread is no task (kept as one, it made an MTIA capture replay 60%
long), and a launch call whose kernel started long before the call returned (its launch is
the call's first part; as one task, a 1.4 ms first call held its kernel back: 86% off).
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pytest

from lumos.explain.inputs import from_tables
from lumos.explain.run import explain
from lumos.replay.run import replay_job
from warehouse.catalog import build_catalog
from warehouse.ingest import ingest

CAPTURES = {
    "simple_add": "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
    "alexnet": "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "event_sync_streams": "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    "mtia_inference": "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
    "gpu_annotation": "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
    "execution_trace": "hta/execution_trace/benchmark_simple_add_trace.json.gz",
    "file_list": "hta/trace_file_list/inference_rank_1.json.gz",
    "linear": "param/linear/linear_kineto.json.gz",
    "mi300x_train": "tracelens/mi300x_ddp_resnet18_train.json.gz",
    "mi300x_compile": "tracelens/mi300x_torch_compile_triton.json.gz",
    "mi210": "tracelens/mi210_gpu_only_trace.json.gz",
}
STEPPED = {"nccl_data": "hta/nccl_parser_config/nccl_data.json.gz"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "mtia_runtime", "Runtime"}
BOUND = 0.01
# GPU spans the model cannot reproduce, with the reason from the data (the CPU span still holds):
GPU_SPAN_EXCEPTIONS = {
    # a fresh process: each kernel's first launch starts 2.4-3.9 ms after its call returns
    # (one-time loading), which the rank's launch-latency constant does not know
    "execution_trace",
}


@pytest.fixture(scope="module")
def captures(shared_traces: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    wh = tmp_path_factory.mktemp("capture") / "wh"
    files = {}
    for job, rel in {**CAPTURES, **STEPPED}.items():
        files[job] = shared_traces / rel
        ingest([files[job]], warehouse=wh, job=job, build_catalog=False)
    build_catalog(wh)
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    results = {job: replay_job(con, job) for job in files}
    yield files, results
    con.close()


def _ns(v: Decimal) -> int:
    return int(v * 1000)


def _expected_window(path: Path) -> tuple[int, int, int, int]:
    """(pid, tid, start, end) of the busiest thread, from the raw JSON: the thread whose CPU
    operators and runtime calls cover the most time (a runtime event holding the start of an
    operator of its thread is a region, not a call), lowest (pid, tid) on ties."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X" and "ts" in e]
    spans: dict[tuple[int, int], list[tuple[int, int]]] = {}
    ops: dict[tuple[int, int], list[int]] = {}
    for e in xs:
        if e.get("cat") == "cpu_op":
            ops.setdefault((e["pid"], e["tid"]), []).append(_ns(Decimal(e["ts"])))
    for e in xs:
        cat = e.get("cat")
        if cat != "cpu_op" and cat not in RUNTIME_CATS:
            continue
        key = (e["pid"], e["tid"])
        start = _ns(Decimal(e["ts"]))
        end = start + max(_ns(Decimal(e.get("dur", 0))), 0)
        if cat != "cpu_op" and any(start < t < end for t in ops.get(key, [])):
            continue
        spans.setdefault(key, []).append((start, end))
    best = None
    for key, ss in spans.items():
        ss.sort(key=lambda s: (s[0], -s[1]))
        covered, run_start, run_end = 0, None, None
        for a, b in ss:
            if run_end is None or a > run_end:
                if run_end is not None:
                    covered += run_end - run_start
                run_start, run_end = a, b
            else:
                run_end = max(run_end, b)
        covered += run_end - run_start
        rank_key = (-covered, key)
        if best is None or rank_key < best[0]:
            best = (rank_key, key, min(a for a, _ in ss), max(b for _, b in ss))
    assert best is not None
    (_, (pid, tid), start, end) = best
    return pid, tid, start, end


@pytest.mark.parametrize("job", sorted(CAPTURES))
def test_one_iteration_the_busiest_threads_capture(captures, job: str) -> None:
    files, results = captures
    it = results[job].tables["iterations"].to_pylist()
    assert len(it) == 1, it
    row = it[0]
    assert row["whole_capture"] and row["step"] == 0 and not row["warmup"]
    pid, tid, start, end = _expected_window(files[job])
    assert (row["pid"], row["tid"], row["cpu_start_ns"], row["cpu_end_ns"]) == (
        pid,
        tid,
        start,
        end,
    )


@pytest.mark.parametrize("job", sorted(CAPTURES))
def test_the_capture_replays_within_the_step_bound(captures, job: str) -> None:
    _, results = captures
    q = {
        (r["metric"], r["mode"]): r["max_rel_error"]
        for r in results[job].tables["replay_quality"].to_pylist()
    }
    assert ("cpu_step", "model") in q, f"{job}: its capture was not scored: {q}"
    assert q[("cpu_step", "model")] <= BOUND, q
    gpu = q.get(("gpu_span", "model"))
    if gpu is not None and job not in GPU_SPAN_EXCEPTIONS:
        assert gpu <= BOUND, q


def test_a_stepped_trace_has_no_capture_iteration(captures) -> None:
    _, results = captures
    it = results["nccl_data"].tables["iterations"].to_pylist()
    assert len(it) > 1 and not any(r["whole_capture"] for r in it)


def test_runtime_regions_around_operators_are_not_tasks(captures) -> None:
    """No runtime task of the MTIA capture holds the start of an operator task of its thread:
    the regions that wrap operators (`predictor_executor::run`, `gif_merge`) are not tasks."""
    _, results = captures
    tasks = results["mtia_inference"].tables["tasks"].to_pylist()
    cpu = [t for t in tasks if not t["is_gpu"]]
    op_starts: dict[tuple[int, int], list[int]] = {}
    for t in cpu:
        if t["role"] == "op":
            op_starts.setdefault((t["pid"], t["tid"]), []).append(t["ts_ns"])
    runtime = [t for t in cpu if t["role"] != "op"]
    assert runtime
    held = [
        t["name"]
        for t in runtime
        if any(
            t["ts_ns"] < s < t["ts_ns"] + t["dur_ns"]
            for s in op_starts.get((t["pid"], t["tid"]), [])
        )
    ]
    assert not held, held[:5]
    names = {t["name"] for t in runtime}
    assert not any(n.startswith("predictor_executor::run") for n in names)


def test_the_capture_is_explained(captures) -> None:
    _, results = captures
    tables = explain(from_tables("simple_add", results["simple_add"].tables))
    steps = {(r["rank"], r["step"]) for r in tables["breakdown"].to_pylist()}
    assert steps == {(0, 0)}


def test_a_launch_that_returned_long_after_its_kernel_started_is_split(captures) -> None:
    """trace_file_list's first cudaLaunchKernel lasts 1.4 ms and its kernel ran 12 us into it:
    the call's first part (the rank's median launch call) carries the launch and the rest is a
    runtime tail, so the kernel is not held to the call's end; the identity replay, which gives
    every GPU task its traced offset unless an edge forces it later, then matches the trace."""
    _, results = captures
    tables = results["file_list"].tables
    tasks = tables["tasks"].to_pylist()
    gpu_corr = {t["correlation"] for t in tasks if t["is_gpu"]}
    launches = sorted(
        (t for t in tasks if not t["is_gpu"] and t["role"] == "launch"), key=lambda t: t["ts_ns"]
    )
    first = launches[0]
    tail = [
        t
        for t in tasks
        if not t["is_gpu"] and t["event_idx"] == first["event_idx"] and t["role"] == "runtime"
    ]
    assert len(tail) == 1 and first["correlation"] in gpu_corr
    assert tail[0]["ts_ns"] == first["ts_ns"] + first["dur_ns"]
    calls = [first["dur_ns"] + tail[0]["dur_ns"]] + [t["dur_ns"] for t in launches[1:]]
    assert first["dur_ns"] == np.median(calls)  # the rank's median launch call, not 1.4 ms
    assert tail[0]["dur_ns"] > 1_000_000
    q = {(r["metric"], r["mode"]): r["max_rel_error"] for r in tables["replay_quality"].to_pylist()}
    assert q[("gpu_span", "identity")] <= BOUND and q[("gpu_span", "model")] <= BOUND, q
