"""The event-driven replay of one graph (`_replay_one`): the reference every schedule matches.

Processors whose head task is ready sit in a heap keyed by its start time; runtime dependencies
(stream, device and event waits), launch-queue back-pressure and collectives are resolved at the
simulated moment they happen. A task's working state is one row of `_TS_WIDTH` int64 words. The
rules and tie breaks: docs/replay.md, "Module notes".
"""

from __future__ import annotations

import numpy as np

from kernels.jit_cache import cached_kernel
from kernels.replay_codes import (
    _RT_DEVICE,
    _RT_EVENT,
    _RT_RECORD,
    _RT_STREAM,
    C_COLL,
    C_EDGE,
    C_PROC,
    C_QUEUE,
    C_RUNTIME,
    STATUS_DEADLOCK,
    STATUS_OK,
)

# A task's working row in `_replay_one`: start, end, crit_src and one word of bit fields (state in
# bits 0-1, crit_kind in 2-4, "has waiters" in 5, "launch's queue slot settled" in 6, remaining
# fixed predecessors from bit 8 on).
_TS_WIDTH = 4
_WAITERS = 32
_QDONE = 64  # a launch's queue slot is settled (its row holds its final end and bound)
_REM_SHIFT = 8
_REM_ONE = 1 << _REM_SHIFT


@cached_kernel(inline="always")
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


@cached_kernel
def _park(ts, wait_head, wait_next, w, g):  # noqa: ANN001, ANN202
    """Task `w` waits for task `g` to end: push it on `g`'s list of waiters (rare path)."""
    wait_next[w] = wait_head[g] if ts[g * _TS_WIDTH + 3] & _WAITERS else -1
    wait_head[g] = w
    ts[g * _TS_WIDTH + 3] |= _WAITERS


@cached_kernel
def _replay_one(  # noqa: ANN201, PLR0912, PLR0913, PLR0915
    graph,
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

    ``graph`` is a `GraphArrays`: its ``proc_ptr`` and ``succ_ptr`` hold absolute positions into ``proc_list`` / ``succ_*`` (which may
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
    proc, proc_ptr, proc_list, proc_dev, n_dev = (
        graph.proc,
        graph.proc_ptr,
        graph.proc_list,
        graph.proc_dev,
        graph.n_dev,
    )
    succ_ptr, succ_dst, succ_lat, indeg = (
        graph.succ_ptr,
        graph.succ_dst,
        graph.succ_lat,
        graph.indeg,
    )
    launch_src, launch_dst, flags = graph.launch_src, graph.launch_dst, graph.flags
    rt_mode, rt_arg, rt_lat = graph.rt_mode, graph.rt_arg, graph.rt_lat
    coll, coll_size = graph.coll, graph.coll_size
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
