"""A pure-Python replay of the estimator's graphs, for single estimates (no numba start-up).

The graphs `lumos.estimate.transforms` builds have CPU threads only, fixed dependencies with
latencies and per-task delays: no launches, runtime dependencies or collectives. For them the
replay rule of `kernels.replay` reduces to ``start = max(processor free, max(pred end + lat)) +
delay``, each processor running its tasks in id order. Importing numba and loading the cached
kernel costs more than the whole estimate (docs/estimate.md, "Module notes"); sweeps use the numba
kernel
(`kernels.replay.replay_sweep`), and the tests check that both give the same schedule.
"""

from __future__ import annotations

import numpy as np

from kernels.graph import ReplayGraph


class ChainError(ValueError):
    """The graph uses features this replay does not model, or has a cycle."""


def chain_replay(g: ReplayGraph, dur_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) of every task of `g` with durations `dur_ns`."""
    if (g.flags != 0).any() or (g.proc_device >= 0).any():
        raise ChainError(f"{g.source}: launches, runtime waits, collectives or GPU streams")
    n = g.n_tasks
    dur = [int(x) for x in dur_ns]
    delay = g.delay_ns.tolist()
    ptr = g.dep_ptr.tolist()
    src = g.dep_src.tolist()
    lat = g.dep_lat_ns.tolist()
    queues = [g.proc_list[g.proc_ptr[p] : g.proc_ptr[p + 1]].tolist() for p in range(g.n_procs)]
    pos = [0] * g.n_procs
    free = [0] * g.n_procs
    end = [-1] * n
    start = [0] * n
    left = n
    while left:
        progressed = False
        for p, q in enumerate(queues):
            i = pos[p]
            while i < len(q):
                t = q[i]
                ready = free[p]
                ok = True
                for e in range(ptr[t], ptr[t + 1]):
                    s = src[e]
                    if end[s] < 0:
                        ok = False
                        break
                    ready = max(ready, end[s] + lat[e])
                if not ok:
                    break
                start[t] = ready + delay[t]
                end[t] = start[t] + dur[t]
                free[p] = end[t]
                i += 1
                left -= 1
                progressed = True
            pos[p] = i
        if not progressed:
            raise ChainError(f"{g.source}: dependency cycle, {left} tasks cannot start")
    return np.array(start, np.int64), np.array(end, np.int64)
