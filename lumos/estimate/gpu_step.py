"""The base of a GPU estimate: one traced step of the job's execution graph, labelled.

The replay's graph (`tasks`, `deps`: CPU operator slices, runtime calls, kernels, copies, syncs,
streams) is cut to the tasks of the job's traced steps (a GPU task belongs to its launch call's
step). Every CPU task is labelled by the top-level operator it runs in, with the estimator's
step structure (`template.label_step`: block, layer, micro-batch and role of each top-level op, from
the trainer's annotations or, without them, the repeating forward sequence and Kineto's
forward/backward links); a GPU task takes its launch call's labels.

Durations are per-position medians over the traced steps when they hold the same tasks (the
profiler's cost varies from step to step, skewed to the slow side), else the median step's. Each CPU task also carries the number of profiler events recorded inside it
(`n_events`), from which the profiler's cost is taken out (`profiler_cost`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import lumos_sql
from kernels.graph import Kind, Rt
from lumos.estimate.kernel_work import KClass, gemm_flops, kernel_class, largest_tensor
from lumos.estimate.template import BLOCK, ShapeRoles, TemplateError, label_step
from lumos.replay.constants import DeviceConstants
from lumos_sql.taxonomy import is_attention_pass
from warehouse.catalog import connect as catalog_connect

__all__ = ["GpuStep", "GpuStepError", "first_rank", "load_gpu_step", "step_from_tables"]


class GpuStepError(ValueError):
    """The job's graph cannot serve as a GPU estimate's base (names the job and why)."""


@dataclass
class GpuStep:
    """One representative traced step of a GPU job, as the base of graph edits.

    ``tasks`` / ``deps``: the step's rows of the replay tables, task ids 0..n-1 in the step's
    order, times relative to the step's first task. Arrays (length n): ``block`` (BLOCK code of
    the task's top-level op, -1 when it runs in none), ``layer`` (-1 outside layers), ``mb``
    (micro-batch, -1 outside), ``role`` (ROLE code), ``path`` (`template.PATH` code: a layer
    task on the queries' or the keys' and values' side of its attention, -1 unlabelled),
    ``n_events`` (profiler events recorded in a CPU task), ``dur_ns`` and ``gap_ns`` (medians
    over the steps), ``k_class`` (`KClass` of a GPU task), ``k_flops`` (the FLOPs of a GEMM
    kernel's operator), ``k_elems`` and ``k_ndim`` (the elements and dimensions of the largest
    input of the operator that launched a GPU task) and ``k_op`` (that operator's instance,
    dense, -1 for none: a GEMM operator may launch several kernels, a split-K GEMM and its
    reduction). ``step_ns``: the traced steps.
    """

    job: str
    rank: int
    tasks: pa.Table
    deps: pa.Table
    constants: list[DeviceConstants]
    block: np.ndarray
    layer: np.ndarray
    mb: np.ndarray
    role: np.ndarray
    path: np.ndarray
    n_events: np.ndarray
    dur_ns: np.ndarray
    gap_ns: np.ndarray
    step_ns: np.ndarray
    k_class: np.ndarray
    k_flops: np.ndarray
    k_elems: np.ndarray
    k_ndim: np.ndarray
    k_op: np.ndarray
    labelled_by: str = ""
    # what the step leaves out of the trace's tasks ("" nothing): `side_threads`
    left_out: str = ""

    @property
    def n(self) -> int:
        return self.tasks.num_rows

    @property
    def is_gpu(self) -> np.ndarray:
        return np.asarray(self.tasks.column("is_gpu").to_numpy(zero_copy_only=False), bool)

    @property
    def kind(self) -> np.ndarray:
        return _int(self.tasks, "kind", -1)

    @property
    def launch_src(self) -> np.ndarray:
        return _int(self.tasks, "launch_src", -1)

    _ARRAYS = (
        "block",
        "layer",
        "mb",
        "role",
        "path",
        "n_events",
        "dur_ns",
        "gap_ns",
        "step_ns",
        "k_class",
        "k_flops",
        "k_elems",
        "k_ndim",
        "k_op",
    )

    def save(self, folder: Path) -> None:
        """Write the step to `folder` (Arrow IPC for the tables, npz for the arrays)."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, table in (("tasks", self.tasks), ("deps", self.deps)):
            with pa.ipc.new_file(str(folder / f"{name}.arrow"), table.schema) as w:
                w.write_table(table)
        np.savez(folder / "arrays.npz", **{k: getattr(self, k) for k in self._ARRAYS})
        meta = {
            "job": self.job,
            "rank": self.rank,
            "labelled_by": self.labelled_by,
            "left_out": self.left_out,
            "constants": [dataclasses.asdict(c) for c in self.constants],
        }
        (folder / "meta.json").write_text(json.dumps(meta))

    @classmethod
    def load(cls, folder: Path) -> GpuStep:
        # Arrow IPC read without pyarrow.feather, which imports pandas (0.2 s of start-up)
        def read(name: str) -> pa.Table:
            with pa.ipc.open_file(str(folder / f"{name}.arrow")) as r:
                return r.read_all()

        meta = json.loads((folder / "meta.json").read_text())
        with np.load(folder / "arrays.npz") as z:
            arrays = {k: z[k] for k in cls._ARRAYS}
        return cls(
            job=meta["job"],
            rank=int(meta["rank"]),
            tasks=read("tasks"),
            deps=read("deps"),
            constants=[DeviceConstants(**c) for c in meta["constants"]],
            labelled_by=meta["labelled_by"],
            left_out=meta.get("left_out", ""),
            **arrays,
        )

    def gpu_work_ns(self) -> int:
        """The step's GPU work: the durations of its kernels, copies and memsets."""
        busy = self.is_gpu & (self.kind != int(Kind.GPU_WAIT))
        return int(self.dur_ns[busy].sum())


def _int(t: pa.Table, name: str, fill: int) -> np.ndarray:
    return np.ascontiguousarray(t.column(name).fill_null(fill).to_numpy(), np.int64)


def _step_slice(
    tasks: pa.Table, deps: pa.Table, step_of: np.ndarray, step: int
) -> tuple[pa.Table, pa.Table, np.ndarray]:
    """The tasks of one step (renumbered 0..k-1, times from the step's first task), the edges
    between them and the original ids."""
    return _subset(tasks, deps, np.arange(tasks.num_rows), step_of == step)


def side_threads(t: pa.Table, d: pa.Table) -> np.ndarray:
    """Per task of a step (`t`, its edges `d`): whether it runs on a CPU thread that takes no
    part in the step: none of its tasks launches GPU work or precedes a task of another thread
    (an NCCL watchdog or a DataLoader's pin-memory thread polling `cudaEventQuery`). Such a
    thread gates nothing, but replayed with its measured idle gaps it would span the step and
    hold the makespan at the traced one whatever the edit. No task is marked when no CPU
    thread takes part (nothing to tell them apart by)."""
    gpu = np.asarray(t.column("is_gpu").to_numpy(zero_copy_only=False), bool)
    proc = _int(t, "proc", -1)
    src, dst = _int(d, "src", -1), _int(d, "dst", -1)
    ok = (src >= 0) & (dst >= 0)
    src, dst = src[ok], dst[ok]
    feeds = src[proc[src] != proc[dst]]
    live = np.unique(proc[feeds][~gpu[feeds]])
    if live.size == 0:
        return np.zeros(t.num_rows, bool)
    return ~gpu & ~np.isin(proc, live)


def _subset(
    t: pa.Table, d: pa.Table, idx: np.ndarray, keep: np.ndarray
) -> tuple[pa.Table, pa.Table, np.ndarray]:
    """Tasks `t` (original ids `idx`) and their edges `d` with only the tasks `keep`,
    renumbered 0..k-1 (launches and event waits too), times from the first kept task."""
    remap = np.where(keep, np.cumsum(keep) - 1, -1)
    t = t.filter(pa.array(keep))
    src, dst = _int(d, "src", -1), _int(d, "dst", -1)
    ok = (src >= 0) & (dst >= 0)
    ok[ok] = keep[src[ok]] & keep[dst[ok]]
    d = d.filter(pa.array(ok))
    d = _set(d, "src", remap[src[ok]])
    d = _set(d, "dst", remap[dst[ok]])
    launch = _int(t, "launch_src", -1)
    ts = _int(t, "ts_ns", 0)
    t = _set(t, "task", np.arange(t.num_rows, dtype=np.int64))
    t = _set(t, "launch_src", np.where(launch >= 0, remap[np.maximum(launch, 0)], -1))
    t = _set(t, "ts_ns", ts - (ts.min() if ts.size else 0))
    return _event_waits(t, remap), d, idx[keep]


def _left_out(t: pa.Table, side: np.ndarray) -> str:
    """What `side_threads` left out, in words ("" for nothing)."""
    if not side.any():
        return ""
    names = np.asarray(t.column("name").to_pylist(), object)[side]
    uniq, counts = np.unique(names, return_counts=True)
    top = ", ".join(str(n) for n in uniq[np.argsort(-counts, kind="stable")][:3])
    threads = np.unique(_int(t, "proc", -1)[side]).size
    return (
        f"{threads} CPU thread(s) that launch no GPU work and gate no other thread left out "
        f"of the step ({int(side.sum())} tasks: {top}): replayed with their idle gaps they "
        "would hold the step at its traced length"
    )


def _event_waits(t: pa.Table, remap: np.ndarray) -> pa.Table:
    """`t` with each event wait naming its record task by the new ids `remap` gives (old id ->
    new, -1 where the record is not kept): a record before the step (not kept) was made before
    the wait's step began, so that wait waits for nothing."""
    mode = _int(t, "rt_mode", 0)
    arg = _int(t, "rt_arg", -1)
    event = mode == int(Rt.EVENT)
    new = np.where(event & (arg >= 0) & (arg < remap.size), remap[np.clip(arg, 0, None)], -1)
    gone = event & (new < 0)
    t = _set(t, "rt_mode", np.where(gone, int(Rt.NONE), mode))
    return _set(t, "rt_arg", np.where(event, new, arg))


def _set(t: pa.Table, name: str, values: np.ndarray) -> pa.Table:
    i = t.schema.get_field_index(name)
    return t.set_column(i, t.schema.field(i), pa.array(values, t.schema.field(i).type))


def _events_in(
    tid: np.ndarray, start: np.ndarray, end: np.ndarray, ev_tid: np.ndarray, ev_ts: np.ndarray
) -> np.ndarray:
    """Per interval [start, end) on thread `tid`: the events of that thread starting inside."""
    out = np.zeros(tid.shape[0], np.int64)
    for u in np.unique(tid):
        e = np.sort(ev_ts[ev_tid == u])
        m = tid == u
        out[m] = np.searchsorted(e, end[m], "left") - np.searchsorted(e, start[m], "left")
    return out


def _op_of(tid: np.ndarray, ts: np.ndarray, op_tid: np.ndarray, op_ts: np.ndarray) -> np.ndarray:
    """Per task: the index of the top-level op of its thread it runs in; a task between ops
    (a runtime call outside every op) takes the op before it; -1 before the thread's first op."""
    out = np.full(tid.shape[0], -1, np.int64)
    for u in np.unique(tid):
        ops = np.flatnonzero(op_tid == u)
        if ops.size == 0:
            continue
        order = ops[np.argsort(op_ts[ops], kind="stable")]
        m = np.flatnonzero(tid == u)
        at = np.searchsorted(op_ts[order], ts[m], "right") - 1
        out[m] = np.where(at >= 0, order[np.maximum(at, 0)], -1)
    return out


def step_from_tables(
    job: str,
    tasks: pa.Table,
    deps: pa.Table,
    iterations: pa.Table,
    constants: list[DeviceConstants],
    op_rows: list[dict[str, Any]],
    events: dict[str, np.ndarray],
    launch_ops: dict[int, tuple[str, Any, int]] | None = None,
    *,
    rank: int = 0,
    sizes: ShapeRoles | None = None,
    structured: bool = True,
    cpu_trace: bool = False,
) -> GpuStep:
    """Build the base step from one rank's replay tables (`tasks`, `deps`, `iterations`), its
    top-level ops (`estimate/template_tasks.sql` rows), its recorded CPU events (`tid`,
    `ts_ns`: `estimate/cpu_event_times.sql`) and the innermost operator of each launching call
    (correlation -> name, input shapes and instance key: `estimate/launch_ops.sql`).
    `structured=False` keeps a step whose layers are not found, unlabelled; `cpu_trace=True`
    takes a step without GPU tasks (a CPU trace: the same graph, its operators the work)."""
    its = [r for r in iterations.to_pylist() if int(r["rank"]) == rank]
    full = [r for r in its if not r["truncated"]] or its
    if not full:
        raise GpuStepError(f"{job}: rank {rank} has no traced step (ProfilerStep)")
    step_of = _task_steps(tasks, its)
    slices = [(r, *_step_slice(tasks, deps, step_of, int(r["step"]))) for r in full]
    kinds = [tuple(s[1].column("kind").to_pylist()) for s in slices]
    same = [s for s, k in zip(slices, kinds, strict=True) if k == kinds[-1]]
    if len(same) < 2:
        cpu = [int(r["cpu_step_ns"]) for r in full]
        same = [slices[int(np.argsort(cpu)[len(cpu) // 2])]]
    it, t, d, idx = same[-1]
    side = side_threads(t, d)
    left_out = _left_out(t, side)
    if side.any():
        same = [
            (r, *_subset(st, sd, si, ~side))
            for r, st, sd, si in same
            if np.array_equal(side_threads(st, sd), side)
        ]
        it, t, d, idx = same[-1]
    if "step_gap_ns" in t.column_names:
        # its durations are medians over the steps: its GPU tasks take the device's trace-wide
        # gap (DeviceConstants.gap_ns), not the gap measured in the one step it copies
        i = t.schema.get_field_index("step_gap_ns")
        t = t.set_column(i, t.schema.field(i), pa.nulls(t.num_rows, pa.int64()))
    if not cpu_trace and not np.any(t.column("is_gpu").to_numpy(zero_copy_only=False)):
        raise GpuStepError(f"{job}: the traced step has no GPU task (a CPU trace)")
    dur = np.median([_int(s[1], "model_dur_ns", 0) for s in same], axis=0)
    gap = np.median([np.maximum(_int(s[1], "gap_ns", 0), 0) for s in same], axis=0)

    # labels of the step's top-level ops
    step_no = 1 + sorted(int(r["step"]) for r in its).index(int(it["step"]))
    ref = [r for r in op_rows if int(r["rank"]) == rank and int(r["step_no"]) == step_no]
    try:
        lab, how = label_step(ref, job, sizes)
    except TemplateError as e:
        if structured:
            raise GpuStepError(str(e)) from e
        # a step whose model is not read (not a transformer, compiled): its tasks unlabelled,
        # for what-ifs that change no structure (`gpu_whatif`)
        lab = {k: [-1] * len(ref) for k in ("block", "layer", "mb", "role", "path")}
        how = f"not labelled ({e})"
    s0 = int(it["cpu_start_ns"])
    op_tid = np.array([int(r["tid"]) for r in ref], np.int64)
    op_ts = np.array([s0 + int(r["rel_ns"]) for r in ref], np.int64)

    origin = _int(tasks, "origin_ns", 0)[idx] + _int(tasks, "ts_ns", 0)[idx]
    gpu = np.asarray(t.column("is_gpu").to_numpy(zero_copy_only=False), bool)
    tid = _int(t, "tid", -1)
    op = _op_of(np.where(gpu, -1, tid), origin, op_tid, op_ts)
    launch = _int(t, "launch_src", -1)
    op = np.where(gpu & (launch >= 0), op[np.maximum(launch, 0)], op)
    has = op >= 0
    pick = np.maximum(op, 0)

    def label(key: str) -> np.ndarray:
        vals = np.array([lab[key][i] for i in range(len(ref))] or [0], np.int64)
        return np.where(has, vals[pick], -1)

    pause = float(np.median([_pause_before(its, r) for r, *_ in same]))
    gap = _first_gaps(gap, _int(t, "proc", -1), gpu, origin - s0, pause)
    n_ev = np.zeros(t.num_rows, np.int64)
    cpu = ~gpu
    n_ev[cpu] = _events_in(
        tid[cpu],
        origin[cpu],
        origin[cpu] + _int(t, "dur_ns", 0)[cpu],
        events["tid"],
        events["ts_ns"],
    )
    return GpuStep(
        job=job,
        rank=rank,
        tasks=t,
        deps=d,
        constants=[c for c in constants if c.rank == rank],
        block=label("block"),
        layer=label("layer"),
        mb=label("mb"),
        role=label("role"),
        path=label("path"),
        n_events=n_ev,
        dur_ns=np.rint(dur).astype(np.int64),
        gap_ns=np.rint(gap).astype(np.int64),
        step_ns=np.array([int(r["cpu_step_ns"]) for r in full], np.int64),
        **_kernel_work(t, gpu, launch_ops or {}),
        labelled_by=how,
        left_out=left_out,
    )


def _pause_before(its: list[dict[str, Any]], it: dict[str, Any]) -> int:
    """The time the rank spent outside any traced step right before step `it` (from the end of
    the step before it to its start; 0 for the first): a trainer's pause between steps."""
    ends = [int(r["cpu_end_ns"]) for r in its if int(r["cpu_start_ns"]) < int(it["cpu_start_ns"])]
    return max(int(it["cpu_start_ns"]) - max(ends), 0) if ends else 0


def _first_gaps(
    gap: np.ndarray, proc: np.ndarray, gpu: np.ndarray, offset: np.ndarray, pause: float
) -> np.ndarray:
    """`gap` without the `pause` before the step where a CPU thread's first task's idle gap
    reaches back over the step's start (`offset`: each task's start from it): the loop's own
    time at a step's end is part of every step, a pause between steps is not."""
    out = np.asarray(gap, np.float64).copy()
    cpu = np.flatnonzero(~gpu)
    if cpu.size:
        order = cpu[np.lexsort((offset[cpu], proc[cpu]))]
        first = order[np.r_[True, proc[order][1:] != proc[order][:-1]]]
        before = np.maximum(out[first] - np.maximum(offset[first], 0), 0)
        out[first] -= np.minimum(before, pause)
    return out


def _kernel_work(
    t: pa.Table, gpu: np.ndarray, launch_ops: dict[int, tuple[str, Any, int]]
) -> dict[str, np.ndarray]:
    """Per task: the class, GEMM FLOPs, largest input's elements and dimensions, and instance of
    a GPU task's launching operator."""
    n = t.num_rows
    k_class = np.full(n, int(KClass.NONE), np.int64)
    flops = np.zeros(n, np.float64)
    elems = np.zeros(n, np.int64)
    ndim = np.zeros(n, np.int64)
    op = np.full(n, -1, np.int64)
    keys: dict[int, int] = {}
    corr = _int(t, "correlation", -1)
    kernels = t.column("name").to_pylist()
    for i in np.flatnonzero(gpu):
        name, dims, key = launch_ops.get(int(corr[i]), (None, None, None))
        c = kernel_class(name)
        if c == KClass.ATTENTION and is_attention_pass(kernels[i]):
            c = KClass.OTHER  # one pass over the operator's tensors: their size, not seq²
        k_class[i] = int(c)
        if c == KClass.GEMM and name is not None:
            flops[i] = gemm_flops(name, dims)
        elems[i], ndim[i] = largest_tensor(dims)
        if key is not None:
            op[i] = keys.setdefault(int(key), len(keys))
    return {"k_class": k_class, "k_flops": flops, "k_elems": elems, "k_ndim": ndim, "k_op": op}


def _task_steps(tasks: pa.Table, its: list[dict[str, Any]]) -> np.ndarray:
    """Step of every task (the rules of `explain/task_steps.sql`): a CPU task by its traced start
    within [step start, next step start); a GPU task by its launch call's step."""
    gpu = np.asarray(tasks.column("is_gpu").to_numpy(zero_copy_only=False), bool)
    at = _int(tasks, "ts_ns", 0) + _int(tasks, "origin_ns", 0)
    its = sorted(its, key=lambda r: int(r["cpu_start_ns"]))
    start = np.array([int(r["cpu_start_ns"]) for r in its], np.int64)
    stop = np.array([int(r["next_start_ns"] or r["cpu_end_ns"]) for r in its], np.int64)
    k = np.searchsorted(start, at, "right") - 1
    ok = (k >= 0) & (at < stop[np.maximum(k, 0)])
    steps = np.array([int(r["step"]) for r in its], np.int64)
    out = np.where(ok, steps[np.maximum(k, 0)], np.iinfo(np.int64).min)
    launch = _int(tasks, "launch_src", -1)
    out[gpu] = np.where(launch[gpu] >= 0, out[np.maximum(launch[gpu], 0)], np.iinfo(np.int64).min)
    return out


def first_rank(wh: Any, job: str) -> int:
    """The lowest rank of `job` in the warehouse `wh` (a `WarehouseHandle`)."""
    import duckdb

    con = duckdb.connect(str(wh.catalog), read_only=True)
    try:
        row = con.execute(lumos_sql.load("estimate/first_rank"), [job]).fetchone()
    finally:
        con.close()
    if row is None or row[0] is None:
        raise LookupError(f"job {job!r} is not in the warehouse")
    return int(row[0])


def load_gpu_step(
    wh: Any,
    job: str,
    *,
    rank: int = 0,
    sizes: ShapeRoles | None = None,
    structured: bool = True,
    cpu_trace: bool = False,
) -> GpuStep:
    """The base step of `job` from the warehouse `wh` (a `lumos.api.Warehouse`): its graph is
    rebuilt in memory from the job's events (nothing written). `sizes` (`template.shape_roles` of
    the base configuration) gives operators without a role by name their role by the size of
    their largest input (a cast or a copy of the activations scales with them). A CPU trace
    is refused unless `cpu_trace` (`step_from_tables`)."""

    from lumos.replay.run import replay_job
    from warehouse.catalog import job_events_view

    con = catalog_connect(str(wh.catalog))
    try:
        # the rank's own events: a multi-rank job's other ranks are not read
        job_events_view(con, job, ranks=[rank])
        gpu_tasks = con.execute(lumos_sql.load("estimate/gpu_tasks"), {"rank": rank}).fetchone()
        if not cpu_trace and not gpu_tasks[0]:
            raise GpuStepError(f"{job}: rank {rank} has no GPU task (a CPU trace)")
        jr = replay_job(con, job, modes=(), ranks=[rank])
        job_events_view(con, job, ranks=[rank])
        cur = con.execute(lumos_sql.load("estimate/template_tasks"), {"job": job})
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        ev = con.execute(lumos_sql.load("estimate/cpu_event_times"), {"rank": rank}).fetchnumpy()
        lops = con.execute(lumos_sql.load("estimate/launch_ops"), {"rank": rank}).fetchall()
    finally:
        con.close()
    tasks = jr.tables["tasks"]
    keep = pa.array(_int(tasks, "rank", -1) == rank)
    d = jr.tables["deps"]
    return step_from_tables(
        job,
        tasks.filter(keep),
        d.filter(pa.array(_int(d, "rank", -1) == rank)),
        jr.tables["iterations"],
        jr.constants,
        rows,
        {"tid": np.asarray(ev["tid"], np.int64), "ts_ns": np.asarray(ev["ts_ns"], np.int64)},
        {int(c): (name, dims, key) for c, name, dims, key in lops},
        rank=rank,
        sizes=sizes,
        structured=structured,
        cpu_trace=cpu_trace,
    )


BLOCK_FWD = (BLOCK["f_pre"], BLOCK["f_layer"], BLOCK["f_post"])
BLOCK_BWD = (BLOCK["b_post"], BLOCK["b_layer"], BLOCK["b_pre"])
