"""Replay accuracy on the real traces (issue 3): the model replay within the bounds (median <= 1%,
max <= 3% over complete steps) on every real trace with complete steps, or, where the data
keeps a trace from them, within its documented ceiling; the multi-rank replay of the 8-rank DLRM
job; and each rule family shown to matter (removing it makes at least one real trace worse).

Every trace is ingested once per session into one temporary warehouse, and each job's full
replay runs once per session (`replays`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from real_replays import TRACES

from kernels.replay import ReplayError
from lumos.replay.collectives import build_collectives
from lumos.replay.run import replay_job

BOUND = (0.01, 0.03)
# (median, max) ceilings for traces whose data keeps them from BOUND, each with the reason from
# the data. None today: trace_diff/test (noisy V100, rank 1 of 2), the last one, reaches BOUND
# since the SM-wait, timer-noise and queue-contradiction rules (see docs/replay.md).
CEILING: dict[str, dict[str, tuple[float, float]]] = {}
DLRM_RANKS = 8
DLRM_COLLECTIVES = 8  # 5 all_to_all + 3 allreduce per rank


def _errors(con, job: str, drop=(), modes=("model",)) -> dict[str, float]:  # noqa: ANN001
    try:
        res = replay_job(con, job, drop=drop, modes=modes)
    except ReplayError:
        return {"deadlock": float("inf")}
    rows = [
        r
        for r in res.tables["iteration_replay"].to_pylist()
        if not r["warmup"] and not r["truncated"] and r["mode"] == "model"
    ]
    out: dict[str, list[float]] = {}
    for r in rows:
        out.setdefault(r["metric"], []).append(r["rel_error"])
    return {m: max(v) for m, v in out.items()}


@pytest.mark.parametrize("job", sorted(TRACES))
def test_model_replay_accuracy(replays, job: str) -> None:  # noqa: ANN001
    rows = [r for r in replays(job).tables["replay_quality"].to_pylist() if r["mode"] == "model"]
    assert rows, f"{job}: no complete step replayed"
    for r in rows:
        med, mx = CEILING.get(job, {}).get(r["metric"], BOUND)
        assert r["median_rel_error"] <= med, r
        assert r["max_rel_error"] <= mx, r


def test_dlrm_multirank_within_bounds_on_every_rank(replays) -> None:  # noqa: ANN001
    res = replays("dlrm")
    rows = [r for r in res.tables["replay_quality"].to_pylist() if r["mode"] == "multirank"]
    assert sorted({r["rank"] for r in rows}) == list(range(DLRM_RANKS))
    assert {r["metric"] for r in rows} == {"cpu_step", "gpu_span"}  # one step: no period
    for r in rows:
        assert r["median_rel_error"] <= BOUND[0], r
        assert r["max_rel_error"] <= BOUND[1], r


def test_dlrm_multirank_collectives_join_all_ranks(real_wh) -> None:  # noqa: ANN001
    from lumos.replay.multirank import build_multirank
    from lumos.replay.run import build_tables

    wh, con = real_wh
    coll = build_collectives(wh, "dlrm", write=False)
    consts = build_tables(con, "dlrm")
    tasks = con.sql("SELECT * FROM tasks ORDER BY rank, task").to_arrow_table()
    deps = con.sql("SELECT * FROM deps ORDER BY rank, dst, src").to_arrow_table()
    m = build_multirank(tasks, deps, consts, coll)
    assert m.n_collectives == DLRM_COLLECTIVES
    joined = m.graph.coll >= 0
    assert joined.sum() == DLRM_RANKS * DLRM_COLLECTIVES
    assert sorted(set(m.rank[joined].tolist())) == list(range(DLRM_RANKS))


def test_multirank_recovers_known_clock_offsets(replays, real_wh) -> None:  # noqa: ANN001
    """Two ranks' files shifted by +37.5 ms and -12.345 ms replay exactly like the originals:
    the offsets recovered from the collectives align the ranks (without them, the shifted ranks
    would start tens of ms apart and every collective would wait for them)."""
    wh, con = real_wh

    def key(res) -> dict:  # noqa: ANN001
        return {
            (r["rank"], r["metric"]): r["replayed_ns"]
            for r in res.tables["iteration_replay"].to_pylist()
            if r["mode"] == "multirank"
        }

    base, shifted = key(replays("dlrm")), key(replays("dlrm_shift"))
    assert base.keys() == shifted.keys() and len(base) == 2 * DLRM_RANKS
    for k, v in base.items():
        assert abs(shifted[k] - v) <= 2_000, k  # 1 us timestamp resolution, two ends

    coll = build_collectives(wh, "dlrm_shift", write=False)
    unaligned = coll.set_column(
        coll.schema.get_field_index("offset_ns"),
        "offset_ns",
        pa.array(np.zeros(coll.num_rows, np.int64)),
    )
    res = replay_job(con, "dlrm_shift", modes=("multirank",), collectives=unaligned)
    worst = max(r["rel_error"] for r in res.tables["iteration_replay"].to_pylist())
    assert worst > BOUND[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind", ["gap", "launch", "sync", "stream_wait", "sm_wait", "thread", "ext_wait"]
)
def test_each_rule_matters(real_wh, kind: str) -> None:  # noqa: ANN001
    _, con = real_wh
    # small traces first: the first one that gets worse ends the test
    for job in ("resnet", "ns_res", "control", "dlrm", "nccl_data", "test", "df_index"):
        base = _errors(con, job)
        abl = _errors(con, job, drop=(kind,))
        if any(abl.get(m, float("inf")) > base[m] + 1e-4 for m in base) or "deadlock" in abl:
            return
    pytest.fail(f"removing {kind} changed no trace's replay")


def test_a_large_jobs_lean_build_gives_the_same_replay(replays, real_wh, monkeypatch) -> None:  # noqa: ANN001
    """From LEAN_EVENTS graph events on, the build drops each intermediate table once nothing
    reads it any more (and hands DuckDB's memory back): the replay is the same, and only the
    graph's results are left on the connection."""
    import lumos.replay.run as run

    wh, con = real_wh
    full = replays("control")  # the default build: control's 109k events are below LEAN_EVENTS
    monkeypatch.setattr(run, "LEAN_EVENTS", 0)
    lean = replay_job(con, "control")
    left = {
        name
        for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE 'g%'"
        ).fetchall()
    }
    assert left <= set(run.GRAPH_RESULTS) | {"g_iter_rel"}, left
    assert "g_ev" not in left and "g_tasks0" not in left
    for name in ("tasks", "deps", "schedules", "iteration_replay", "replay_quality"):
        assert lean.tables[name].equals(full.tables[name]), name


def _largest_stream_overlap_ns(path: Path) -> int:
    """From the trace file itself: the most one GPU task of a stream starts before the previous
    task of that stream ends (a stream runs one task at a time: the clocks' disagreement)."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    by_stream: dict[tuple, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            key = (e.get("pid"), e.get("tid"))
            by_stream.setdefault(key, []).append((float(e["ts"]), float(e["ts"]) + e["dur"]))
    worst = 0.0
    for spans in by_stream.values():
        spans.sort()
        end = spans[0][1]
        for ts, te in spans[1:]:
            worst = max(worst, end - ts)
            end = max(end, te)
    return int(round(worst * 1000))


def test_a_delay_inside_the_traces_own_noise_band_is_no_wait(replays, shared_traces) -> None:  # noqa: ANN001
    """trace_diff/test's clocks disagree by up to 13 us (same-stream overlaps): a kernel that
    starts a few us later than its graph explains is the tail of its inter-op gaps, not an
    external wait (they made step 1012's model replay 0.1 % longer). Every wait kept is longer
    than that band, and there are still some (a 447 us hold of a copy, ...)."""
    band = _largest_stream_overlap_ns(shared_traces / TRACES["test"])
    assert 5_000 < band <= 20_000, band  # V100, µs timestamps: the band the README names
    t = replays("test").tables["tasks"]
    waits = t.column("ext_wait_ns").fill_null(0).to_numpy()
    kept = waits[waits > 0]
    assert kept.size > 0
    assert kept.min() > band, (kept.min(), band)


def test_a_copy_within_the_device_waits_for_the_sms(replays) -> None:  # noqa: ANN001
    """A DtoD copy runs as a kernel on the SMs: on trace_diff/test one starts 451 us after its
    stream predecessor, as a kernel of another stream that fills every SM (196 waves) ends; it
    waits for that kernel (an SM-wait edge), where a host copy (a copy engine) never does."""
    res = replays("test")
    t = res.tables["tasks"].to_pydict()
    d = res.tables["deps"].to_pydict()
    into_copies = [
        (s, x)
        for s, x, k in zip(d["src"], d["dst"], d["kind"], strict=True)
        if k == "sm_wait" and t["role"][x] == "memcpy"
    ]
    assert into_copies
    for s, x in into_copies:
        assert t["name"][x].startswith("Memcpy DtoD"), t["name"][x]
        assert t["role"][s] == "kernel" and t["stream"][s] != t["stream"][x]
    # the longest-held of them starts as its source ends (within the trace's timer noise)
    s, x = max(into_copies, key=lambda e: t["ts_ns"][e[1]] - t["ts_ns"][e[0]])
    src_end = t["ts_ns"][s] + t["dur_ns"][s]
    assert abs(t["ts_ns"][x] - src_end) < 20_000
    assert t["ts_ns"][x] - t["ts_ns"][s] > 400_000
