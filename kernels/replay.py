"""Replay of execution graphs: list scheduling with fixed and runtime dependencies, in numba.

The array contract of a graph is in `kernels.graph` (read it first). Each processor runs its queue
in task-id order; a ready task starts at ``max(processor free, max(pred end + edge latency)) +
delay``. Runtime dependencies (stream, device and event waits), launch-queue back-pressure and
collectives are resolved at the simulated moment they happen, in an event-driven simulation; a
linear pass (`_replay_linear`, the default) computes most schedules in one sweep over an order
built once per graph and falls back to the simulation for whatever it cannot prove, so schedules
are always the simulation's. Outputs per task: start, end, what bound its end (``crit_src``,
``crit_kind``) and the resolved runtime target; per instance: makespan and status. The rules, tie
breaks, batches and speed: docs/replay.md, "Module notes".
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numba import get_num_threads, njit, prange

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
    QUEUE = 4  # back-pressure: the GPU start that freed a slot in the full launch queue
    COLLECTIVE = 5  # the last participant of its collective to arrive


C_NONE, C_PROC, C_EDGE, C_RUNTIME, C_QUEUE, C_COLL = 0, 1, 2, 3, 4, 5

# A task's working row in `_replay_one`: start, end, crit_src and one word of bit fields (state in
# bits 0-1, crit_kind in 2-4, "has waiters" in 5, "launch's queue slot settled" in 6, remaining
# fixed predecessors from bit 8 on).
_TS_WIDTH = 4
_WAITERS = 32
_QDONE = 64  # a launch's queue slot is settled (its row holds its final end and bound)
_REM_SHIFT = 8
_REM_ONE = 1 << _REM_SHIFT
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


STATUS_OK = 0
STATUS_DEADLOCK = 1


class ReplayError(RuntimeError):
    """A replay could not finish (cycle or unmatched collective); names graph and instance."""


@njit(cache=True, inline="always")
def _scan_stream(s, t, enq, proc_ptr, proc_list, launch_src, ts):  # noqa: ANN001, ANN202
    """Advance stream s's enqueued prefix to time t (t never decreases) and return its last task."""
    q = enq[s]
    qe = proc_ptr[s + 1]
    while q < qe:
        c = launch_src[proc_list[q]]
        if c >= 0 and not ((ts[c * _TS_WIDTH + 3] & 3) == 2 and ts[c * _TS_WIDTH + 1] <= t):
            break
        q += 1
    enq[s] = q
    if q > proc_ptr[s]:
        return proc_list[q - 1]
    return -1


@njit(cache=True)
def _park(ts, wait_head, wait_next, w, g):  # noqa: ANN001, ANN202
    """Task `w` waits for task `g` to end: push it on `g`'s list of waiters (rare path)."""
    wait_next[w] = wait_head[g] if ts[g * _TS_WIDTH + 3] & _WAITERS else -1
    wait_head[g] = w
    ts[g * _TS_WIDTH + 3] |= _WAITERS


@njit(cache=True)
def _replay_one(  # noqa: ANN201, PLR0912, PLR0913, PLR0915
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
):
    """Replay one graph into start/end/crit_src/crit_kind/rt_src; return (makespan, status).

    ``proc_ptr`` and ``succ_ptr`` hold absolute positions into ``proc_list`` / ``succ_*`` (which may
    be a batch's concatenation); all task and processor ids are local to this graph. With ``keep``
    the schedule is written to ``start``..``rt_src`` (length n); without, they are not touched
    (``rt_src`` is then scratch of length >= n). ``ts`` (>= n rows of `_TS_WIDTH`) and ``stack``
    (>= n) are working arrays, overwritten: callers reuse them across instances.

    The working state of a task is one 32-byte row of ``ts``: start (its ready time until it
    starts), end, crit_src, and a word of bit fields (`_TS_WIDTH`): state (0 not started, 1
    started, 2 done), crit_kind, whether tasks wait on it (their list is in ``wait_head`` /
    ``wait_next``, touched only then) and its count of unfinished fixed predecessors. One row
    instead of eight arrays: the processors walk the task ids at a dozen places at once, and on
    graphs larger than the L2 cache the replay's time goes mostly to cache misses.

    ``eager`` starts a plain task (``flags == 0``: it neither launches, waits at runtime nor
    collects) *on a CPU thread* with ``dur > 0`` as soon as it is its processor's ready head,
    instead of queueing it in the time-ordered heap. The result is the same, ties included:
    nothing reads a CPU task's state (back-pressure, runtime waits and stream scans only read GPU
    tasks and launches), and the heads it arms have keys after its own heap key (time start + dur
    > start), so the heap pops them in the same order it would have. GPU tasks and zero-length
    tasks stay in the heap: started early, they would reorder starts at exactly equal times
    (hypothesis found such a case). With ``eager`` too, an event (a start, or a launch's queue
    decision) is run at once, without a heap push and pop, when nothing else is on the stack or
    armed and its (time, tie) key is below the heap's top: the pop would return it next anyway.
    ``eager=False`` runs every event through the heap: the reference the tests compare against.
    """
    n = proc.shape[0]
    n_procs = proc_dev.shape[0]
    # Before a task starts, start[] holds its ready time and crit_src[] the predecessor that set it.
    for i in range(n):
        ts[i * _TS_WIDTH + 0] = 0
        ts[i * _TS_WIDTH + 1] = -1
        ts[i * _TS_WIDTH + 2] = -1
        ts[i * _TS_WIDTH + 3] = indeg[i] << _REM_SHIFT  # not started, C_NONE, no waiters
    if keep:
        for i in range(n):
            rt_src[i] = -1
    sp = 0  # stack: started tasks to (re)evaluate; each is in it at most once

    cursor = np.empty(n_procs, np.int64)
    # 0 head not ready, 1 head in heap, 2 busy, 3 finished, 4 launch's queue decision in heap
    pstate = np.zeros(n_procs, np.int8)
    proc_free = np.zeros(n_procs, np.int64)
    proc_last = np.full(n_procs, -1, np.int64)
    key_t = np.zeros(n_procs, np.int64)
    key_b = np.zeros(n_procs, np.int64)
    heap = np.empty(n_procs, np.int64)
    hsize = 0
    enq = np.empty(n_procs, np.int64)

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

    # launch queue per device: tasks launched (launch done) but not started, and the FIFO of
    # launches held because it was full (linked through wait_next)
    q_depth = queue_depth if queue_depth > 0 else 0
    n_out = np.zeros(n_dev, np.int64)
    q_head = np.full(n_dev, -1, np.int64)
    q_tail = np.full(n_dev, -1, np.int64)

    n_coll = coll_size.shape[0]
    coll_arrived = np.zeros(n_coll, np.int64)
    coll_time = np.full(n_coll, -1, np.int64)
    coll_last = np.full(n_coll, -1, np.int64)
    coll_head = np.full(n_coll, -1, np.int64)

    # Processors whose head just became ready (key_t set), to start at once (eager, plain head) or
    # to push on the heap. Every start and every heap operation is written out once, in the loop
    # below: array-taking helpers inlined by numba cost reference-count traffic on every call.
    armed = np.empty(n_procs, np.int64)
    na = 0
    for p in range(n_procs):
        cursor[p] = proc_ptr[p]
        enq[p] = proc_ptr[p]
        if proc_ptr[p] == proc_ptr[p + 1]:
            pstate[p] = 3
            continue
        h = proc_list[proc_ptr[p]]
        if ts[h * _TS_WIDTH + 3] < _REM_ONE:
            key_t[p] = delay[h]
            armed[na] = p
            na += 1
            pstate[p] = 1

    makespan = 0
    done = 0
    while True:
        if sp > 0:
            # Evaluate a started task: complete it if its end is known, else park it as a waiter.
            sp -= 1
            w = stack[sp]
            p = proc[w]
            e = ts[w * _TS_WIDTH + 0] + dur[w]
            cs = ts[w * _TS_WIDTH + 2]
            ck = (ts[w * _TS_WIDTH + 3] >> 2) & 7
            if flags[w] != 0:
                lq = q_depth > 0 and launch_dst[w] >= 0
                if lq and ts[w * _TS_WIDTH + 3] & _QDONE:
                    # a launch whose queue slot was settled: its end and bound are in its row
                    e = ts[w * _TS_WIDTH + 1]
                    cs = ts[w * _TS_WIDTH + 2]
                    ck = (ts[w * _TS_WIDTH + 3] >> 2) & 7
                else:
                    m = rt_mode[w]
                    if m == _RT_STREAM:
                        g = rt_src[w]
                        if g >= 0:
                            if (ts[g * _TS_WIDTH + 3] & 3) != 2:
                                _park(ts, wait_head, wait_next, w, g)
                                continue
                            v = ts[g * _TS_WIDTH + 1] + rt_lat[w]
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
                                if (ts[g * _TS_WIDTH + 3] & 3) != 2:
                                    _park(ts, wait_head, wait_next, w, g)
                                    blocked = True
                                    break
                                v = ts[g * _TS_WIDTH + 1] + rt_lat[w]
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
                        if (ts[r * _TS_WIDTH + 3] & 3) == 0:
                            _park(ts, wait_head, wait_next, w, r)
                            continue
                        if (
                            ts[r * _TS_WIDTH + 0] > e
                        ):  # matched to a record that came later: wait for it
                            e = ts[r * _TS_WIDTH + 0]
                            cs = r
                            ck = C_RUNTIME
                        g = rt_src[r]
                        rt_src[w] = g
                        if g >= 0:
                            if (ts[g * _TS_WIDTH + 3] & 3) != 2:
                                _park(ts, wait_head, wait_next, w, g)
                                continue
                            v = ts[g * _TS_WIDTH + 1] + rt_lat[w]
                            if v > e:
                                e = v
                                cs = g
                                ck = C_RUNTIME
                    c = coll[w]
                    if c >= 0:
                        if coll_time[c] < 0:
                            continue  # parked in the collective's list until the last arrival
                        v = coll_time[c] + dur[w]
                        if v > e:
                            e = v
                            cs = coll_last[c]
                            ck = C_COLL

                    if lq:
                        # its end is known; whether the queue holds it is decided at that time,
                        # in time order with the device's GPU starts (a heap event, pstate 4).
                        # If that event would be the very next one (nothing on the stack or
                        # armed, the heap's top later), decide it here: the same result.
                        o = heap[0]
                        if (
                            eager
                            and sp == 0
                            and na == 0
                            and (hsize == 0 or e < key_t[o] or (e == key_t[o] and p < key_b[o]))
                        ):
                            d = proc_dev[proc[launch_dst[w]]]
                            if n_out[d] < q_depth:
                                n_out[d] += 1
                                lq = False
                    if lq:
                        ts[w * _TS_WIDTH + 1] = e
                        ts[w * _TS_WIDTH + 2] = cs
                        ts[w * _TS_WIDTH + 3] = (ts[w * _TS_WIDTH + 3] & ~28) | (ck << 2)
                        key_t[p] = e
                        pstate[p] = 4
                        armed[na] = p
                        na += 1
                        continue

            ts[w * _TS_WIDTH + 1] = e
            ts[w * _TS_WIDTH + 2] = cs
            ts[w * _TS_WIDTH + 3] = (ts[w * _TS_WIDTH + 3] & ~31) | (ck << 2) | 2
            done += 1
            if e > makespan:
                makespan = e
            if ts[w * _TS_WIDTH + 3] & _WAITERS:
                ts[w * _TS_WIDTH + 3] &= ~_WAITERS
                x = wait_head[w]
                while x >= 0:
                    stack[sp] = x
                    sp += 1
                    x = wait_next[x]
            for k in range(succ_ptr[w], succ_ptr[w + 1]):
                s = succ_dst[k]
                v = e + succ_lat[k]
                # ties go to the lowest task id, so the choice does not depend on processing order
                if (
                    v > ts[s * _TS_WIDTH + 0]
                    or ts[s * _TS_WIDTH + 2] < 0
                    or (v == ts[s * _TS_WIDTH + 0] and w < ts[s * _TS_WIDTH + 2])
                ):
                    ts[s * _TS_WIDTH + 0] = v
                    ts[s * _TS_WIDTH + 2] = w
                ts[s * _TS_WIDTH + 3] -= _REM_ONE
                if ts[s * _TS_WIDTH + 3] < _REM_ONE:
                    q = proc[s]
                    if pstate[q] == 0 and proc_list[cursor[q]] == s:
                        key_t[q] = max(ts[s * _TS_WIDTH + 0], proc_free[q]) + delay[s]
                        armed[na] = q
                        na += 1
                        pstate[q] = 1
            proc_free[p] = e
            proc_last[p] = w
            cursor[p] += 1
            if cursor[p] == proc_ptr[p + 1]:
                pstate[p] = 3
            else:
                h = proc_list[cursor[p]]
                if ts[h * _TS_WIDTH + 3] < _REM_ONE:
                    key_t[p] = max(ts[h * _TS_WIDTH + 0], e) + delay[h]
                    armed[na] = p
                    na += 1
                    pstate[p] = 1
                else:
                    pstate[p] = 0
            continue

        if na > 0:
            na -= 1
            p = armed[na]
            h = proc_list[cursor[p]]
            if not (eager and flags[h] == 0 and proc_dev[p] < 0 and dur[h] > 0):
                # into the heap, keyed (time, tie) with ties: readers of stream state last
                m = rt_mode[h]
                late = pstate[p] != 4 and (m == _RT_STREAM or m == _RT_DEVICE or m == _RT_RECORD)
                key_b[p] = n_procs + p if late else p
                kt = key_t[p]
                kb = key_b[p]
                o = heap[0]
                if not (
                    eager
                    and na == 0
                    and (hsize == 0 or kt < key_t[o] or (kt == key_t[o] and kb < key_b[o]))
                ):
                    i = hsize
                    while i > 0:
                        parent = (i - 1) >> 1
                        o = heap[parent]
                        if kt < key_t[o] or (kt == key_t[o] and kb < key_b[o]):
                            heap[i] = o
                            i = parent
                        else:
                            break
                    heap[i] = p
                    hsize += 1
                    continue
                # else: nothing else is pending and p's key is below the heap's top, so the heap
                # would hand p straight back: run its event now
        elif hsize == 0:
            break
        else:
            # pop the earliest ready head
            p = heap[0]
            hsize -= 1
            if hsize > 0:
                last = heap[hsize]
                lt = key_t[last]
                lb = key_b[last]
                i = 0
                while True:
                    c = 2 * i + 1
                    if c >= hsize:
                        break
                    r = c + 1
                    if r < hsize and (
                        key_t[heap[r]] < key_t[heap[c]]
                        or (key_t[heap[r]] == key_t[heap[c]] and key_b[heap[r]] < key_b[heap[c]])
                    ):
                        c = r
                    o = heap[c]
                    if key_t[o] < lt or (key_t[o] == lt and key_b[o] < lb):
                        heap[i] = o
                        i = c
                    else:
                        break
                heap[i] = last
            h = proc_list[cursor[p]]
        if pstate[p] == 4:
            # launch h reaches its end: it takes a queue slot, or waits in the device's FIFO
            # for a GPU start to free one
            pstate[p] = 2
            d = proc_dev[proc[launch_dst[h]]]
            if n_out[d] < q_depth:
                n_out[d] += 1
                ts[h * _TS_WIDTH + 3] |= _QDONE
                stack[sp] = h
                sp += 1
            else:
                wait_next[h] = -1
                if q_tail[d] >= 0:
                    wait_next[q_tail[d]] = h
                else:
                    q_head[d] = h
                q_tail[d] = h
            continue

        # Start h on p at key_t[p]: settle what bound its start, wake what waited for its start.
        t = key_t[p]
        if ts[h * _TS_WIDTH + 2] >= 0 and (
            ts[h * _TS_WIDTH + 0] > proc_free[p] or proc_last[p] < 0
        ):
            ts[h * _TS_WIDTH + 3] = (ts[h * _TS_WIDTH + 3] & ~28) | (C_EDGE << 2)
        elif proc_last[p] >= 0:
            ts[h * _TS_WIDTH + 2] = proc_last[p]
            ts[h * _TS_WIDTH + 3] = (ts[h * _TS_WIDTH + 3] & ~28) | (C_PROC << 2)
        ts[h * _TS_WIDTH + 0] = t
        ts[h * _TS_WIDTH + 3] |= 1
        pstate[p] = 2
        if ts[h * _TS_WIDTH + 3] & _WAITERS:
            ts[h * _TS_WIDTH + 3] &= ~_WAITERS
            x = wait_head[h]
            while x >= 0:
                stack[sp] = x
                sp += 1
                x = wait_next[x]
        if q_depth > 0 and launch_src[h] >= 0:
            # a launched GPU task leaves its device's queue: the first held launch takes its slot
            d = proc_dev[p]
            a = q_head[d]
            if a >= 0:
                q_head[d] = wait_next[a]
                if q_head[d] < 0:
                    q_tail[d] = -1
                if t > ts[a * _TS_WIDTH + 1]:
                    ts[a * _TS_WIDTH + 1] = t
                    ts[a * _TS_WIDTH + 2] = h
                    ts[a * _TS_WIDTH + 3] = (ts[a * _TS_WIDTH + 3] & ~28) | (C_QUEUE << 2)
                ts[a * _TS_WIDTH + 3] |= _QDONE
                stack[sp] = a
                sp += 1
            else:
                n_out[d] -= 1
        if flags[h] != 0:
            m = rt_mode[h]
            if m == _RT_STREAM or m == _RT_RECORD:
                rt_src[h] = _scan_stream(rt_arg[h], t, enq, proc_ptr, proc_list, launch_src, ts)
            elif m == _RT_DEVICE:
                d = rt_arg[h]
                for k in range(ds_ptr[d + 1] - ds_ptr[d]):
                    s = ds_list[ds_ptr[d] + k]
                    dev_tgt[p * max_s + k] = _scan_stream(
                        s, t, enq, proc_ptr, proc_list, launch_src, ts
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

    if keep:
        for i in range(n):
            start[i] = ts[i * _TS_WIDTH + 0]
            # a launch held by the queue has its end in its row but is not done
            end[i] = ts[i * _TS_WIDTH + 1] if (ts[i * _TS_WIDTH + 3] & 3) == 2 else -1
            crit_src[i] = ts[i * _TS_WIDTH + 2]
            crit_kind[i] = (ts[i * _TS_WIDTH + 3] >> 2) & 7
    status = STATUS_OK if done == n else STATUS_DEADLOCK
    return makespan, status


# ---------------------------------------------------------------------------------------------
# Linear pass: the same schedule in one topological sweep, when the simulated-time parts resolve.
# ---------------------------------------------------------------------------------------------

_SCAN_PER_READER_MAX = 512  # processors up to which stream scans keep a prefix per reader
STATUS_FALLBACK = 2  # internal: the linear pass could not prove its schedule; run the simulation


@njit(cache=True, inline="always")
def _reads_stream(m):  # noqa: ANN001, ANN202
    return m == _RT_STREAM or m == _RT_DEVICE or m == _RT_RECORD


@njit(cache=True)
def _heap_push(h, size, x):  # noqa: ANN001, ANN202
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if h[parent] <= x:
            break
        h[i] = h[parent]
        i = parent
    h[i] = x
    return size + 1


@njit(cache=True)
def _heap_pop(h, size):  # noqa: ANN001, ANN202
    """Remove h[0]; return the new size."""
    size -= 1
    if size > 0:
        x = h[size]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and h[c + 1] < h[c]:
                c += 1
            if h[c] >= x:
                break
            h[i] = h[c]
            i = c
        h[i] = x
    return size


@njit(cache=True)
def _linear_order(  # noqa: ANN201, PLR0912, PLR0913, PLR0915
    proc,
    proc_ptr,
    proc_list,
    proc_dev,
    n_dev,
    succ_ptr,
    succ_dst,
    indeg,
    launch_src,
    rt_mode,
    rt_arg,
    rt_lat,
    coll,
    coll_size,
    dur,
    delay,
    dep_ptr,
    dep_src,
    dep_lat,
):
    """A processing order for `_replay_linear`, once per graph: (order, ok).

    Found by evaluating the graph once with its own durations (no critical-path bookkeeping,
    no checks: only the order matters here), Kahn-style: a task is taken when its fixed
    predecessors and its processor predecessor are done. Tasks that read the stream state
    (STREAM, DEVICE, RECORD) are taken only when nothing else is ready, so that the launches they
    look at are computed first; a waiting task whose target (or RECORD) is not computed yet is
    parked on it and taken again once it is. A collective participant appears twice: ``-(i + 1)``
    (its arrival) when it is ready and ``i`` (its end) once all participants have arrived; any
    other task appears once, when it ends. Other durations rarely need another order, and when
    they do `_replay_linear` notices and the simulation runs. ``ok`` is False when the order
    cannot cover the graph (a cycle, a collective that never completes, a wait never resolved).
    """
    n = proc.shape[0]
    n_procs = proc_ptr.shape[0] - 1
    n_coll = coll_size.shape[0]
    c_ptr = np.zeros(n_coll + 1, np.int64)
    n_part = 0
    for i in range(n):
        if coll[i] >= 0:
            c_ptr[coll[i] + 1] += 1
            n_part += 1
    for c in range(n_coll):
        c_ptr[c + 1] += c_ptr[c]
    c_list = np.empty(n_part, np.int64)
    c_fill = c_ptr[:n_coll].copy()
    for i in range(n):
        c = coll[i]
        if c >= 0:
            c_list[c_fill[c]] = i
            c_fill[c] += 1
    arrived = np.zeros(n_coll, np.int64)
    coll_time = np.zeros(n_coll, np.int64)
    ds_ptr = np.zeros(n_dev + 1, np.int64)
    for p in range(n_procs):
        if proc_dev[p] >= 0:
            ds_ptr[proc_dev[p] + 1] += 1
    for d in range(n_dev):
        ds_ptr[d + 1] += ds_ptr[d]
    ds_list = np.empty(ds_ptr[n_dev], np.int64)
    fill = ds_ptr[:n_dev].copy()
    for p in range(n_procs):
        d = proc_dev[p]
        if d >= 0:
            ds_list[fill[d]] = p
            fill[d] += 1

    rem = np.empty(n, np.int64)
    nxt = np.full(n, -1, np.int64)  # next task on the same processor
    prv = np.full(n, -1, np.int64)
    for i in range(n):
        rem[i] = indeg[i]
    for p in range(n_procs):
        for k in range(proc_ptr[p] + 1, proc_ptr[p + 1]):
            rem[proc_list[k]] += 1
            nxt[proc_list[k - 1]] = proc_list[k]
            prv[proc_list[k]] = proc_list[k - 1]
    start = np.full(n, -1, np.int64)
    end = np.full(n, -1, np.int64)
    tgt = np.full(n, -1, np.int64)  # scan result of a STREAM / RECORD task
    wait_head = np.full(n, -1, np.int64)
    wait_next = np.full(n, -1, np.int64)
    rw = n_procs if n_procs <= _SCAN_PER_READER_MAX else 0
    sc_t = np.full(n_procs * max(rw, 1), -1, np.int64)
    sc_q = np.empty(n_procs * max(rw, 1), np.int64)
    for k in range(sc_q.shape[0]):
        sc_q[k] = proc_ptr[k % n_procs]
    qa = np.empty(2 * n + n_part, np.int64)  # min-heap by id: other ready tasks, resumed waiters
    cap = n_procs + 1  # ring of ready stream readers: at most one per processor
    qb = np.empty(cap, np.int64)
    ta = 0
    hb = 0
    nb = 0
    scanned = np.zeros(n, np.int8)
    for i in range(n):
        if rem[i] == 0:
            if _reads_stream(rt_mode[i]):
                qb[(hb + nb) % cap] = i
                nb += 1
            else:
                ta = _heap_push(qa, ta, i)
    order = np.empty(n + n_part, np.int64)
    no = 0
    stuck = 0  # readers taken from the ring in a row that found a launch not computed yet
    while True:
        forced = False
        if ta > 0:
            i = qa[0]
            ta = _heap_pop(qa, ta)
            stuck = 0
        elif nb > 0:
            if stuck >= nb:
                # a whole round without progress: the reader that starts first scans with what
                # is known (a launch not computed yet runs after a reader that starts later, so
                # it ends after this one starts: what the simulation would see)
                forced = True
                b = hb
                for k in range(1, nb):
                    x = (hb + k) % cap
                    if start[qb[x]] < start[qb[b]]:
                        b = x
                qb[hb], qb[b] = qb[b], qb[hb]
            i = qb[hb]
            hb = (hb + 1) % cap
            nb -= 1
        else:
            break
        p = proc[i]
        if start[i] < 0:
            t = 0
            for j in range(dep_ptr[i], dep_ptr[i + 1]):
                v = end[dep_src[j]] + dep_lat[j]
                if v > t:
                    t = v
            if prv[i] >= 0 and end[prv[i]] > t:
                t = end[prv[i]]
            t += delay[i]
            start[i] = t
            c = coll[i]
            if c >= 0:
                order[no] = -(i + 1)
                no += 1
                arrived[c] += 1
                if t > coll_time[c]:
                    coll_time[c] = t
                if arrived[c] == coll_size[c]:
                    for k in range(c_ptr[c], c_ptr[c + 1]):
                        ta = _heap_push(qa, ta, c_list[k])
                continue
        m = rt_mode[i]
        if scanned[i] == 0 and _reads_stream(m):
            # the stream prefix at its start; a launch of another thread not computed yet might
            # still end before it: try again later (unless nothing else can progress)
            t = start[i]
            blocked = False
            s0 = ds_ptr[rt_arg[i]] if m == _RT_DEVICE else 0
            s1 = ds_ptr[rt_arg[i] + 1] if m == _RT_DEVICE else 1
            for kk in range(s0, s1):
                s = ds_list[kk] if m == _RT_DEVICE else rt_arg[i]
                key = p * rw + s
                if t < sc_t[key]:
                    sc_q[key] = proc_ptr[s]
                q = sc_q[key]
                while q < proc_ptr[s + 1]:
                    c = launch_src[proc_list[q]]
                    if c >= 0:
                        if end[c] < 0:
                            blocked = proc[c] != p and not forced
                            break
                        if end[c] > t:
                            break
                    q += 1
                sc_t[key] = t
                sc_q[key] = q
                if q > proc_ptr[s]:
                    tgt[i] = proc_list[q - 1]
                if blocked:
                    break
            if blocked:
                stuck += 1
                qb[(hb + nb) % cap] = i
                nb += 1
                continue
            scanned[i] = 1
            stuck = 0
        # its end, unless it waits for a task not computed yet (then park it there)
        e = start[i] + dur[i]
        g = -1  # a task it waits for that is not computed yet
        if m == _RT_STREAM:
            x = tgt[i]
            if x >= 0:
                if end[x] < 0:
                    g = x
                else:
                    e = max(e, end[x] + rt_lat[i])
        elif m == _RT_DEVICE:
            for kk in range(ds_ptr[rt_arg[i]], ds_ptr[rt_arg[i] + 1]):
                s = ds_list[kk]
                q = sc_q[p * rw + s]
                if q > proc_ptr[s]:
                    x = proc_list[q - 1]
                    if end[x] < 0:
                        g = x
                        break
                    e = max(e, end[x] + rt_lat[i])
        elif m == _RT_EVENT:
            r = rt_arg[i]
            if end[r] < 0:
                g = r
            else:
                e = max(e, start[r])
                x = tgt[r]
                if x >= 0:
                    if end[x] < 0:
                        g = x
                    else:
                        e = max(e, end[x] + rt_lat[i])
        if g >= 0:
            wait_next[i] = wait_head[g]
            wait_head[g] = i
            continue
        if coll[i] >= 0 and coll_time[coll[i]] + dur[i] > e:
            e = coll_time[coll[i]] + dur[i]
        end[i] = e
        order[no] = i
        no += 1
        x = wait_head[i]
        while x >= 0:
            ta = _heap_push(qa, ta, x)
            x = wait_next[x]
        for k in range(succ_ptr[i], succ_ptr[i + 1]):
            s = succ_dst[k]
            rem[s] -= 1
            if rem[s] == 0:
                if _reads_stream(rt_mode[s]):
                    qb[(hb + nb) % cap] = s
                    nb += 1
                else:
                    ta = _heap_push(qa, ta, s)
        s = nxt[i]
        if s >= 0:
            rem[s] -= 1
            if rem[s] == 0:
                if _reads_stream(rt_mode[s]):
                    qb[(hb + nb) % cap] = s
                    nb += 1
                else:
                    ta = _heap_push(qa, ta, s)
    return order, no == n + n_part


@njit(cache=True, inline="always")
def _lin_scan(s, key, t, w, proc, proc_ptr, proc_list, launch_src, dur, end, sc_t, sc_q, asm, na):  # noqa: ANN001, ANN202, PLR0913
    """Stream s's enqueued prefix at time t, read by task w: (last task or -1, na, ok).

    A position is enqueued when it has no launch or its launch ended before t; at exactly t when
    the launch ran on w's own thread (it finished before w began) or lasted > 0 (it finished at an
    event before t, so before w, which reads the stream after every other start at t). A launch
    not computed yet stops the prefix, and ``asm`` records that it must end after t (checked
    after the pass). The prefix found is kept per reading processor and stream (``key``), whose scans come in
    non-decreasing t; with more than `_SCAN_PER_READER_MAX` processors, per stream only, and a
    scan earlier than the last one of its stream falls back."""
    if t < sc_t[key]:
        return -1, na, False
    q = sc_q[key]
    qe = proc_ptr[s + 1]
    ok = True
    while q < qe:
        c = launch_src[proc_list[q]]
        if c >= 0:
            ec = end[c]
            if ec < 0:
                asm[2 * na] = c
                asm[2 * na + 1] = t
                na += 1
                break
            if ec > t:
                break
            if ec == t and not (proc[c] == proc[w] or dur[c] > 0):
                ok = False
                break
        q += 1
    sc_t[key] = t
    sc_q[key] = q
    if q > proc_ptr[s]:
        return proc_list[q - 1], na, ok
    return -1, na, ok


@njit(cache=True)
def _replay_linear(  # noqa: ANN201, PLR0912, PLR0913, PLR0915
    order,
    dep_ptr,
    dep_src,
    dep_lat,
    proc,
    proc_ptr,
    proc_list,
    proc_dev,
    n_dev,
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
    keep,
    start,
    end,
    crit_src,
    crit_kind,
    rt_src,
    asm,
    qs,
):
    """`_replay_one`'s schedule computed in the topological ``order`` of `_linear_order`, one
    task at a time: ``start = max(processor free, max(pred end + latency)) + delay``.

    Everything that `_replay_one` decides at a simulated moment is resolved here from values that
    are final, or checked afterwards; when a check fails the result is `STATUS_FALLBACK` and the
    caller runs the simulation, so the schedule is always the simulation's:
    * stream scans (STREAM, DEVICE, RECORD) by `_lin_scan`, its assumptions checked at the end;
      a scan whose target or whose record is not computed yet falls back;
    * collectives: every arrival is in ``order`` before any end; the last arrival is the latest
      start (two arrivals at the same time fall back);
    * back-pressure: the pass assumes no launch is ever held, then checks per device that at each
      launch's end at most ``queue_depth`` tasks can be outstanding (launches ended at or before
      it, minus launched GPU tasks started before it, counted in time buckets: an upper bound).
      When no launch is held the queue changes nothing, so the schedule stands.
    ``dep_ptr`` holds absolute positions into ``dep_src``; ``asm`` (>= 2n) and ``qs`` (>= 2n) are
    scratch, from the caller's reused working memory (the queue check's counters were fresh
    arrays, whose page faults cost a fifth of a replay of a 1.2M-task graph). Without
    ``keep``, ``crit_src``/``crit_kind`` are not written and the others are scratch of length n.
    """
    n = proc.shape[0]
    n_procs = proc_dev.shape[0]
    for i in range(n):
        end[i] = -1
    if keep:
        for i in range(n):
            rt_src[i] = -1
    proc_free = np.zeros(n_procs, np.int64)
    proc_last = np.full(n_procs, -1, np.int64)
    rw = n_procs if n_procs <= _SCAN_PER_READER_MAX else 0
    sc_t = np.full(n_procs * max(rw, 1), -1, np.int64)
    sc_q = np.empty(n_procs * max(rw, 1), np.int64)
    for k in range(sc_q.shape[0]):
        sc_q[k] = proc_ptr[k % n_procs]
    ds_ptr = np.zeros(n_dev + 1, np.int64)
    for p in range(n_procs):
        if proc_dev[p] >= 0:
            ds_ptr[proc_dev[p] + 1] += 1
    for d in range(n_dev):
        ds_ptr[d + 1] += ds_ptr[d]
    ds_list = np.empty(ds_ptr[n_dev], np.int64)
    fill = ds_ptr[:n_dev].copy()
    for p in range(n_procs):
        d = proc_dev[p]
        if d >= 0:
            ds_list[fill[d]] = p
            fill[d] += 1
    n_coll = coll_size.shape[0]
    coll_time = np.full(n_coll, -1, np.int64)
    coll_last = np.full(n_coll, -1, np.int64)
    na = 0
    asm_cap = asm.shape[0] // 2
    makespan = 0

    for k in range(order.shape[0]):
        i = order[k]
        if i < 0:
            # a collective participant arrives: its start only
            i = -i - 1
            p = proc[i]
        else:
            p = proc[i]
            if coll[i] >= 0:
                # its collective's last participant has arrived: end it
                c = coll[i]
                e = start[i] + dur[i]
                cs = crit_src[i] if keep else -1
                ck = crit_kind[i] if keep else 0
                v = coll_time[c] + dur[i]
                if v > e:
                    e = v
                    cs = coll_last[c]
                    ck = C_COLL
                end[i] = e
                if keep:
                    crit_src[i] = cs
                    crit_kind[i] = ck
                proc_free[p] = e
                proc_last[p] = i
                if e > makespan:
                    makespan = e
                continue
        ready = 0
        rs = -1
        for j in range(dep_ptr[i], dep_ptr[i + 1]):
            w = dep_src[j]
            v = end[w] + dep_lat[j]
            if v > ready or rs < 0 or (v == ready and w < rs):
                ready = v
                rs = w
        pf = proc_free[p]
        pl = proc_last[p]
        t = (ready if ready > pf else pf) + delay[i]
        start[i] = t
        if rs >= 0 and (ready > pf or pl < 0):
            cs = rs
            ck = C_EDGE
        elif pl >= 0:
            cs = pl
            ck = C_PROC
        else:
            cs = -1
            ck = C_NONE
        e = t + dur[i]
        if flags[i] != 0:
            c = coll[i]
            if c >= 0:
                # arrival: the last one (latest start, then highest processor) sets the time
                if t == coll_time[c]:
                    # equal arrivals go by the simulation's event order, which a zero-length
                    # task started at the same time can change: not decided here
                    return makespan, STATUS_FALLBACK
                if t > coll_time[c]:
                    coll_time[c] = t
                    coll_last[c] = i
                if keep:
                    crit_src[i] = cs
                    crit_kind[i] = ck
                continue
            m = rt_mode[i]
            if m == _RT_STREAM or m == _RT_RECORD:
                if na + 1 > asm_cap:
                    return makespan, STATUS_FALLBACK
                g, na, ok = _lin_scan(
                    rt_arg[i],
                    p * rw + rt_arg[i],
                    t,
                    i,
                    proc,
                    proc_ptr,
                    proc_list,
                    launch_src,
                    dur,
                    end,
                    sc_t,
                    sc_q,
                    asm,
                    na,
                )
                if not ok:
                    return makespan, STATUS_FALLBACK
                rt_src[i] = g
                if m == _RT_STREAM and g >= 0:
                    if end[g] < 0:
                        return makespan, STATUS_FALLBACK
                    v = end[g] + rt_lat[i]
                    if v > e:
                        e = v
                        cs = g
                        ck = C_RUNTIME
            elif m == _RT_DEVICE:
                d = rt_arg[i]
                best = -1
                best_v = -1
                for kk in range(ds_ptr[d], ds_ptr[d + 1]):
                    if na + 1 > asm_cap:
                        return makespan, STATUS_FALLBACK
                    g, na, ok = _lin_scan(
                        ds_list[kk],
                        p * rw + ds_list[kk],
                        t,
                        i,
                        proc,
                        proc_ptr,
                        proc_list,
                        launch_src,
                        dur,
                        end,
                        sc_t,
                        sc_q,
                        asm,
                        na,
                    )
                    if not ok:
                        return makespan, STATUS_FALLBACK
                    if g >= 0:
                        if end[g] < 0:
                            return makespan, STATUS_FALLBACK
                        v = end[g] + rt_lat[i]
                        if v > best_v:
                            best_v = v
                            best = g
                rt_src[i] = best
                if best_v > e:
                    e = best_v
                    cs = best
                    ck = C_RUNTIME
            elif m == _RT_EVENT:
                r = rt_arg[i]
                if end[r] < 0:
                    return makespan, STATUS_FALLBACK
                if start[r] > e:
                    e = start[r]
                    cs = r
                    ck = C_RUNTIME
                g = rt_src[r]
                rt_src[i] = g
                if g >= 0:
                    if end[g] < 0:
                        return makespan, STATUS_FALLBACK
                    v = end[g] + rt_lat[i]
                    if v > e:
                        e = v
                        cs = g
                        ck = C_RUNTIME
        end[i] = e
        if keep:
            crit_src[i] = cs
            crit_kind[i] = ck
        proc_free[p] = e
        proc_last[p] = i
        if e > makespan:
            makespan = e

    # the scans' assumptions: each launch that stopped a prefix ends after the scan's time
    for a in range(na):
        if end[asm[2 * a]] <= asm[2 * a + 1]:
            return makespan, STATUS_FALLBACK
    if queue_depth > 0 and not _queue_never_full(
        proc, proc_dev, n_dev, launch_src, launch_dst, start, end, makespan, queue_depth, qs
    ):
        return makespan, STATUS_FALLBACK
    return makespan, STATUS_OK


# Tasks per time bucket of the queue check, on average: a bucket over-counts the outstanding
# launches by at most the GPU tasks starting inside it (a handful, against a queue of ~1000),
# and 8 of them keep the counters small enough for the caches (one per task: 19 MB on 1.2M
# tasks; 8: the check 11.4 -> 4.2 ms, a 1.2M-task replay 32 -> 26 ms).
_QUEUE_TASKS_PER_BUCKET = 8


@njit(cache=True)
def _queue_never_full(  # noqa: ANN201, PLR0913
    proc, proc_dev, n_dev, launch_src, launch_dst, start, end, makespan, queue_depth, qs
):
    """True if no launch of the schedule can find its device's launch queue full (see
    `_replay_linear`): per device, launches ended by the end of each time bucket minus launched
    GPU tasks started before the bucket never exceed ``queue_depth`` where a launch ends.
    ``qs`` (at least 2 x tasks long) holds the two bucket counters."""
    n = proc.shape[0]
    nb = max(1, min(n, 1 << 22) // (_QUEUE_TASKS_PER_BUCKET * max(n_dev, 1)))
    width = makespan // nb + 1
    if qs.shape[0] < 2 * n_dev * nb:  # more devices than tasks: nb is 1, the counters tiny
        qs = np.empty(2 * n_dev * nb, np.int64)
    lc = qs[: n_dev * nb]
    sc = qs[n_dev * nb : 2 * n_dev * nb]
    for b in range(2 * n_dev * nb):
        qs[b] = 0
    n_l = np.zeros(max(n_dev, 1), np.int64)  # launched GPU tasks per device
    for i in range(n):
        g = launch_dst[i]
        if g >= 0:
            lc[proc_dev[proc[g]] * nb + end[i] // width] += 1
        if launch_src[i] >= 0:
            d = proc_dev[proc[i]]
            sc[d * nb + start[i] // width] += 1
            n_l[d] += 1
    for d in range(n_dev):
        if n_l[d] <= queue_depth:
            continue
        cl = 0
        cs = 0
        for b in range(d * nb, (d + 1) * nb):
            cl += lc[b]
            if lc[b] > 0 and cl - cs > queue_depth:
                return False
            cs += sc[b]
    return True


@njit(cache=True)
def _run_range(  # noqa: ANN201, PLR0913
    i0,
    i1,
    ws,
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
    ``linear[i]`` says which one produced instance i."""
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
                proc[t0:t1],
                proc_ptr[p0 + g : p1 + g + 1],
                proc_list,
                proc_device[p0:p1],
                n_devices[g],
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


@njit(cache=True, parallel=True)
def _batch(n_chunks, ws, *args):  # noqa: ANN001, ANN002, ANN202
    """Instances split into ``n_chunks`` contiguous ranges, one per ``prange`` iteration, each with
    its slice of the working memory ``ws``. With ``n_chunks == 1`` it runs on the calling thread."""
    n_inst = args[0].shape[0]
    if n_chunks <= 1:
        _run_range(0, n_inst, ws, *args)
        return
    per = ws.shape[0] // n_chunks
    for c in prange(n_chunks):
        i0 = c * n_inst // n_chunks
        i1 = (c + 1) * n_inst // n_chunks
        _run_range(i0, i1, ws[c * per : (c + 1) * per], *args)


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
            g.proc,
            g.proc_ptr,
            g.proc_list,
            g.proc_device,
            g.n_devices,
            g.succ_ptr,
            g.succ_dst,
            g.indeg,
            g.launch_src,
            g.rt_mode,
            g.rt_arg,
            g.rt_lat_ns,
            g.coll,
            g.coll_size,
            g.dur_ns,
            g.delay_ns,
            g.dep_ptr,
            g.dep_src,
            g.dep_lat_ns,
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


def replay(
    graph: ReplayGraph,
    *,
    dur_ns: np.ndarray | None = None,
    delay_ns: np.ndarray | None = None,
    queue_depth: int = DEFAULT_QUEUE_DEPTH,
    check: bool = True,
    eager: bool = True,
) -> Schedule:
    """Replay one graph (optionally with other durations/delays) and return its schedule."""
    res = replay_batch(
        graph,
        dur_ns=None if dur_ns is None else np.asarray(dur_ns)[None, :],
        delay_ns=None if delay_ns is None else np.asarray(delay_ns)[None, :],
        queue_depth=queue_depth,
        parallel=False,
        check=check,
        eager=eager,
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
