"""Pack one rank's `tasks` and `deps` rows into a `kernels.graph.ReplayGraph`.

Two modes: ``model`` (every task keeps its traced duration, no GPU task takes its start from the
trace but one launched before the capture began; a GPU task's measured external wait,
``ext_wait_ns`` of graph/waits.sql, is kept before it) and ``identity`` (the same graph with an
anchor that gives every GPU task its traced start unless the graph forces it later: a
consistency check). ``drop`` removes rule families for ablations (``launch``, ``stream_wait``,
``sm_wait``, ``thread``, ``sync``, ``gap``, ``queue``, ``ext_wait``). The modes in full:
docs/replay.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pyarrow as pa

from kernels.graph import Kind, ReplayGraph, Rt, csr_from_edges
from lumos.replay.constants import DeviceConstants

MODES = ("model", "identity")
DROPPABLE = ("launch", "stream_wait", "sm_wait", "thread", "sync", "gap", "queue", "ext_wait")


class BuildError(ValueError):
    """The tables of a rank do not form a valid graph (names job and rank)."""


DEP_KIND = {
    k: i
    for i, k in enumerate(("launch", "stream_wait", "stream_wait_inferred", "sm_wait", "thread"))
}


def _kind_codes(deps: pa.Table) -> np.ndarray:
    """`deps.kind` as DEP_KIND codes (-1: another kind), without a Python string per edge."""
    enc = deps.column("kind").combine_chunks()
    if not pa.types.is_dictionary(enc.type):
        enc = enc.dictionary_encode()
    lut = np.array([DEP_KIND.get(k, -1) for k in enc.dictionary.to_pylist()] + [-1], np.int64)
    idx = np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    return lut[idx]


class TaskColumns:
    """A rank's `tasks` table whose int64 columns are converted once, for building several modes'
    graphs from it (the arrays are shared: callers must not modify them)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.num_rows = table.num_rows
        self._cache: dict[tuple[str, int], np.ndarray] = {}

    def column(self, name: str) -> pa.ChunkedArray:
        return self.table.column(name)

    def int64(self, name: str, fill: int) -> np.ndarray:
        key = (name, fill)
        if key not in self._cache:
            self._cache[key] = _col(self.table, name, fill)
        return self._cache[key]


def _col(t: pa.Table | TaskColumns, name: str, fill: int = -1) -> np.ndarray:
    if isinstance(t, TaskColumns):
        return t.int64(name, fill)
    col = t.column(name)
    if col.null_count:
        col = col.fill_null(fill)
    return np.asarray(col.to_numpy(zero_copy_only=False), np.int64)


def _ext_wait(tasks: pa.Table | TaskColumns) -> np.ndarray:
    """Each task's measured external wait (0 where none; tables written before it had none)."""
    names = tasks.table.column_names if isinstance(tasks, TaskColumns) else tasks.column_names
    if "ext_wait_ns" not in names:
        return np.zeros(tasks.num_rows, np.int64)
    return np.maximum(_col(tasks, "ext_wait_ns", 0), 0)


def _gpu_gaps(tasks: pa.Table | TaskColumns, dev: np.ndarray, gap_of: np.ndarray) -> np.ndarray:
    """Each task's GPU inter-op gap: its step's on its device (`step_gap_ns`, graph/constants),
    else its device's ``gap_ns`` (a task in no step, an estimate's tasks, tables without it)."""
    names = tasks.table.column_names if isinstance(tasks, TaskColumns) else tasks.column_names
    own = _col(tasks, "step_gap_ns", -1) if "step_gap_ns" in names else np.full(dev.shape, -1)
    device = gap_of[np.maximum(dev, 0)] if gap_of.shape[0] else np.zeros(dev.shape, np.int64)
    return np.where(own >= 0, own, device).astype(np.int64)


def build_graph(
    tasks: pa.Table | TaskColumns,
    deps: pa.Table,
    consts: list[DeviceConstants],
    *,
    mode: str = "model",
    drop: Collection[str] = (),
    source: str = "graph",
) -> ReplayGraph:
    """One rank's graph. ``tasks`` sorted by task id 0..n-1; ``deps`` that rank's edges."""
    if mode not in MODES:
        raise BuildError(f"{source}: mode must be one of {MODES}, got {mode!r}")
    bad = set(drop) - set(DROPPABLE)
    if bad:
        raise BuildError(f"{source}: cannot drop {sorted(bad)}; choose from {DROPPABLE}")
    n = tasks.num_rows
    task = _col(tasks, "task")
    if not np.array_equal(task, np.arange(n)):
        raise BuildError(f"{source}: task ids are not 0..{n - 1} in order")
    proc = _col(tasks, "proc")
    is_gpu = np.asarray(tasks.column("is_gpu").to_numpy(zero_copy_only=False), bool)
    dev = _col(tasks, "dev")
    ts = _col(tasks, "ts_ns")
    kind = _col(tasks, "kind")
    dur = _col(tasks, "model_dur_ns", 0)
    rt_mode = _col(tasks, "rt_mode", 0)
    rt_arg = _col(tasks, "rt_arg")
    launch_src = _col(tasks, "launch_src")
    gap = np.maximum(_col(tasks, "gap_ns", 0), 0)
    device_of = {c.device: c for c in consts}
    if not consts and is_gpu.any():
        raise BuildError(f"{source}: GPU tasks but no replay constants")

    n_procs = int(proc.max()) + 1 if n else 0
    proc_device = np.full(n_procs, -1, np.int64)
    proc_device[proc[is_gpu]] = dev[is_gpu]

    # per-device constants through the dense device id
    dense_ids, first = np.unique(dev[is_gpu], return_index=True)
    raw_ids = _col(tasks, "device")[is_gpu][first]
    dense_dev = {int(d): device_of.get(int(r)) for d, r in zip(dense_ids, raw_ids, strict=True)}
    n_dev = max(dense_dev) + 1 if dense_dev else 0
    gap_of = np.array([dense_dev[d].gap_ns for d in range(n_dev)], np.int64)
    lat_of = np.array([dense_dev[d].launch_lat_ns for d in range(n_dev)], np.int64)
    sync_lat = int(np.median([c.sync_lat_ns for c in consts])) if consts else 0

    d_src = _col(deps, "src")
    d_dst = _col(deps, "dst")
    d_kind = _kind_codes(deps)
    keep = np.ones(d_src.shape[0], bool)
    if "launch" in drop:
        keep &= d_kind != DEP_KIND["launch"]
        launch_src = np.full(n, -1, np.int64)
    if "stream_wait" in drop:
        keep &= (d_kind != DEP_KIND["stream_wait"]) & (d_kind != DEP_KIND["stream_wait_inferred"])
    if "thread" in drop:
        keep &= d_kind != DEP_KIND["thread"]
    if "sm_wait" in drop:
        keep &= d_kind != DEP_KIND["sm_wait"]
    d_src, d_dst, d_kind = d_src[keep], d_dst[keep], d_kind[keep]
    lat = np.zeros(d_src.shape[0], np.int64)

    delay = np.where(is_gpu, 0, gap).astype(np.int64)
    if "gap" in drop:
        delay[~is_gpu] = 0
    if "sync" in drop:
        rt_mode = np.zeros(n, np.int64)
        rt_arg = np.full(n, -1, np.int64)
    waits = (rt_mode == Rt.STREAM) | (rt_mode == Rt.DEVICE) | (rt_mode == Rt.EVENT)
    rt_lat = np.where(waits, sync_lat, 0)

    if mode == "model":
        delay[is_gpu] = _gpu_gaps(tasks, dev, gap_of)[is_gpu]
        is_launch = d_kind == DEP_KIND["launch"]
        lat[is_launch] = lat_of[dev[d_dst[is_launch]]]
        # what held a GPU task that no edge explains (untraced peers, ...), as measured: a
        # wait after it is ready, so a configuration that moves its launch or stream keeps it
        if "ext_wait" not in drop:
            delay[is_gpu] += _ext_wait(tasks)[is_gpu]
        # a GPU task whose launch is outside the capture: first on its stream -> traced offset
        first_on_proc = np.ones(n, bool)
        order = np.argsort(proc, kind="stable")  # by (proc, task): task ids are 0..n-1
        first_on_proc[order[1:]] = proc[order[1:]] != proc[order[:-1]]
        has_any_launch = np.zeros(n, bool)
        has_any_launch[d_dst[is_launch]] = True
        orphan = is_gpu & ~has_any_launch & first_on_proc
        delay[orphan] = ts[orphan]
        src_all, dst_all, lat_all = d_src, d_dst, lat
        kinds_all = kind
        proc_all, dur_all, proc_dev_all = proc, dur, proc_device
        extra = {}
    else:
        anchor = n
        gpu_ids = np.flatnonzero(is_gpu)
        src_all = np.concatenate([d_src, np.full(gpu_ids.shape[0], anchor, np.int64)])
        dst_all = np.concatenate([d_dst, gpu_ids])
        lat_all = np.concatenate([lat, ts[gpu_ids]])
        kinds_all = np.append(kind, int(Kind.CPU_OP))
        proc_all = np.append(proc, n_procs)
        dur_all = np.append(dur, 0)
        proc_dev_all = np.append(proc_device, -1)
        delay = np.append(delay, 0)
        extra = {}
        rt_mode = np.append(rt_mode, 0)
        rt_arg = np.append(rt_arg, -1)
        rt_lat = np.append(rt_lat, 0)
        launch_src = np.append(launch_src, -1)
    total = proc_all.shape[0]
    ptr, src_sorted, lat_sorted = csr_from_edges(total, src_all, dst_all, lat_all)
    return ReplayGraph.build(
        proc=proc_all,
        dur_ns=dur_all,
        proc_device=proc_dev_all,
        dep_ptr=ptr,
        dep_src=src_sorted,
        dep_lat_ns=lat_sorted,
        delay_ns=delay,
        kind=kinds_all,
        launch_src=launch_src,
        rt_mode=rt_mode,
        rt_arg=rt_arg,
        rt_lat_ns=rt_lat,
        source=source,
        **extra,
    )
