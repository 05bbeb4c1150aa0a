"""Test oracle: a frozen copy of `kernels/replay.py` as it was before the linear pass (the
event-driven list scheduler only). `tests/test_replay_kernel_linear.py` compares every schedule of
the current kernel with this one, bit for bit. Do not edit it to make a test pass.

Replay of execution graphs: list scheduling with fixed and runtime dependencies, in numba.

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
* Launch-queue back-pressure: each device has a launch queue of ``Q =
  queue_depth`` entries (0 disables it) holding its GPU tasks that are launched but not started
  (a task is launched when its launch task completes; launch-less GPU tasks are not counted). A
  launch whose end (by every other rule) comes at ``e`` completes at ``e`` if fewer than Q tasks of
  its device are outstanding then; otherwise it is held, and held launches take the slots freed
  by the device's GPU starts in the order they were held (by ``e``, then processor id): a held
  launch ends at the start that freed its slot, and that start is its bound (`Crit.QUEUE`).
  Equivalently, the launches of a device sorted by ``(e, processor)``: the k-th (from 0) ends at
  ``max(e, start of the device's (k-Q)-th launched GPU task to start)``. Counting outstanding
  tasks, not launch numbers, is what the hardware does: GPU tasks need not start in launch order
  (an NCCL kernel waits on its stream while later launches on other streams run past it), and a
  launch never waits for a task queued behind its own (stream order is the graph's, launches run
  in simulated order). The decision is a heap event at ``e`` (processor state 4), so it sees every
  GPU start and every other launch up to ``e``. A held launch is not enqueued on its stream.
* Collectives: a participant arrives at its start; when the last participant arrives at ``T``,
  every participant ends at ``T + its dur``.
* Ties: at equal start times, tasks that read the stream state (STREAM, DEVICE, RECORD) start after
  all other tasks, then lower processor id first. So a launch that ends exactly when a sync starts
  counts as enqueued if it was processed first; a launch still held by back-pressure never does.
* A graph whose tasks cannot all run (a dependency cycle, a collective with a participant that
  never arrives) is reported with status DEADLOCK; unfinished tasks keep ``end = -1``.

Outputs per task: ``start_ns``, ``end_ns``, ``crit_src``/``crit_kind`` (what bound the task's end:
`Crit` code and the task responsible: the processor predecessor, the fixed predecessor, the
runtime target, the GPU task whose start freed its launch-queue slot, or the last collective
arrival; following ``crit_src`` back from the last task gives the critical path), and ``rt_src``
(the resolved runtime target of STREAM/DEVICE/EVENT tasks, the captured task of RECORD tasks).
Per instance: makespan (latest end) and status.

Batches: instances name a graph of a `GraphBatch` and where their durations and delays start in a
pool array, so thousands of sweep variants share one structure without copies (`replay_sweep`
takes a 2-D ``dur[config, task]``). Every instance runs the same single-instance code, in a
``prange`` loop or a plain one: the results are identical either way.

Speed (see `bench/replay.py`): one compiled kernel serves serial and parallel calls; instances are
split into one contiguous range per thread, each reusing its working memory, and that memory is
kept from call to call (fresh pages cost a fault each on first touch). A task's working state is
one 32-byte row, and plain CPU tasks skip the heap (`_replay_one`'s ``eager``), as does any event
that the heap would hand straight back (nothing else pending and its key below the heap's top:
most launch-queue decisions, many GPU starts); the heap itself is written out in the loop, as
numba's inlined helpers taking arrays cost reference counting per call.
"""

from __future__ import annotations

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
):
    """Replay instances i0..i1-1 with one set of working arrays, reused from one to the next
    (fresh arrays per instance cost page faults that, in sweeps, rival the replay itself)."""
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
    )
    _give_back(ws)
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
