"""The critical path of each replayed step, and what bounded it.

The replay kernel records for every task ``crit_src``, the task that bound its end. From the
step's last-ending task `kernels.intervals.critical_walk` follows it back to the step's window
start, cutting ``[window start, last end]`` into contiguous pieces, one per path node: its
execution (``exec_cat``: cpu, launch, sync, gpu_compute, communication) and the gap before it
(``gap_cat``: cpu, launch, traced_offset, communication). The categories in full:
docs/explain.md, "Module notes".
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kernels.intervals import critical_walk
from kernels.replay import Crit
from lumos.explain.inputs import RankView, step_windows
from warehouse.schema import CRITICAL_PATH, CRITICAL_PATH_SUMMARY

CATEGORIES = ("cpu", "launch", "sync", "gpu_compute", "communication", "traced_offset")
CPU, LAUNCH, SYNC, GPU, COMM, TRACED = range(len(CATEGORIES))

# tasks.kind (kernels.graph.Kind) -> execution category
_EXEC = {0: CPU, 1: CPU, 2: LAUNCH, 3: SYNC, 4: CPU, 10: GPU, 11: GPU, 12: GPU, 13: GPU, 14: COMM}


def exec_categories(view: RankView) -> np.ndarray:
    cat = np.full(view.kind.size, CPU, np.int64)
    for k, c in _EXEC.items():
        cat[view.kind == k] = c
    cat[view.is_gpu & (view.cls == 1)] = COMM
    return cat


def gap_categories(
    view: RankView, src: np.ndarray, kind: np.ndarray, task: np.ndarray
) -> np.ndarray:
    """Category of the gap before each path node (`task`, bound by `src` with crit `kind`)."""
    n = view.kind.size
    gpu = view.is_gpu[task]
    cat = np.where(gpu, LAUNCH, CPU)
    outside = (src < 0) | (src >= n)
    cat = np.where(outside & gpu, TRACED, cat)
    return np.where(outside & (kind == Crit.COLLECTIVE), COMM, cat)


def critical_paths(view: RankView, mode: str) -> tuple[pa.Table, pa.Table]:
    """(critical_path, critical_path_summary) rows of every step of the rank in a replay mode."""
    start, end = view.times(mode)
    crit_src, crit_kind = view.crit(mode)
    w = step_windows(view, start, end, np.ones(view.kind.size, bool))
    ptr, task, lo, hi, src = critical_walk(start, end, crit_src, w.last, w.start_ns)
    nw = w.step.size
    per = np.diff(ptr)
    which = np.repeat(np.arange(nw), per)
    pos = np.arange(task.size, dtype=np.int64) - np.repeat(ptr[:-1], per)
    ts = start[task]
    exec_ns = hi - np.clip(ts, lo, hi)
    gap_ns = (hi - lo) - exec_ns
    kind = crit_kind[task]
    e_cat = exec_categories(view)[task]
    g_cat = gap_categories(view, src, kind, task)
    names = np.asarray(CATEGORIES, dtype=object)
    m = task.size
    path = pa.table(
        {
            "job": pa.array([view.job] * m, pa.string()),
            "rank": pa.array(np.full(m, view.rank, np.int32)),
            "step": w.step[which],
            "mode": pa.array([mode] * m, pa.string()),
            "pos": pos,
            "task": task,
            "src": src,
            "crit_kind": kind.astype(np.int8),
            "lo_ns": lo,
            "hi_ns": hi,
            "exec_ns": exec_ns,
            "exec_cat": pa.array(names[e_cat], pa.string()),
            "gap_ns": gap_ns,
            "gap_cat": pa.array(names[g_cat], pa.string()),
        },
        schema=CRITICAL_PATH,
    )
    nc = len(CATEGORIES)
    tot = np.zeros(nw * nc, np.int64)
    np.add.at(tot, which * nc + e_cat, exec_ns)
    np.add.at(tot, which * nc + g_cat, gap_ns)
    tot = tot.reshape(nw, nc)
    win = w.end_ns - w.start_ns
    rows = np.repeat(np.arange(nw), nc)
    cats = np.tile(np.arange(nc), nw)
    ns = tot.reshape(-1)
    share = np.where(win[rows] > 0, ns / np.maximum(win[rows], 1), 0.0)
    summary = pa.table(
        {
            "job": pa.array([view.job] * rows.size, pa.string()),
            "rank": pa.array(np.full(rows.size, view.rank, np.int32)),
            "step": w.step[rows],
            "mode": pa.array([mode] * rows.size, pa.string()),
            "category": pa.array(names[cats], pa.string()),
            "ns": ns,
            "share": share,
            "window_start_ns": w.start_ns[rows],
            "window_end_ns": w.end_ns[rows],
            "n_nodes": per[rows],
            "warmup": w.warmup[rows],
            "truncated": w.truncated[rows],
        },
        schema=CRITICAL_PATH_SUMMARY,
    )
    return path, summary
