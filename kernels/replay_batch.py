"""The batch driver of the replay: many instances (graph, durations, delays) in one kernel call.

`replay_batch` resolves per-instance duration/delay pools, builds or reuses the linear pass's
plan (`linear_plan`, cached per graph), and runs `_batch`: instances in contiguous ranges, one
per thread, each with one reused working buffer; per instance the linear pass first, the
event-driven simulation when it cannot prove its schedule. Results: `BatchResult` / `Schedule`.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import get_num_threads, prange

from kernels.graph import GraphBatch, ReplayGraph
from kernels.jit_cache import cached_kernel  # its import keys the cache by every replay module
from kernels.replay_arrays import BatchArrays, GraphArrays, batch_arrays, graph_arrays
from kernels.replay_codes import DEFAULT_QUEUE_DEPTH, STATUS_OK, ReplayError
from kernels.replay_event import _TS_WIDTH, _replay_one
from kernels.replay_linear import STATUS_FALLBACK, _linear_order, _replay_linear

# int64 working memory per task: its row, the stack, rt_src scratch, wait-list head and link
_WS_PER_TASK = _TS_WIDTH + 4
_WS_KEEP_MAX = 1 << 25  # largest working buffer kept between calls (256 MiB)

# One working buffer reused from call to call: fresh memory costs a page fault per page on first
# touch, which for a single replay of a large graph was a third of its time. Taken out while in
# use, so concurrent callers never share it (the loser of a race allocates its own).
_spare: list[np.ndarray] = []


def _take_workspace(size: int) -> np.ndarray:
    buf = _spare.pop() if _spare else None
    if buf is None or buf.shape[0] < size:
        buf = np.empty(size, np.int64)
    return buf


def _give_back(buf: np.ndarray) -> None:
    if buf.shape[0] <= _WS_KEEP_MAX and not _spare:
        _spare.append(buf)


@cached_kernel
def _run_range(  # noqa: ANN201, PLR0913
    i0,
    i1,
    ws,
    inst_graph,
    batch,
    dur_pool,
    dur_off,
    delay_pool,
    delay_off,
    queue_depth,
    eager,
    keep,
    out_off,
    start_o,
    end_o,
    crit_src_o,
    crit_kind_o,
    rt_src_o,
    makespan,
    status,
    lin_ok,
    order_pool,
    order_off,
    dep_ptr,
    dep_src,
    dep_lat,
    linear,
):
    """Replay instances i0..i1-1 with one set of working arrays, reused from one to the next
    (fresh arrays per instance cost page faults that, in sweeps, rival the replay itself).

    With ``eager``, an instance whose graph has a linear order (``lin_ok``) is first computed by
    `_replay_linear`; only if that cannot prove its schedule does it run `_replay_one`.
    ``linear[i]`` says which one produced instance i. ``batch`` is a `BatchArrays`; each
    instance's graph is a `GraphArrays` of its slices."""
    task_off, proc_off, coll_off = batch.task_off, batch.proc_off, batch.coll_off
    n_max = ws.shape[0] // _WS_PER_TASK
    ts = ws[: n_max * _TS_WIDTH]
    stack = ws[n_max * _TS_WIDTH : n_max * (_TS_WIDTH + 1)]
    rt_src_s = ws[n_max * (_TS_WIDTH + 1) : n_max * (_TS_WIDTH + 2)]
    wait_head = ws[n_max * (_TS_WIDTH + 2) : n_max * (_TS_WIDTH + 3)]
    wait_next = ws[n_max * (_TS_WIDTH + 3) : n_max * _WS_PER_TASK]
    for i in range(i0, i1):
        g = inst_graph[i]
        t0 = task_off[g]
        t1 = task_off[g + 1]
        n = t1 - t0
        p0 = proc_off[g]
        p1 = proc_off[g + 1]
        if keep:
            o = out_off[i]
            start = start_o[o : o + n]
            end = end_o[o : o + n]
            crit_src = crit_src_o[o : o + n]
            crit_kind = crit_kind_o[o : o + n]
            rt_src = rt_src_o[o : o + n]
        else:
            start = start_o
            end = end_o
            crit_src = crit_src_o
            crit_kind = crit_kind_o
            rt_src = rt_src_s[:n]
        d0 = dur_off[i]
        l0 = delay_off[i]
        ga = GraphArrays(
            batch.proc[t0:t1],
            batch.proc_ptr[p0 + g : p1 + g + 1],
            batch.proc_list,
            batch.proc_device[p0:p1],
            batch.n_devices[g],
            batch.succ_ptr[t0 + g : t1 + g + 1],
            batch.succ_dst,
            batch.succ_lat,
            batch.indeg[t0:t1],
            batch.launch_src[t0:t1],
            batch.launch_dst[t0:t1],
            batch.rt_mode[t0:t1],
            batch.rt_arg[t0:t1],
            batch.rt_lat[t0:t1],
            batch.coll[t0:t1],
            batch.coll_size[coll_off[g] : coll_off[g + 1]],
            batch.flags[t0:t1],
        )
        if eager and lin_ok[g]:
            if keep:
                ls, le, lc = start, end, crit_src
            else:
                ls = ts[:n]
                le = ts[n_max : n_max + n]
                lc = ts[2 * n_max : 2 * n_max + n]
            ms, st = _replay_linear(
                order_pool[order_off[g] : order_off[g + 1]],
                dep_ptr[t0 + g : t1 + g + 1],
                dep_src,
                dep_lat,
                ga,
                dur_pool[d0 : d0 + n],
                delay_pool[l0 : l0 + n],
                queue_depth,
                keep,
                ls,
                le,
                lc,
                crit_kind,
                rt_src,
                ws[n_max * (_TS_WIDTH + 2) : n_max * _WS_PER_TASK],
                ws[n_max * (_TS_WIDTH - 1) : n_max * (_TS_WIDTH + 1)],
            )
            if st != STATUS_FALLBACK:
                makespan[i] = ms
                status[i] = st
                linear[i] = 1
                continue
        linear[i] = 0
        ms, st = _replay_one(
            ga,
            dur_pool[d0 : d0 + n],
            delay_pool[l0 : l0 + n],
            queue_depth,
            eager,
            keep,
            start,
            end,
            crit_src,
            crit_kind,
            rt_src,
            ts,
            stack,
            wait_head,
            wait_next,
        )
        makespan[i] = ms
        status[i] = st


@cached_kernel(parallel=True)
def _batch(n_chunks, ws, inst_graph, batch, *args):  # noqa: ANN001, ANN002, ANN202
    """Instances split into ``n_chunks`` contiguous ranges, one per ``prange`` iteration, each with
    its slice of the working memory ``ws``. With ``n_chunks == 1`` it runs on the calling thread.
    A parallel loop cannot take a tuple of arrays from outside: ``batch`` crosses it unpacked."""
    n_inst = inst_graph.shape[0]
    if n_chunks <= 1:
        _run_range(0, n_inst, ws, inst_graph, batch, *args)
        return
    per = ws.shape[0] // n_chunks
    (
        task_off,
        proc_off,
        coll_off,
        n_devices,
        proc,
        proc_ptr,
        proc_list,
        proc_device,
        succ_ptr,
        succ_dst,
        succ_lat,
        indeg,
        launch_src,
        launch_dst,
        rt_mode,
        rt_arg,
        rt_lat,
        coll,
        coll_size,
        flags,
    ) = batch
    for c in prange(n_chunks):
        i0 = c * n_inst // n_chunks
        i1 = (c + 1) * n_inst // n_chunks
        b = BatchArrays(
            task_off,
            proc_off,
            coll_off,
            n_devices,
            proc,
            proc_ptr,
            proc_list,
            proc_device,
            succ_ptr,
            succ_dst,
            succ_lat,
            indeg,
            launch_src,
            launch_dst,
            rt_mode,
            rt_arg,
            rt_lat,
            coll,
            coll_size,
            flags,
        )
        _run_range(i0, i1, ws[c * per : (c + 1) * per], inst_graph, b, *args)


@dataclass(frozen=True, eq=False)
class Schedule:
    """One replayed instance; arrays are indexed by the graph's task ids."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    crit_src: np.ndarray
    crit_kind: np.ndarray
    rt_src: np.ndarray
    makespan_ns: int

    def critical_path(self) -> np.ndarray:
        """Task ids from the latest-ending task back to time 0 along ``crit_src`` (last first)."""
        path = []
        t = int(np.argmax(self.end_ns)) if self.end_ns.size else -1
        while t >= 0:
            path.append(t)
            t = int(self.crit_src[t])
        return np.array(path, np.int64)


@dataclass(frozen=True, eq=False)
class BatchResult:
    """Per instance makespan/status; per task outputs concatenated at ``out_off`` when kept."""

    makespan_ns: np.ndarray
    status: np.ndarray
    out_off: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    crit_src: np.ndarray
    crit_kind: np.ndarray
    rt_src: np.ndarray
    # per instance: 1 if the linear pass produced it, 0 if the event-driven simulation did
    linear: np.ndarray | None = None

    def instance(self, i: int) -> Schedule:
        if self.start_ns.size == 0 and self.out_off[-1] > 0:
            raise ValueError("schedules were not kept (keep_schedule=False)")
        a, b = int(self.out_off[i]), int(self.out_off[i + 1])
        return Schedule(
            self.start_ns[a:b],
            self.end_ns[a:b],
            self.crit_src[a:b],
            self.crit_kind[a:b],
            self.rt_src[a:b],
            int(self.makespan_ns[i]),
        )


Pool = np.ndarray | tuple[np.ndarray, np.ndarray] | None


def _pool(
    name: str, value: Pool, base: np.ndarray, inst_graph: np.ndarray, batch: GraphBatch
) -> tuple[np.ndarray, np.ndarray]:
    """Resolve a per-instance override into (pool, offsets) and check every slice fits."""
    sizes = np.diff(batch.task_off)[inst_graph]
    if value is None:  # the graphs' own arrays, validated when built
        return base, batch.task_off[inst_graph].copy()
    if isinstance(value, tuple):
        pool = np.ascontiguousarray(value[0], np.int64)
        off = np.ascontiguousarray(value[1], np.int64)
        if off.shape != inst_graph.shape:
            raise ValueError(f"{name}: {off.shape[0]} offsets for {inst_graph.shape[0]} instances")
    else:
        arr = np.asarray(value)
        if arr.ndim != 2 or arr.shape[0] != inst_graph.shape[0]:
            raise ValueError(f"{name}: expected shape (instances={inst_graph.shape[0]}, tasks)")
        if (sizes != arr.shape[1]).any():
            raise ValueError(f"{name}: {arr.shape[1]} columns but a graph has {sizes.max()} tasks")
        pool = np.ascontiguousarray(arr, np.int64).reshape(-1)
        off = np.arange(arr.shape[0], dtype=np.int64) * arr.shape[1]
    if ((off < 0) | (off + sizes > pool.shape[0])).any():
        raise ValueError(f"{name}: an instance's slice runs past the pool of {pool.shape[0]}")
    if (pool < 0).any():
        raise ValueError(f"{name}: negative value at pool index {int(np.argmax(pool < 0))}")
    return pool, off


@dataclass(frozen=True, eq=False)
class LinearPlan:
    """What the linear pass needs beyond a `GraphBatch`, computed once per graph and cached.

    ``ok[g]``: graph g has a complete order (else its instances always take the simulation);
    ``order`` (pool, graph g at ``order_off[g]``) from `_linear_order`; the predecessor CSR
    (``dep_ptr`` rebased like the batch's ``succ_ptr``: graph g's n+1 entries at ``task_off[g] + g``).
    """

    ok: np.ndarray
    order: np.ndarray
    order_off: np.ndarray
    dep_ptr: np.ndarray
    dep_src: np.ndarray
    dep_lat: np.ndarray


_graph_orders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_batch_plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _graph_order(g: ReplayGraph) -> tuple[np.ndarray, bool]:
    got = _graph_orders.get(g)
    if got is None:
        order, ok = _linear_order(
            graph_arrays(g), g.dur_ns, g.delay_ns, g.dep_ptr, g.dep_src, g.dep_lat_ns
        )
        got = (order, bool(ok))
        _graph_orders[g] = got
    return got


def linear_plan(batch: GraphBatch) -> LinearPlan:
    """The linear pass's plan of a batch (cached per graph and per batch: sweeps and repeated
    replays of one graph build it once). Internal, exposed for benchmarks and tests."""
    plan = _batch_plans.get(batch)
    if plan is not None:
        return plan
    orders = [_graph_order(g) for g in batch.graphs]
    ok = np.array([o[1] for o in orders], np.int8)
    order_off = np.zeros(len(orders) + 1, np.int64)
    np.cumsum([o[0].shape[0] for o in orders], out=order_off[1:])
    gs = batch.graphs
    if len(gs) == 1:
        order, dep_ptr, dep_src, dep_lat = (
            orders[0][0],
            gs[0].dep_ptr,
            gs[0].dep_src,
            gs[0].dep_lat_ns,
        )
    else:
        order = np.concatenate([o[0] for o in orders])
        base = np.cumsum([0] + [g.dep_src.shape[0] for g in gs[:-1]])
        dep_ptr = np.concatenate([g.dep_ptr + b for g, b in zip(gs, base, strict=True)])
        dep_src = np.concatenate([g.dep_src for g in gs])
        dep_lat = np.concatenate([g.dep_lat_ns for g in gs])
    plan = LinearPlan(
        ok,
        np.ascontiguousarray(order, np.int64),
        order_off,
        np.ascontiguousarray(dep_ptr, np.int64),
        np.ascontiguousarray(dep_src, np.int64),
        np.ascontiguousarray(dep_lat, np.int64),
    )
    _batch_plans[batch] = plan
    return plan


def replay_batch(
    graphs: ReplayGraph | GraphBatch | Sequence[ReplayGraph],
    *,
    instance_graph: np.ndarray | Sequence[int] | None = None,
    dur_ns: Pool = None,
    delay_ns: Pool = None,
    queue_depth: int = DEFAULT_QUEUE_DEPTH,
    keep_schedule: bool = True,
    parallel: bool = True,
    check: bool = True,
    eager: bool = True,
) -> BatchResult:
    """Replay many instances in one kernel call.

    ``instance_graph[i]`` is the graph (index into the batch) of instance i; default: one instance
    per graph. ``dur_ns`` / ``delay_ns`` override the graphs' own arrays per instance, as a 2-D
    ``(instances, tasks)`` array (all instances of one size) or a ``(pool, offsets)`` pair: instance
    i reads ``pool[offsets[i] : offsets[i] + n]``. ``keep_schedule=False`` returns makespans only
    (sweeps). ``check`` raises `ReplayError` on a deadlocked instance. ``eager=False`` sends every
    task through the time-ordered heap: the same results, slower (the tests' reference path).
    """
    if isinstance(graphs, ReplayGraph):
        batch = GraphBatch.of([graphs])
    elif isinstance(graphs, GraphBatch):
        batch = graphs
    else:
        batch = GraphBatch.of(list(graphs))
    n_graphs = len(batch.graphs)
    if instance_graph is None:
        inst = np.arange(n_graphs, dtype=np.int64)
    else:
        inst = np.ascontiguousarray(instance_graph, np.int64)
        if inst.ndim != 1 or ((inst < 0) | (inst >= n_graphs)).any():
            raise ValueError(f"instance_graph must name graphs 0..{n_graphs - 1}")
    if queue_depth < 0:
        raise ValueError(f"queue_depth must be >= 0 (0 disables back-pressure), got {queue_depth}")
    dur_pool, dur_off = _pool("dur_ns", dur_ns, batch.dur_ns, inst, batch)
    delay_pool, delay_off = _pool("delay_ns", delay_ns, batch.delay_ns, inst, batch)
    sizes = np.diff(batch.task_off)[inst]
    out_off = np.zeros(inst.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=out_off[1:])
    total = int(out_off[-1]) if keep_schedule else 0
    start = np.empty(total, np.int64)
    end = np.empty(total, np.int64)
    crit_src = np.empty(total, np.int64)
    crit_kind = np.empty(total, np.int8)
    rt_src = np.empty(total, np.int64)
    makespan = np.zeros(inst.shape[0], np.int64)
    status = np.zeros(inst.shape[0], np.int64)
    linear = np.zeros(inst.shape[0], np.int8)
    if eager:
        plan = linear_plan(batch)
    else:  # the reference path: the simulation only
        z = np.zeros(1, np.int64)
        plan = LinearPlan(np.zeros(n_graphs, np.int8), z, np.zeros(n_graphs + 1, np.int64), z, z, z)
    n_chunks = min(get_num_threads(), inst.shape[0]) if parallel else 1
    n_max = int(sizes.max()) if sizes.size else 0
    ws = _take_workspace(n_chunks * n_max * _WS_PER_TASK)
    _batch(
        n_chunks,
        ws[: n_chunks * n_max * _WS_PER_TASK],
        inst,
        batch_arrays(batch),
        dur_pool,
        dur_off,
        delay_pool,
        delay_off,
        int(queue_depth),
        bool(eager),
        bool(keep_schedule),
        out_off,
        start,
        end,
        crit_src,
        crit_kind,
        rt_src,
        makespan,
        status,
        plan.ok,
        plan.order,
        plan.order_off,
        plan.dep_ptr,
        plan.dep_src,
        plan.dep_lat,
        linear,
    )
    _give_back(ws)
    if check and (status != STATUS_OK).any():
        i = int(np.flatnonzero(status != STATUS_OK)[0])
        src = batch.graphs[int(inst[i])].source
        raise ReplayError(
            f"{src}: instance {i} deadlocked: a dependency cycle or a collective whose "
            "participants cannot all arrive"
        )
    return BatchResult(makespan, status, out_off, start, end, crit_src, crit_kind, rt_src, linear)
