"""The linear replay pass: `_replay_one`'s schedule in one sweep over a precomputed order.

`_linear_order` builds, once per graph, a processing order in which every task's inputs are
final; `_replay_linear` then computes start = max(processor free, max(pred end + latency)) +
delay task by task, resolves stream scans (`_lin_scan`), collectives and back-pressure
(`_queue_never_full`) from final values or checks them afterwards, and returns
`STATUS_FALLBACK` when it cannot prove the simulation's schedule. docs/replay.md, "Kernel:
linear pass".
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
    C_NONE,
    C_PROC,
    C_RUNTIME,
    STATUS_OK,
)

_SCAN_PER_READER_MAX = 512  # processors up to which stream scans keep a prefix per reader
STATUS_FALLBACK = 2  # internal: the linear pass could not prove its schedule; run the simulation


@cached_kernel(inline="always")
def _reads_stream(m):  # noqa: ANN001, ANN202
    return m == _RT_STREAM or m == _RT_DEVICE or m == _RT_RECORD


@cached_kernel
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


@cached_kernel
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


@cached_kernel
def _linear_order(  # noqa: ANN201, PLR0912, PLR0913, PLR0915
    graph,
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
    ``graph`` is a `GraphArrays`.
    """
    proc, proc_ptr, proc_list, proc_dev, n_dev = (
        graph.proc,
        graph.proc_ptr,
        graph.proc_list,
        graph.proc_dev,
        graph.n_dev,
    )
    succ_ptr, succ_dst, indeg, launch_src = (
        graph.succ_ptr,
        graph.succ_dst,
        graph.indeg,
        graph.launch_src,
    )
    rt_mode, rt_arg, rt_lat = graph.rt_mode, graph.rt_arg, graph.rt_lat
    coll, coll_size = graph.coll, graph.coll_size
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


@cached_kernel(inline="always")
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


@cached_kernel
def _replay_linear(  # noqa: ANN201, PLR0912, PLR0913, PLR0915
    order,
    dep_ptr,
    dep_src,
    dep_lat,
    graph,
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
    ``graph`` is a `GraphArrays` (its successor CSR unused); ``dep_ptr`` holds absolute positions
    into ``dep_src``; ``asm`` (>= 2n) and ``qs`` (>= 2n) are
    scratch, from the caller's reused working memory (the queue check's counters were fresh
    arrays, whose page faults cost a fifth of a replay of a 1.2M-task graph). Without
    ``keep``, ``crit_src``/``crit_kind`` are not written and the others are scratch of length n.
    """
    proc, proc_ptr, proc_list, proc_dev, n_dev = (
        graph.proc,
        graph.proc_ptr,
        graph.proc_list,
        graph.proc_dev,
        graph.n_dev,
    )
    launch_src, launch_dst, flags = graph.launch_src, graph.launch_dst, graph.flags
    rt_mode, rt_arg, rt_lat = graph.rt_mode, graph.rt_arg, graph.rt_lat
    coll, coll_size = graph.coll, graph.coll_size
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


@cached_kernel
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
