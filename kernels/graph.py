"""The replay graph: a typed, validated container of plain numpy arrays, and its batch form.

This is the array contract between whoever builds execution graphs (the warehouse SQL) and the
replay kernel in `kernels.replay`. Everything is a contiguous numpy array; task and processor ids
are int64 and local to one graph; times are int64 nanoseconds relative to the graph's own origin.
Per task: ``proc`` (a processor runs its tasks in increasing id order), ``dur_ns``, ``delay_ns``,
``kind``, ``launch_src``, ``rt_mode``/``rt_arg``/``rt_lat_ns`` (runtime dependencies) and ``coll``;
fixed dependencies as CSR over destinations (``dep_ptr``, ``dep_src``, ``dep_lat_ns``); per
processor ``proc_device``. Multi-rank graphs are one graph whose processors are those of every
rank; collectives join them. Every array's meaning: docs/replay.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np


class Kind(IntEnum):
    """What a task is (informational; stored with the schedule and used by explanations)."""

    CPU_OP = 0  # a top-level operator slice on a CPU thread
    RUNTIME = 1  # a CUDA/HIP runtime call that neither launches nor waits
    LAUNCH = 2  # a runtime call that enqueues one GPU task
    SYNC = (
        3  # a runtime call that waits for GPU work (device/stream/event sync, blocking copy wait)
    )
    EVENT_RECORD = 4  # cudaEventRecord
    GPU_KERNEL = 10
    GPU_MEMCPY = 11
    GPU_MEMSET = 12
    GPU_WAIT = 13  # zero-length task of cudaStreamWaitEvent on the waiting stream
    COLLECTIVE = 14  # a collective kernel (NCCL/RCCL)


CPU_KINDS = (Kind.CPU_OP, Kind.RUNTIME, Kind.LAUNCH, Kind.SYNC, Kind.EVENT_RECORD)
GPU_KINDS = (Kind.GPU_KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET, Kind.GPU_WAIT, Kind.COLLECTIVE)


class Rt(IntEnum):
    """Runtime-dependency mode of a task (`ReplayGraph.rt_mode`)."""

    NONE = 0
    STREAM = 1
    DEVICE = 2
    EVENT = 3
    RECORD = 4


class GraphError(ValueError):
    """A graph's arrays break the contract; the message names the graph, the array and the task."""


def _i64(name: str, a: object, n: int | None, source: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise GraphError(f"{source}: {name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise GraphError(f"{source}: {name} must hold integers, got dtype {arr.dtype}")
    if n is not None and arr.shape[0] != n:
        raise GraphError(f"{source}: {name} has length {arr.shape[0]}, expected {n}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _kinds(kind: object, is_gpu_task: np.ndarray, n: int, source: str) -> np.ndarray:
    """The tasks' `Kind` codes, checked against their processor (GPU kinds on streams only);
    omitted: CPU_OP on threads, GPU_KERNEL on streams."""
    if kind is None:
        return np.where(is_gpu_task, int(Kind.GPU_KERNEL), int(Kind.CPU_OP)).astype(np.int8)
    kind_i = _i64("kind", kind, n, source)
    gpu_kind = np.isin(kind_i, [int(k) for k in GPU_KINDS])
    cpu_kind = np.isin(kind_i, [int(k) for k in CPU_KINDS])
    if (~(gpu_kind | cpu_kind)).any():
        i = _first_bad(~(gpu_kind | cpu_kind))
        raise GraphError(f"{source}: kind[{i}]={kind_i[i]} is not a Kind code")
    if (gpu_kind != is_gpu_task).any():
        i = _first_bad(gpu_kind != is_gpu_task)
        where = "a GPU stream" if is_gpu_task[i] else "a CPU thread"
        raise GraphError(f"{source}: task {i} has kind {Kind(kind_i[i]).name} but runs on {where}")
    return kind_i.astype(np.int8)


def _launches(
    lsrc: np.ndarray, is_gpu_task: np.ndarray, src: np.ndarray, dst: np.ndarray, source: str
) -> np.ndarray:
    """Check `launch_src` (CPU tasks launch GPU tasks, one each, through a dependency edge) and
    return its inverse: the GPU task each task launches, or -1."""
    n = lsrc.shape[0]
    has_launch = lsrc >= 0
    if (lsrc < -1).any() or (lsrc >= n).any():
        i = _first_bad((lsrc < -1) | (lsrc >= n))
        raise GraphError(f"{source}: launch_src[{i}]={lsrc[i]} outside -1..{n - 1}")
    if (has_launch & ~is_gpu_task).any():
        i = _first_bad(has_launch & ~is_gpu_task)
        raise GraphError(f"{source}: task {i} has a launch but runs on a CPU thread")
    launchers = lsrc[has_launch]
    if launchers.size and is_gpu_task[launchers].any():
        i = int(np.flatnonzero(has_launch)[_first_bad(is_gpu_task[launchers])])
        raise GraphError(f"{source}: task {i} is launched by GPU task {lsrc[i]}")
    uniq, counts = np.unique(launchers, return_counts=True)
    if (counts > 1).any():
        raise GraphError(f"{source}: CPU task {uniq[counts > 1][0]} launches several GPU tasks")
    launch_dst = np.full(n, -1, np.int64)
    launch_dst[launchers] = np.flatnonzero(has_launch)
    if launchers.size:
        edge_keys = dst * n + src
        want = np.flatnonzero(has_launch) * n + launchers
        absent = ~np.isin(want, edge_keys)
        if absent.any():
            g = int(want[absent][0] // n)
            raise GraphError(
                f"{source}: launch edge {lsrc[g]} -> {g} missing from the dependencies"
            )
    return launch_dst


def _collectives(
    coll_a: np.ndarray, proc_a: np.ndarray, launch_dst: np.ndarray, n_procs: int, source: str
) -> np.ndarray:
    """Check `coll` (dense ids, no launch, one participant per processor) and return the number
    of participants of each collective."""
    if (coll_a < -1).any():
        raise GraphError(f"{source}: coll[{_first_bad(coll_a < -1)}] < -1")
    in_coll = coll_a >= 0
    n_coll = int(coll_a.max()) + 1 if in_coll.any() else 0
    coll_size = np.bincount(coll_a[in_coll], minlength=n_coll).astype(np.int64)
    if (coll_size == 0).any():
        raise GraphError(
            f"{source}: collective ids must be dense: id {_first_bad(coll_size == 0)} unused"
        )
    if (in_coll & (launch_dst >= 0)).any():
        raise GraphError(
            f"{source}: task {_first_bad(in_coll & (launch_dst >= 0))} is a collective and a launch"
        )
    pair = coll_a[in_coll] * n_procs + proc_a[in_coll]
    u, c = np.unique(pair, return_counts=True)
    if (c > 1).any():
        raise GraphError(
            f"{source}: collective {u[c > 1][0] // n_procs} has two participants on processor "
            f"{u[c > 1][0] % n_procs} (it could never complete)"
        )
    return coll_size


@dataclass(frozen=True, eq=False)
class ReplayGraph:
    """One validated graph plus the derived arrays the kernel walks (see the module docstring)."""

    source: str
    proc: np.ndarray
    dur_ns: np.ndarray
    delay_ns: np.ndarray
    kind: np.ndarray
    launch_src: np.ndarray
    rt_mode: np.ndarray
    rt_arg: np.ndarray
    rt_lat_ns: np.ndarray
    coll: np.ndarray
    dep_ptr: np.ndarray
    dep_src: np.ndarray
    dep_lat_ns: np.ndarray
    proc_device: np.ndarray
    # derived
    succ_ptr: np.ndarray  # CSR over sources: successors of each task
    succ_dst: np.ndarray
    succ_lat_ns: np.ndarray
    indeg: np.ndarray  # number of fixed predecessors
    proc_ptr: np.ndarray  # CSR over processors: their queues, ascending task id
    proc_list: np.ndarray
    launch_dst: np.ndarray  # inverse of launch_src: GPU task launched by each CPU task, or -1
    coll_size: np.ndarray  # participants per collective id
    n_devices: int
    flags: np.ndarray  # int8, non-zero for tasks that launch, wait at runtime or collect

    @property
    def n_tasks(self) -> int:
        return int(self.proc.shape[0])

    @property
    def n_procs(self) -> int:
        return int(self.proc_device.shape[0])

    @classmethod
    def build(
        cls,
        *,
        proc: Sequence[int] | np.ndarray,
        dur_ns: Sequence[int] | np.ndarray,
        proc_device: Sequence[int] | np.ndarray,
        dep_ptr: Sequence[int] | np.ndarray | None = None,
        dep_src: Sequence[int] | np.ndarray | None = None,
        dep_lat_ns: Sequence[int] | np.ndarray | None = None,
        delay_ns: Sequence[int] | np.ndarray | None = None,
        kind: Sequence[int] | np.ndarray | None = None,
        launch_src: Sequence[int] | np.ndarray | None = None,
        rt_mode: Sequence[int] | np.ndarray | None = None,
        rt_arg: Sequence[int] | np.ndarray | None = None,
        rt_lat_ns: Sequence[int] | np.ndarray | None = None,
        coll: Sequence[int] | np.ndarray | None = None,
        source: str = "graph",
    ) -> ReplayGraph:
        """Validate the arrays and derive the kernel's views; omitted arrays take neutral defaults.

        ``kind`` defaults to CPU_OP on threads and GPU_KERNEL on streams.
        """
        proc_a = _i64("proc", proc, None, source)
        n = proc_a.shape[0]
        pdev = _i64("proc_device", proc_device, None, source)
        n_procs = pdev.shape[0]

        def opt(name: str, a: object, fill: int) -> np.ndarray:
            return np.full(n, fill, np.int64) if a is None else _i64(name, a, n, source)

        dur = _i64("dur_ns", dur_ns, n, source)
        delay = opt("delay_ns", delay_ns, 0)
        lsrc = opt("launch_src", launch_src, -1)
        mode = opt("rt_mode", rt_mode, 0)
        arg = opt("rt_arg", rt_arg, -1)
        rlat = opt("rt_lat_ns", rt_lat_ns, 0)
        coll_a = opt("coll", coll, -1)
        if dep_ptr is None:
            if dep_src is not None:
                raise GraphError(f"{source}: dep_src given without dep_ptr")
            ptr = np.zeros(n + 1, np.int64)
        else:
            ptr = _i64("dep_ptr", dep_ptr, n + 1, source)
        src = _i64("dep_src", np.zeros(0, np.int64) if dep_src is None else dep_src, None, source)
        m = src.shape[0]
        lat = (
            np.zeros(m, np.int64)
            if dep_lat_ns is None
            else _i64("dep_lat_ns", dep_lat_ns, m, source)
        )

        # processors
        if n and ((proc_a < 0) | (proc_a >= n_procs)).any():
            i = _first_bad((proc_a < 0) | (proc_a >= n_procs))
            raise GraphError(f"{source}: proc[{i}]={proc_a[i]} outside 0..{n_procs - 1}")
        n_dev = int(pdev.max()) + 1 if n_procs and pdev.max() >= 0 else 0
        if (pdev < -1).any():
            raise GraphError(f"{source}: proc_device[{_first_bad(pdev < -1)}] < -1")
        missing = np.setdiff1d(np.arange(n_dev), pdev)
        if missing.size:
            raise GraphError(
                f"{source}: device ids must be dense: no stream on device {missing[0]}"
            )
        is_gpu_task = pdev[proc_a] >= 0 if n else np.zeros(0, bool)

        kind_a = _kinds(kind, is_gpu_task, n, source)

        for name, a in (("dur_ns", dur), ("delay_ns", delay), ("rt_lat_ns", rlat)):
            if (a < 0).any():
                i = _first_bad(a < 0)
                raise GraphError(f"{source}: {name}[{i}]={a[i]} is negative")
        if (lat < 0).any():
            i = _first_bad(lat < 0)
            raise GraphError(f"{source}: dep_lat_ns[{i}]={lat[i]} is negative")

        # dependencies
        if ptr[0] != 0 or ptr[-1] != m or (np.diff(ptr) < 0).any():
            raise GraphError(
                f"{source}: dep_ptr must start at 0, not decrease and end at len(dep_src)={m}"
            )
        if m and ((src < 0) | (src >= n)).any():
            e = _first_bad((src < 0) | (src >= n))
            raise GraphError(f"{source}: dep_src[{e}]={src[e]} outside 0..{n - 1}")
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        if (src == dst).any():
            e = _first_bad(src == dst)
            raise GraphError(f"{source}: task {dst[e]} depends on itself")

        launch_dst = _launches(lsrc, is_gpu_task, src, dst, source)

        # runtime dependencies
        if ((mode < 0) | (mode > int(Rt.RECORD))).any():
            i = _first_bad((mode < 0) | (mode > int(Rt.RECORD)))
            raise GraphError(f"{source}: rt_mode[{i}]={mode[i]} is not an Rt code")
        for i in np.flatnonzero(mode != 0):
            md, a = Rt(int(mode[i])), int(arg[i])
            if md in (Rt.STREAM, Rt.RECORD) and not (0 <= a < n_procs and pdev[a] >= 0):
                raise GraphError(f"{source}: task {i} ({md.name}) names {a}, not a GPU stream")
            if md == Rt.DEVICE and not 0 <= a < n_dev:
                raise GraphError(
                    f"{source}: task {i} (DEVICE) names device {a}, not 0..{n_dev - 1}"
                )
            if md == Rt.EVENT and not (0 <= a < n and mode[a] == Rt.RECORD):
                raise GraphError(f"{source}: task {i} (EVENT) names task {a}, not a RECORD task")
            if launch_dst[i] >= 0 or coll_a[i] >= 0:
                raise GraphError(f"{source}: task {i} waits at runtime and also launches/collects")

        coll_size = _collectives(coll_a, proc_a, launch_dst, n_procs, source)

        # derived CSR views
        order = np.argsort(src, kind="stable")
        succ_dst = dst[order]
        succ_lat = lat[order]
        succ_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=succ_ptr[1:])
        indeg = np.diff(ptr).astype(np.int64)
        proc_list = np.argsort(proc_a, kind="stable").astype(np.int64)
        proc_ptr = np.zeros(n_procs + 1, np.int64)
        np.cumsum(np.bincount(proc_a, minlength=n_procs), out=proc_ptr[1:])

        return cls(
            source=source,
            proc=proc_a,
            dur_ns=dur,
            delay_ns=delay,
            kind=kind_a,
            launch_src=lsrc,
            rt_mode=mode.astype(np.int8),
            rt_arg=arg,
            rt_lat_ns=rlat,
            coll=coll_a,
            dep_ptr=ptr,
            dep_src=src,
            dep_lat_ns=lat,
            proc_device=pdev,
            succ_ptr=succ_ptr,
            succ_dst=np.ascontiguousarray(succ_dst),
            succ_lat_ns=np.ascontiguousarray(succ_lat),
            indeg=indeg,
            proc_ptr=proc_ptr,
            proc_list=proc_list,
            launch_dst=launch_dst,
            coll_size=coll_size,
            n_devices=n_dev,
            flags=((launch_dst >= 0) | (mode != 0) | (coll_a >= 0)).astype(np.int8),
        )


def csr_from_edges(
    n: int, src: np.ndarray, dst: np.ndarray, lat_ns: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dep_ptr, dep_src, dep_lat_ns) over destinations from an edge list, in edge order per task."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    lat = np.zeros(src.shape[0], np.int64) if lat_ns is None else np.asarray(lat_ns, np.int64)
    if src.shape != dst.shape or lat.shape != src.shape:
        raise GraphError(f"edge arrays differ in length: {src.shape}, {dst.shape}, {lat.shape}")
    if dst.size and (dst.min() < 0 or dst.max() >= n):
        raise GraphError(f"edge destination outside 0..{n - 1}")
    order = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    return ptr, np.ascontiguousarray(src[order]), np.ascontiguousarray(lat[order])


@dataclass(frozen=True, eq=False)
class GraphBatch:
    """Several graphs' structures concatenated, so that one kernel call replays all of them.

    Per graph ``g``: tasks ``task_off[g]:task_off[g+1]`` of the task arrays; its ``succ_ptr`` and
    ``proc_ptr`` slices start at ``task_off[g] + g`` and ``proc_off[g] + g`` (each graph keeps its
    own n+1 / P+1 entries; their values index the concatenated ``succ_*`` / ``proc_list``); values
    inside ``succ_dst``, ``proc_list``, ``launch_*``, ``rt_arg`` and ``coll`` stay graph-local.
    """

    graphs: tuple[ReplayGraph, ...]
    task_off: np.ndarray
    proc_off: np.ndarray
    coll_off: np.ndarray
    n_devices: np.ndarray
    proc: np.ndarray
    dur_ns: np.ndarray
    delay_ns: np.ndarray
    launch_src: np.ndarray
    launch_dst: np.ndarray
    rt_mode: np.ndarray
    rt_arg: np.ndarray
    rt_lat_ns: np.ndarray
    coll: np.ndarray
    indeg: np.ndarray
    succ_ptr: np.ndarray
    succ_dst: np.ndarray
    succ_lat_ns: np.ndarray
    proc_ptr: np.ndarray
    proc_list: np.ndarray
    proc_device: np.ndarray
    coll_size: np.ndarray
    flags: np.ndarray

    @classmethod
    def of(cls, graphs: Sequence[ReplayGraph]) -> GraphBatch:
        if not graphs:
            raise GraphError("a GraphBatch needs at least one graph")
        gs = tuple(graphs)

        def offsets(sizes: list[int]) -> np.ndarray:
            out = np.zeros(len(sizes) + 1, np.int64)
            np.cumsum(sizes, out=out[1:])
            return out

        task_off = offsets([g.n_tasks for g in gs])
        succ_base = offsets([g.succ_dst.shape[0] for g in gs])
        list_base = task_off  # proc_list has n entries per graph

        def cat(name: str) -> np.ndarray:
            if len(gs) == 1:  # a batch of one shares the graph's arrays: no copy per replay call
                return np.ascontiguousarray(getattr(gs[0], name))
            return np.ascontiguousarray(np.concatenate([getattr(g, name) for g in gs]))

        def rebase(name: str, bases: np.ndarray) -> np.ndarray:
            if len(gs) == 1:
                return np.ascontiguousarray(getattr(gs[0], name))
            return np.concatenate([getattr(g, name) + b for g, b in zip(gs, bases, strict=False)])

        return cls(
            graphs=gs,
            task_off=task_off,
            proc_off=offsets([g.n_procs for g in gs]),
            coll_off=offsets([g.coll_size.shape[0] for g in gs]),
            n_devices=np.array([g.n_devices for g in gs], np.int64),
            proc=cat("proc"),
            dur_ns=cat("dur_ns"),
            delay_ns=cat("delay_ns"),
            launch_src=cat("launch_src"),
            launch_dst=cat("launch_dst"),
            rt_mode=cat("rt_mode"),
            rt_arg=cat("rt_arg"),
            rt_lat_ns=cat("rt_lat_ns"),
            coll=cat("coll"),
            indeg=cat("indeg"),
            succ_ptr=rebase("succ_ptr", succ_base),
            succ_dst=cat("succ_dst"),
            succ_lat_ns=cat("succ_lat_ns"),
            proc_ptr=rebase("proc_ptr", list_base),
            proc_list=cat("proc_list"),
            proc_device=cat("proc_device"),
            coll_size=cat("coll_size"),
            flags=cat("flags"),
        )
