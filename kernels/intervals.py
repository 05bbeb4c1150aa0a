"""Interval-union arithmetic and critical-path attribution over schedules, in numba.

Used by `lumos.explain`. Everything takes contiguous int64 arrays of nanoseconds and does no I/O.
`timeline(start, end, cls)` turns intervals of up to 8 classes into elementary segments with the
bit mask of the classes covering each; `cumulative` then gives the time spent in each mask before
any query point, so one sweep serves every step's breakdown and every SM-utilisation bin.
`critical_walk` follows the replay kernel's ``crit_src`` back from a step's last task (see the
function's docstring).
"""

from __future__ import annotations

import numpy as np

from kernels.jit_cache import cached_kernel


@cached_kernel
def timeline(start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elementary segments of the union of intervals per class (cls in 0..7).

    Returns ``bounds`` (sorted, distinct) and ``mask`` (same length): segment i spans
    ``[bounds[i], bounds[i + 1])`` with the bit mask of busy classes; the last mask is 0.
    Zero-length and reversed intervals are ignored.
    """
    n = start.shape[0]
    m = 0
    for i in range(n):
        if end[i] > start[i]:
            m += 1
    times = np.empty(2 * m, np.int64)
    delta = np.empty(2 * m, np.int64)
    ecls = np.empty(2 * m, np.int64)
    k = 0
    for i in range(n):
        if end[i] > start[i]:
            times[k] = start[i]
            delta[k] = 1
            ecls[k] = cls[i]
            times[k + 1] = end[i]
            delta[k + 1] = -1
            ecls[k + 1] = cls[i]
            k += 2
    order = np.argsort(times, kind="mergesort")
    counts = np.zeros(8, np.int64)
    bounds = np.empty(2 * m, np.int64)
    mask = np.empty(2 * m, np.int64)
    nb = 0
    j = 0
    while j < 2 * m:
        t = times[order[j]]
        while j < 2 * m and times[order[j]] == t:
            e = order[j]
            counts[ecls[e]] += delta[e]
            j += 1
        cur = 0
        for c in range(8):
            if counts[c] > 0:
                cur |= 1 << c
        if nb > 0 and mask[nb - 1] == cur:
            continue  # same state: extend the previous segment
        bounds[nb] = t
        mask[nb] = cur
        nb += 1
    return bounds[:nb].copy(), mask[:nb].copy()


@cached_kernel
def cumulative(
    bounds: np.ndarray, mask: np.ndarray, n_masks: int, points: np.ndarray
) -> np.ndarray:
    """``out[j, m]`` = time before ``points[j]`` covered by segments of mask ``m``."""
    nb = bounds.shape[0]
    prefix = np.zeros((nb + 1, n_masks), np.int64)
    for i in range(nb - 1):
        for c in range(n_masks):
            prefix[i + 1, c] = prefix[i, c]
        prefix[i + 1, mask[i]] += bounds[i + 1] - bounds[i]
    np_ = points.shape[0]
    out = np.zeros((np_, n_masks), np.int64)
    for j in range(np_):
        x = points[j]
        i = np.searchsorted(bounds, x, side="right") - 1
        if i < 0:
            continue
        for c in range(n_masks):
            out[j, c] = prefix[i, c]
        if i < nb - 1:
            out[j, mask[i]] += x - bounds[i]
    return out


@cached_kernel
def _walk(  # noqa: ANN202
    start, end, crit_src, last, ws, fill, out_task, out_lo, out_hi, out_src
):
    n = start.shape[0]
    t = last
    hi = end[t]
    k = 0
    guard = 0
    while t >= 0 and hi > ws and guard <= n:
        guard += 1
        s = crit_src[t]
        if s < 0 or s >= n:
            lo = ws  # bound by time 0 or by a task outside this graph: the rest is t's
            nxt = -1
        else:
            # bound by s's end, or (launch-queue back-pressure, a late event record) its start
            lo = end[s] if end[s] <= hi else start[s]
            nxt = s
        lo = max(min(lo, hi), ws)
        if fill:
            out_task[k] = t
            out_lo[k] = lo
            out_hi[k] = hi
            out_src[k] = s
        k += 1
        hi = lo
        t = nxt
    return k


@cached_kernel
def critical_walk(
    start: np.ndarray,
    end: np.ndarray,
    crit_src: np.ndarray,
    last: np.ndarray,
    window_start: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Critical paths of several windows of one schedule.

    For window w, walk from task ``last[w]`` along ``crit_src``. Node t (bound by s) covers
    ``[lo, hi]``: ``hi`` is where its successor on the path handed over (``end[last]`` for the
    first node) and ``lo`` is ``end[s]``, or ``start[s]`` when s bound t by starting (the GPU
    task a back-pressured launch waited for, a late event record). The pieces are contiguous and
    clipped at ``window_start[w]``; the walk stops there, at time 0 (crit_src -1) or at a source
    outside the graph (the identity replay's anchor, another rank). Within a piece, the part
    after ``start[t]`` is t's execution and the part before it is the gap (delay, latency).

    Returns ``ptr`` (CSR over windows) and per node ``task``, ``lo``, ``hi``, ``src``.
    """
    nw = last.shape[0]
    ptr = np.zeros(nw + 1, np.int64)
    dummy = np.empty(0, np.int64)
    for w in range(nw):
        k = 0
        if last[w] >= 0:
            k = _walk(
                start, end, crit_src, last[w], window_start[w], False, dummy, dummy, dummy, dummy
            )
        ptr[w + 1] = ptr[w] + k
    total = ptr[nw]
    task = np.empty(total, np.int64)
    lo = np.empty(total, np.int64)
    hi = np.empty(total, np.int64)
    src = np.empty(total, np.int64)
    for w in range(nw):
        if last[w] >= 0:
            a = ptr[w]
            _walk(
                start,
                end,
                crit_src,
                last[w],
                window_start[w],
                True,
                task[a:],
                lo[a:],
                hi[a:],
                src[a:],
            )
    return ptr, task, lo, hi, src
