"""Chain compression of an edited graph: fewer, longer tasks with exactly the same makespan.

A run of consecutive tasks on one processor where no task but the first has a predecessor and no
task but the last has a successor behaves like one task; `compress` merges every such run into
one task (delay of the first, the later delays folded into the duration) and keeps the edges
between runs, so the estimator's graphs shrink by about 100x with the same makespan to the
nanosecond (durations are integer-valued float64 sums, hence exact). Only CPU-thread tasks
without launches, runtime waits or collectives are supported; other graphs are refused.
Details (units, signatures): docs/estimate.md, "Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.graph import ReplayGraph, csr_from_edges
from lumos.estimate.transforms import EditedGraph, to_ns


class CompressError(ValueError):
    """The graph has tasks whose identity the replay needs (launches, waits, collectives)."""


@dataclass(frozen=True, eq=False)
class CompressedGraph:
    """An edited graph with its runs merged, and how to fill the runs' durations."""

    graph: ReplayGraph  # one task per run
    run_of: np.ndarray  # (n,) run of every task of the edited graph
    unit_tpl: np.ndarray  # (U,) template op of each duration unit (-1: a new task)
    unit_cls: np.ndarray  # (U,) its duration class
    unit_delay: np.ndarray  # (U,) its tasks' idle gap before them (what `gscale` lengthens)
    sig_ptr: np.ndarray  # (S+1,) CSR over signatures into sig_unit / sig_count
    sig_unit: np.ndarray
    sig_count: np.ndarray  # float64: multiplies float durations in the sums
    run_sig: np.ndarray  # (G,) signature of every run
    extra_ns: np.ndarray  # (G,) delays of the run's later tasks, folded into its duration

    @property
    def n_tasks(self) -> int:
        return self.graph.n_tasks

    def durations(
        self,
        fixed: np.ndarray,
        var: np.ndarray,
        mult: np.ndarray,
        add: np.ndarray,
        fscale: np.ndarray | None = None,
        gscale: np.ndarray | None = None,
    ) -> np.ndarray:
        """(C, runs) int64: the sum over each run of `transforms.durations` of its tasks."""
        t = self.unit_tpl
        has = t >= 0
        f = np.where(has, fixed[np.maximum(t, 0)], 0).astype(np.float64)
        v = np.where(has, var[np.maximum(t, 0)], 0).astype(np.float64)
        k = self.unit_cls
        fs = 1.0 if fscale is None else fscale[:, k]
        # the same float expression and rounding as transforms.durations, task by task
        out = f[None, :] * fs + v[None, :] * mult[:, k] + add[:, k]
        if gscale is not None:
            out = out + self.unit_delay.astype(np.float64)[None, :] * gscale[:, None]
        unit = np.maximum(np.rint(out), 0)
        terms = unit[:, self.sig_unit] * self.sig_count[None, :]
        sig = np.add.reduceat(terms, self.sig_ptr[:-1], axis=1)
        out = sig[:, self.run_sig] + self.extra_ns[None, :]
        return to_ns(out)


def _runs(g: ReplayGraph) -> np.ndarray:
    """Run id of every task (runs numbered by their first task id, so per-processor order holds)."""
    n = g.n_tasks
    if (g.flags != 0).any() or (g.proc_device >= 0).any():
        raise CompressError(
            f"{g.source}: launches, runtime waits, collectives or GPU streams cannot be merged"
        )
    order = g.proc_list  # tasks by processor, ascending id within each
    starts = np.zeros(n, bool)
    starts[g.proc_list[g.proc_ptr[:-1][np.diff(g.proc_ptr) > 0]]] = True  # first of a queue
    starts |= g.indeg > 0  # waits for another task
    has_succ = np.diff(g.succ_ptr) > 0
    nxt = np.zeros(n, bool)  # task after one with a successor (within one queue)
    nxt[order[1:]] = has_succ[order[:-1]]
    starts |= nxt
    # number runs in id order (a queue's runs then come in increasing id order)
    run_first = np.flatnonzero(starts)
    head = np.empty(n, np.int64)  # for each task in queue order, the first task of its run
    pos_starts = starts[order]
    idx = np.where(pos_starts, np.arange(n), 0)
    np.maximum.accumulate(idx, out=idx)
    head[order] = order[idx]
    return np.searchsorted(run_first, head)


def compress(eg: EditedGraph) -> CompressedGraph:
    """Merge the runs of `eg`'s graph (exact makespan for any durations filled by class)."""
    g = eg.graph
    run_of = _runs(g)
    n_runs = int(run_of.max()) + 1 if run_of.size else 0
    first = np.full(n_runs, g.n_tasks, np.int64)
    np.minimum.at(first, run_of, np.arange(g.n_tasks, dtype=np.int64))
    extra = np.bincount(run_of, weights=g.delay_ns, minlength=n_runs) - g.delay_ns[first]

    # edges between runs (a run's only predecessors are its first task's; only its last task
    # has successors), latencies kept
    dst_task = np.repeat(np.arange(g.n_tasks, dtype=np.int64), np.diff(g.dep_ptr))
    ptr, src, lat = csr_from_edges(
        n_runs, run_of[g.dep_src], run_of[dst_task], g.dep_lat_ns.astype(np.int64)
    )
    graph = ReplayGraph.build(
        proc=g.proc[first],
        dur_ns=np.zeros(n_runs, np.int64),
        proc_device=g.proc_device,
        dep_ptr=ptr,
        dep_src=src,
        dep_lat_ns=lat,
        delay_ns=g.delay_ns[first],
        source=f"{g.source} (runs merged)",
    )

    # units: (template op, class, delay) triples: tasks alike in all three always get the same
    # duration, whatever the configuration's idle-gap scale
    n_cls = int(eg.cls.max()) + 1 if eg.cls.size else 1
    delays, delay_of = np.unique(g.delay_ns, return_inverse=True)
    key = ((eg.tpl_idx + 1) * n_cls + eg.cls) * delays.size + delay_of.reshape(-1)
    ukeys, unit_of = np.unique(key, return_inverse=True)
    unit_of = unit_of.reshape(-1)
    ukey, unit_delay = ukeys // delays.size, delays[ukeys % delays.size]
    n_units = ukey.size
    # signatures: multisets of units ((run, unit) pairs counted)
    pair, count = np.unique(run_of * n_units + unit_of, return_counts=True)
    pair_run, pair_unit = pair // n_units, pair % n_units
    bounds = np.searchsorted(pair_run, np.arange(n_runs + 1))
    sig_index: dict[bytes, int] = {}
    run_sig = np.empty(n_runs, np.int64)
    sig_unit: list[np.ndarray] = []
    sig_count: list[np.ndarray] = []
    for r in range(n_runs):
        a, b = bounds[r], bounds[r + 1]
        multiset = pair_unit[a:b].tobytes() + b"|" + count[a:b].tobytes()
        s = sig_index.get(multiset)
        if s is None:
            s = sig_index[multiset] = len(sig_unit)
            sig_unit.append(pair_unit[a:b])
            sig_count.append(count[a:b])
        run_sig[r] = s
    lengths = np.array([u.size for u in sig_unit], np.int64)
    return CompressedGraph(
        graph=graph,
        run_of=run_of,
        unit_tpl=ukey // n_cls - 1,
        unit_cls=ukey % n_cls,
        unit_delay=unit_delay.astype(np.int64),
        sig_ptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        sig_unit=np.concatenate(sig_unit).astype(np.int64),
        sig_count=np.concatenate(sig_count).astype(np.float64),
        run_sig=run_sig,
        extra_ns=extra.astype(np.int64),
    )
