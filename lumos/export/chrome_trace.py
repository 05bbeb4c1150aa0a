"""One replayed (or measured) iteration as a gzip'd Chrome-trace JSON file for ui.perfetto.dev.

Layout: one process per CPU process of the rank (its threads are its tracks) and one process per
GPU device (`rank R GPU D`, its streams are its tracks), named with `process_name` /
`thread_name` metadata events. Every task of the step (steps as in
lumos_sql/explain/task_steps.sql) is an `X` event at its time in the chosen mode; `ts`/`dur` are
µs (the format's unit) from the rank's origin, with ns kept as decimals. `args` carry the task id,
kind, the measured ts/dur, the replayed-minus-measured offsets of start and end, and what bound the
task (crit_kind, crit_src). Each fixed dependency (`deps`: launch, inter-stream, inter-thread)
between two tasks of the step is a flow: an `s` event on the source's track at its start and an
`f` event (`bp: "e"`, bound to the enclosing slice) on the destination's track at its start, with
a unique id. Processor order is implied by the tracks and is not drawn.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from kernels.replay import Crit
from lumos.explain.inputs import MEASURED, NO_STEP, JobTables, RankView

GPU_PID_BASE = 1_000_000_000  # GPU devices get pids above any real process id


class ExportError(ValueError):
    """The requested rank, step or mode does not exist (names the job and what exists)."""


def _us(ns: np.ndarray) -> list[float]:
    return (ns / 1000.0).tolist()


def _view(job: JobTables, rank: int) -> RankView:
    views = {v.rank: v for v in job.ranks()}
    if rank not in views:
        raise ExportError(f"job {job.job!r} has no rank {rank} (ranks: {sorted(views)})")
    return views[rank]


def trace_events(job: JobTables, rank: int, step: int, mode: str = "model") -> dict[str, Any]:
    """The Chrome-trace object (`traceEvents` + metadata) of one step of one rank."""
    view = _view(job, rank)
    if mode != MEASURED and mode not in view.schedules:
        raise ExportError(
            f"job {job.job!r} rank {rank}: no {mode!r} schedule (modes: {view.modes})"
        )
    ids = np.flatnonzero(view.step == step) if step != NO_STEP else np.empty(0, np.int64)
    if ids.size == 0:
        steps = sorted(set(view.steps.column("step").to_pylist()))
        raise ExportError(f"job {job.job!r} rank {rank}: no task in step {step} (steps: {steps})")
    start, end = view.times(mode)
    m_start, m_end = view.times(MEASURED)
    if mode == MEASURED:
        crit_src = np.full(view.kind.size, -1, np.int64)
        crit_kind = np.zeros(view.kind.size, np.int64)
    else:
        crit_src, crit_kind = view.crit(mode)
    t = view.tasks
    pid = t.column("pid").to_pylist()
    tid = t.column("tid").to_pylist()
    dev = t.column("device").to_pylist()
    stream = t.column("stream").to_pylist()
    names = t.column("name").to_pylist()
    roles = t.column("role").to_pylist()
    crit_names = {int(c): c.name.lower() for c in Crit}

    events: list[dict[str, Any]] = []
    track: dict[int, tuple[int, int]] = {}
    procs: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for i in ids.tolist():
        if view.is_gpu[i]:
            p, th = GPU_PID_BASE + int(dev[i]), int(stream[i])
            procs.setdefault(p, f"rank {rank} GPU {dev[i]}")
            threads.setdefault((p, th), f"stream {stream[i]}")
        else:
            p, th = int(pid[i]), int(tid[i])
            procs.setdefault(p, f"rank {rank} CPU pid {pid[i]}")
            threads.setdefault((p, th), f"thread {tid[i]}")
        track[i] = (p, th)
    for sort, (p, name) in enumerate(sorted(procs.items())):
        events.append(
            {"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": name}}
        )
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": p,
                "tid": 0,
                "args": {"sort_index": sort},
            }
        )
    for (p, th), name in sorted(threads.items()):
        events.append(
            {"ph": "M", "name": "thread_name", "pid": p, "tid": th, "args": {"name": name}}
        )

    ts_us = _us(start[ids])
    dur_us = _us(end[ids] - start[ids])
    mts_us = _us(m_start[ids])
    mdur_us = _us(m_end[ids] - m_start[ids])
    off_start = (start[ids] - m_start[ids]).tolist()
    off_end = (end[ids] - m_end[ids]).tolist()
    for k, i in enumerate(ids.tolist()):
        p, th = track[i]
        events.append(
            {
                "ph": "X",
                "name": names[i],
                "cat": roles[i],
                "pid": p,
                "tid": th,
                "ts": ts_us[k],
                "dur": dur_us[k],
                "args": {
                    "task": i,
                    "kind": int(view.kind[i]),
                    "measured_ts_us": mts_us[k],
                    "measured_dur_us": mdur_us[k],
                    "start_offset_ns": off_start[k],
                    "end_offset_ns": off_end[k],
                    "crit_kind": crit_names.get(int(crit_kind[i]), str(int(crit_kind[i]))),
                    "crit_src": int(crit_src[i]),
                },
            }
        )

    d = job.deps
    d_rank = d.column("rank").to_numpy()
    sel = d_rank == rank
    src = np.asarray(d.column("src").to_numpy()[sel], np.int64)
    dst = np.asarray(d.column("dst").to_numpy()[sel], np.int64)
    kinds = np.asarray(d.column("kind").to_pylist(), dtype=object)[sel]
    inside = np.zeros(view.kind.size, bool)
    inside[ids] = True
    ok = inside[src] & inside[dst]
    for fid, (s, e, kind) in enumerate(
        zip(src[ok].tolist(), dst[ok].tolist(), kinds[ok], strict=True)
    ):
        ps, ts_ = track[s]
        pd, td = track[e]
        events.append(
            {
                "ph": "s",
                "id": fid,
                "name": kind,
                "cat": "dep",
                "pid": ps,
                "tid": ts_,
                "ts": float(start[s]) / 1000.0,
            }
        )
        events.append(
            {
                "ph": "f",
                "bp": "e",
                "id": fid,
                "name": kind,
                "cat": "dep",
                "pid": pd,
                "tid": td,
                "ts": float(start[e]) / 1000.0,
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "job": job.job,
            "rank": rank,
            "step": step,
            "mode": mode,
            "tasks": int(ids.size),
            "producer": "lumos export",
        },
    }


def write_trace(trace: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write the trace as JSON, gzip'd when the name ends in .gz (temp file + rename)."""
    path = Path(out)
    data = msgspec.json.encode(trace)
    if path.suffix == ".gz":
        try:
            from isal.igzip import compress
        except ImportError:  # isal is a dependency; gzip is the same format, slower
            from gzip import compress
        data = compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
