"""Replay of execution graphs: list scheduling with fixed and runtime dependencies, in numba.

The array contract of a graph is in `kernels.graph` (read it first). This module simulates it:

Rules
-----
* Each processor runs its queue in task-id order. A task becomes *ready* when its fixed
  predecessors are done; it starts at ``max(processor free, max(pred end + edge latency)) + delay``
  and normally ends at ``start + dur``.
* Lumos's runtime dependencies are resolved at the simulated moment they happen. The simulation
  is event driven: processors whose head task is ready sit in a heap keyed by that task's start
  time, so tasks start in non-decreasing time order. When a STREAM/DEVICE/RECORD task starts at
  ``t`` it looks at the stream's enqueued prefix (launch ended at or before ``t``) and takes its
  last task as target. A waiting task (STREAM, DEVICE, EVENT) ends at
  ``max(start + dur, target end + rt_lat)``; while it waits its processor is blocked. An EVENT
  wait also ends no earlier than its RECORD task's start (a wait the graph matched to a record
  that the replay runs later waits for that record, so simulated time never runs backwards).
* Launch-queue back-pressure (field notes §7): launches of a device are numbered in the order they
  start. Launch ``k`` cannot complete before the GPU task of launch ``k - Q`` has started
  (``Q = queue_depth``; 0 disables it): at most Q launched-but-not-started tasks are queued.
* Collectives: a participant arrives at its start; when the last participant arrives at ``T``,
  every participant ends at ``T + its dur``.
* Ties: at equal start times, tasks that read the stream state (STREAM, DEVICE, RECORD) start after
  all other tasks, then lower processor id first. So a launch that ends exactly when a sync starts
  counts as enqueued if it was processed first; a launch still held by back-pressure never does.
* A graph whose tasks cannot all run (a dependency cycle, a collective with a participant that
  never arrives) is reported with status DEADLOCK; unfinished tasks keep ``end = -1``.

Outputs per task: ``start_ns``, ``end_ns``, ``crit_src``/``crit_kind`` (what bound the task's end:
`Crit` code and the task responsible: the processor predecessor, the fixed predecessor, the
runtime target, the back-pressure target whose start it waited for, or the last collective
arrival; following ``crit_src`` back from the last task gives the critical path), and ``rt_src``
(the resolved runtime target of STREAM/DEVICE/EVENT tasks, the captured task of RECORD tasks).
Per instance: makespan (latest end) and status.

Batches: instances name a graph of a `GraphBatch` and where their durations and delays start in a
pool array, so thousands of sweep variants share one structure without copies (`replay_sweep`
takes a 2-D ``dur[config, task]``). Every instance runs the same single-instance code, in a
``prange`` loop or a plain one: the results are identical either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numba import njit, prange

from kernels.graph import GraphBatch, ReplayGraph

DEFAULT_QUEUE_DEPTH = 1024

# rt_mode codes, mirrored from kernels.graph.Rt for use inside numba
_RT_STREAM = 1
_RT_DEVICE = 2
_RT_EVENT = 3
_RT_RECORD = 4


class Crit(IntEnum):
    """What bound a task's end (`Schedule.crit_kind`)."""

    NONE = 0  # started at its own delay after time 0
    PROC = 1  # the previous task on its processor
    EDGE = 2  # a fixed predecessor (+ edge latency)
    RUNTIME = 3  # the runtime target of a sync / event wait
    QUEUE = 4  # back-pressure: the start of the GPU task launched Q launches earlier
    COLLECTIVE = 5  # the last participant of its collective to arrive


C_NONE, C_PROC, C_EDGE, C_RUNTIME, C_QUEUE, C_COLL = 0, 1, 2, 3, 4, 5

STATUS_OK = 0
STATUS_DEADLOCK = 1


class ReplayError(RuntimeError):
    """A replay could not finish (cycle or unmatched collective); names graph and instance."""


@njit(cache=True, inline="always")
def _less(a: int, b: int, key_t: np.ndarray, key_b: np.ndarray) -> bool:
    return key_t[a] < key_t[b] or (key_t[a] == key_t[b] and key_b[a] < key_b[b])


@njit(cache=True, inline="always")
def _heap_push(heap, hsize, key_t, key_b, p):  # noqa: ANN001, ANN202
    i = hsize
    heap[i] = p
    while i > 0:
        parent = (i - 1) >> 1
        q = heap[parent]
        if _less(p, q, key_t, key_b):
            heap[i] = q
            i = parent
        else:
            break
    heap[i] = p
    return hsize + 1


@njit(cache=True, inline="always")
def _heap_pop(heap, hsize, key_t, key_b):  # noqa: ANN001, ANN202
    top = heap[0]
    hsize -= 1
    if hsize == 0:
        return top, 0
    last = heap[hsize]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= hsize:
            break
        r = c + 1
        if r < hsize and _less(heap[r], heap[c], key_t, key_b):
            c = r
        if _less(heap[c], last, key_t, key_b):
            heap[i] = heap[c]
            i = c
        else:
            break
    heap[i] = last
    return top, hsize


@njit(cache=True, inline="always")
def _scan_stream(s, t, enq, proc_ptr, proc_list, launch_src, state, end):  # noqa: ANN001, ANN202
    """Advance stream s's enqueued prefix to time t (t never decreases) and return its last task."""
    q = enq[s]
    qe = proc_ptr[s + 1]
    while q < qe:
        c = launch_src[proc_list[q]]
        if c >= 0 and not (state[c] == 2 and end[c] <= t):
            break
        q += 1
    enq[s] = q
    if q > proc_ptr[s]:
        return proc_list[q - 1]
    return -1


@njit(cache=True)
def _replay_one(  # noqa: ANN201, PLR0912, PLR0915
    proc,
    proc_ptr,
    proc_list,
    proc_dev,
    n_dev,
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
    dur,
    delay,
    queue_depth,
    start,
    end,
    crit_src,
    crit_kind,
    rt_src,
):
    """Replay one graph into start/end/crit_src/crit_kind/rt_src; return (makespan, status).

    ``proc_ptr`` and ``succ_ptr`` hold absolute positions into ``proc_list`` / ``succ_*`` (which may
    be a batch's concatenation); all task and processor ids are local to this graph.
    """
    n = proc.shape[0]
    n_procs = proc_dev.shape[0]
    # Before a task starts, start[] holds its ready time and crit_src[] the predecessor that set it.
    for i in range(n):
        start[i] = 0
        end[i] = -1
        crit_src[i] = -1
        crit_kind[i] = C_NONE
        rt_src[i] = -1
    remaining = np.empty(n, np.int32)
    for i in range(n):
        remaining[i] = indeg[i]
    state = np.zeros(n, np.int8)  # 0 not started, 1 started (maybe blocked), 2 done
    wait_head = np.full(n, -1, np.int32)  # tasks blocked on this one (start or end)
    wait_next = np.empty(n, np.int32)
    stack = np.empty(n, np.int32)  # tasks to (re)evaluate; each is in it at most once
    sp = 0

    cursor = np.empty(n_procs, np.int64)
    pstate = np.zeros(n_procs, np.int8)  # 0 head not ready, 1 in heap, 2 busy, 3 finished
    proc_free = np.zeros(n_procs, np.int64)
    proc_last = np.full(n_procs, -1, np.int64)
    key_t = np.zeros(n_procs, np.int64)
    key_b = np.zeros(n_procs, np.int64)
    heap = np.empty(n_procs, np.int64)
    hsize = 0
    enq = np.empty(n_procs, np.int64)
    blk = np.full(n_procs, -1, np.int64)  # back-pressure target of the processor's launch

    # streams of each device, and per processor one slot per stream for a blocked device sync
    ds_ptr = np.zeros(n_dev + 1, np.int64)
    for p in range(n_procs):
        if proc_dev[p] >= 0:
            ds_ptr[proc_dev[p] + 1] += 1
    max_s = 0
    for d in range(n_dev):
        max_s = max(max_s, ds_ptr[d + 1])
        ds_ptr[d + 1] += ds_ptr[d]
    ds_list = np.empty(ds_ptr[n_dev], np.int64)
    fill = ds_ptr[:n_dev].copy()
    for p in range(n_procs):
        d = proc_dev[p]
        if d >= 0:
            ds_list[fill[d]] = p
            fill[d] += 1
    has_dev_sync = False
    for i in range(n):
        if rt_mode[i] == _RT_DEVICE:
            has_dev_sync = True
            break
    dev_tgt = np.full(n_procs * max_s if has_dev_sync else 0, -1, np.int64)

    q_depth = queue_depth if queue_depth > 0 else 0
    ring = np.full(n_dev * q_depth, -1, np.int64)
    nlaunch = np.zeros(n_dev, np.int64)

    n_coll = coll_size.shape[0]
    coll_arrived = np.zeros(n_coll, np.int64)
    coll_time = np.full(n_coll, -1, np.int64)
    coll_last = np.full(n_coll, -1, np.int64)
    coll_head = np.full(n_coll, -1, np.int64)

    for p in range(n_procs):
        cursor[p] = proc_ptr[p]
        enq[p] = proc_ptr[p]
        if proc_ptr[p] == proc_ptr[p + 1]:
            pstate[p] = 3
            continue
        h = proc_list[proc_ptr[p]]
        if remaining[h] == 0:
            key_t[p] = start[h] + delay[h]
            m = rt_mode[h]
            late = m == _RT_STREAM or m == _RT_DEVICE or m == _RT_RECORD
            key_b[p] = n_procs + p if late else p
            hsize = _heap_push(heap, hsize, key_t, key_b, p)
            pstate[p] = 1

    makespan = 0
    done = 0
    cand = -1
    while True:
        # Evaluate started tasks: complete those whose end is known, park the others as waiters.
        while sp > 0:
            sp -= 1
            w = stack[sp]
            p = proc[w]
            e = start[w] + dur[w]
            cs = crit_src[w]
            ck = crit_kind[w]
            if flags[w] == 0:
                pass  # a plain task: its end is start + dur
            elif launch_dst[w] >= 0 and blk[p] >= 0:
                old = blk[p]
                if state[old] == 0:
                    wait_next[w] = wait_head[old]
                    wait_head[old] = w
                    continue
                if start[old] > e:
                    e = start[old]
                    cs = old
                    ck = C_QUEUE
            m = rt_mode[w] if flags[w] != 0 else 0
            if m == _RT_STREAM:
                g = rt_src[w]
                if g >= 0:
                    if state[g] != 2:
                        wait_next[w] = wait_head[g]
                        wait_head[g] = w
                        continue
                    v = end[g] + rt_lat[w]
                    if v > e:
                        e = v
                        cs = g
                        ck = C_RUNTIME
            elif m == _RT_DEVICE:
                d = rt_arg[w]
                best = -1
                best_v = -1
                blocked = False
                for k in range(ds_ptr[d + 1] - ds_ptr[d]):
                    g = dev_tgt[p * max_s + k]
                    if g >= 0:
                        if state[g] != 2:
                            wait_next[w] = wait_head[g]
                            wait_head[g] = w
                            blocked = True
                            break
                        v = end[g] + rt_lat[w]
                        if v > best_v:
                            best_v = v
                            best = g
                if blocked:
                    continue
                rt_src[w] = best
                if best_v > e:
                    e = best_v
                    cs = best
                    ck = C_RUNTIME
            elif m == _RT_EVENT:
                r = rt_arg[w]
                if state[r] == 0:
                    wait_next[w] = wait_head[r]
                    wait_head[r] = w
                    continue
                if start[r] > e:  # matched to a record that came later: wait for it
                    e = start[r]
                    cs = r
                    ck = C_RUNTIME
                g = rt_src[r]
                rt_src[w] = g
                if g >= 0:
                    if state[g] != 2:
                        wait_next[w] = wait_head[g]
                        wait_head[g] = w
                        continue
                    v = end[g] + rt_lat[w]
                    if v > e:
                        e = v
                        cs = g
                        ck = C_RUNTIME
            c = coll[w] if flags[w] != 0 else -1
            if c >= 0:
                if coll_time[c] < 0:
                    continue  # parked in the collective's list until the last arrival
                v = coll_time[c] + dur[w]
                if v > e:
                    e = v
                    cs = coll_last[c]
                    ck = C_COLL

            end[w] = e
            crit_src[w] = cs
            crit_kind[w] = ck
            state[w] = 2
            done += 1
            if e > makespan:
                makespan = e
            x = wait_head[w]
            wait_head[w] = -1
            while x >= 0:
                stack[sp] = x
                sp += 1
                x = wait_next[x]
            for k in range(succ_ptr[w], succ_ptr[w + 1]):
                s = succ_dst[k]
                v = e + succ_lat[k]
                if v > start[s] or crit_src[s] < 0:
                    start[s] = v
                    crit_src[s] = w
                remaining[s] -= 1
                if remaining[s] == 0:
                    q = proc[s]
                    if pstate[q] == 0 and proc_list[cursor[q]] == s:
                        key_t[q] = max(start[s], proc_free[q]) + delay[s]
                        m = rt_mode[s]
                        late = m == _RT_STREAM or m == _RT_DEVICE or m == _RT_RECORD
                        key_b[q] = n_procs + q if late else q
                        if cand < 0:
                            cand = q
                        else:
                            hsize = _heap_push(heap, hsize, key_t, key_b, q)
                        pstate[q] = 1
            proc_free[p] = e
            proc_last[p] = w
            cursor[p] += 1
            if cursor[p] == proc_ptr[p + 1]:
                pstate[p] = 3
            else:
                h = proc_list[cursor[p]]
                if remaining[h] == 0:
                    key_t[p] = max(start[h], e) + delay[h]
                    m = rt_mode[h]
                    late = m == _RT_STREAM or m == _RT_DEVICE or m == _RT_RECORD
                    key_b[p] = n_procs + p if late else p
                    if cand < 0:
                        cand = p
                    else:
                        hsize = _heap_push(heap, hsize, key_t, key_b, p)
                    pstate[p] = 1
                else:
                    pstate[p] = 0

        # Start the earliest ready head. The first processor armed since the last start is kept
        # out of the heap: when it is the earliest, it starts without a push and a pop.
        if cand >= 0:
            if hsize > 0 and _less(heap[0], cand, key_t, key_b):
                hsize = _heap_push(heap, hsize, key_t, key_b, cand)
                p, hsize = _heap_pop(heap, hsize, key_t, key_b)
            else:
                p = cand
            cand = -1
        elif hsize == 0:
            break
        else:
            p, hsize = _heap_pop(heap, hsize, key_t, key_b)
        h = proc_list[cursor[p]]
        t = key_t[p]
        if crit_src[h] >= 0 and (start[h] > proc_free[p] or proc_last[p] < 0):
            crit_kind[h] = C_EDGE
        elif proc_last[p] >= 0:
            crit_src[h] = proc_last[p]
            crit_kind[h] = C_PROC
        start[h] = t
        state[h] = 1
        pstate[p] = 2
        x = wait_head[h]
        wait_head[h] = -1
        while x >= 0:
            stack[sp] = x
            sp += 1
            x = wait_next[x]

        if flags[h] == 0:
            stack[sp] = h
            sp += 1
            continue
        g = launch_dst[h]
        if g >= 0 and q_depth > 0:
            d = proc_dev[proc[g]]
            slot = d * q_depth + nlaunch[d] % q_depth
            blk[p] = ring[slot]
            ring[slot] = g
            nlaunch[d] += 1
        m = rt_mode[h]
        if m == _RT_STREAM or m == _RT_RECORD:
            rt_src[h] = _scan_stream(rt_arg[h], t, enq, proc_ptr, proc_list, launch_src, state, end)
        elif m == _RT_DEVICE:
            d = rt_arg[h]
            for k in range(ds_ptr[d + 1] - ds_ptr[d]):
                s = ds_list[ds_ptr[d] + k]
                dev_tgt[p * max_s + k] = _scan_stream(
                    s, t, enq, proc_ptr, proc_list, launch_src, state, end
                )
        c = coll[h]
        if c >= 0:
            coll_arrived[c] += 1
            coll_last[c] = h
            if coll_arrived[c] < coll_size[c]:
                wait_next[h] = coll_head[c]
                coll_head[c] = h
                continue
            coll_time[c] = t
            x = coll_head[c]
            coll_head[c] = -1
            while x >= 0:
                stack[sp] = x
                sp += 1
                x = wait_next[x]
        stack[sp] = h
        sp += 1

    status = STATUS_OK if done == n else STATUS_DEADLOCK
    return makespan, status


@njit(cache=True)
def _run_instance(  # noqa: ANN201
    i,
    inst_graph,
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
    dur_pool,
    dur_off,
    delay_pool,
    delay_off,
    queue_depth,
    keep,
    out_off,
    start_o,
    end_o,
    crit_src_o,
    crit_kind_o,
    rt_src_o,
    makespan,
    status,
):
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
        start = np.empty(n, np.int64)
        end = np.empty(n, np.int64)
        crit_src = np.empty(n, np.int64)
        crit_kind = np.empty(n, np.int8)
        rt_src = np.empty(n, np.int64)
    d0 = dur_off[i]
    l0 = delay_off[i]
    ms, st = _replay_one(
        proc[t0:t1],
        proc_ptr[p0 + g : p1 + g + 1],
        proc_list,
        proc_device[p0:p1],
        n_devices[g],
        succ_ptr[t0 + g : t1 + g + 1],
        succ_dst,
        succ_lat,
        indeg[t0:t1],
        launch_src[t0:t1],
        launch_dst[t0:t1],
        rt_mode[t0:t1],
        rt_arg[t0:t1],
        rt_lat[t0:t1],
        coll[t0:t1],
        coll_size[coll_off[g] : coll_off[g + 1]],
        flags[t0:t1],
        dur_pool[d0 : d0 + n],
        delay_pool[l0 : l0 + n],
        queue_depth,
        start,
        end,
        crit_src,
        crit_kind,
        rt_src,
    )
    makespan[i] = ms
    status[i] = st


@njit(cache=True, parallel=True)
def _batch_parallel(*args):  # noqa: ANN002, ANN202
    n_inst = args[0].shape[0]
    for i in prange(n_inst):
        _run_instance(i, *args)


@njit(cache=True)
def _batch_serial(*args):  # noqa: ANN002, ANN202
    n_inst = args[0].shape[0]
    for i in range(n_inst):
        _run_instance(i, *args)


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
) -> BatchResult:
    """Replay many instances in one kernel call.

    ``instance_graph[i]`` is the graph (index into the batch) of instance i; default: one instance
    per graph. ``dur_ns`` / ``delay_ns`` override the graphs' own arrays per instance, as a 2-D
    ``(instances, tasks)`` array (all instances of one size) or a ``(pool, offsets)`` pair: instance
    i reads ``pool[offsets[i] : offsets[i] + n]``. ``keep_schedule=False`` returns makespans only
    (sweeps). ``check`` raises `ReplayError` on a deadlocked instance.
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
    kernel = _batch_parallel if parallel else _batch_serial
    kernel(
        inst,
        batch.task_off,
        batch.proc_off,
        batch.coll_off,
        batch.n_devices,
        batch.proc,
        batch.proc_ptr,
        batch.proc_list,
        batch.proc_device,
        batch.succ_ptr,
        batch.succ_dst,
        batch.succ_lat_ns,
        batch.indeg,
        batch.launch_src,
        batch.launch_dst,
        batch.rt_mode,
        batch.rt_arg,
        batch.rt_lat_ns,
        batch.coll,
        batch.coll_size,
        batch.flags,
        dur_pool,
        dur_off,
        delay_pool,
        delay_off,
        int(queue_depth),
        bool(keep_schedule),
        out_off,
        start,
        end,
        crit_src,
        crit_kind,
        rt_src,
        makespan,
        status,
    )
    if check and (status != STATUS_OK).any():
        i = int(np.flatnonzero(status != STATUS_OK)[0])
        src = batch.graphs[int(inst[i])].source
        raise ReplayError(
            f"{src}: instance {i} deadlocked: a dependency cycle or a collective whose "
            "participants cannot all arrive"
        )
    return BatchResult(makespan, status, out_off, start, end, crit_src, crit_kind, rt_src)


def replay(
    graph: ReplayGraph,
    *,
    dur_ns: np.ndarray | None = None,
    delay_ns: np.ndarray | None = None,
    queue_depth: int = DEFAULT_QUEUE_DEPTH,
    check: bool = True,
) -> Schedule:
    """Replay one graph (optionally with other durations/delays) and return its schedule."""
    res = replay_batch(
        graph,
        dur_ns=None if dur_ns is None else np.asarray(dur_ns)[None, :],
        delay_ns=None if delay_ns is None else np.asarray(delay_ns)[None, :],
        queue_depth=queue_depth,
        parallel=False,
        check=check,
    )
    return res.instance(0)


def replay_sweep(
    graph: ReplayGraph | GraphBatch,
    dur_ns: np.ndarray,
    *,
    delay_ns: np.ndarray | None = None,
    queue_depth: int = DEFAULT_QUEUE_DEPTH,
    parallel: bool = True,
) -> np.ndarray:
    """Makespans of ``dur_ns.shape[0]`` variants of one structure (``dur_ns[config, task]``)."""
    dur = np.asarray(dur_ns)
    if dur.ndim != 2:
        raise ValueError(f"dur_ns must be 2-D (configs, tasks), got shape {dur.shape}")
    res = replay_batch(
        graph,
        instance_graph=np.zeros(dur.shape[0], np.int64),
        dur_ns=dur,
        delay_ns=delay_ns,
        queue_depth=queue_depth,
        keep_schedule=False,
        parallel=parallel,
    )
    return res.makespan_ns
