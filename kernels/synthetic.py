"""Synthetic training-like graphs for benchmarks and large-scale tests (plain numpy, seeded).

Each rank runs a program of top-level CPU ops on a few threads (forward on thread 0, backward on
thread 1 after a cross-thread edge, phases alternating); most ops launch one kernel on a compute
stream, some launch a collective on the communication stream, a few synchronise on a stream or the
device, and a few record an event on one stream and make another stream wait for it. Ranks are
joined by their collectives. Durations and gaps are drawn from simple distributions: this is a
load generator with a realistic mix of dependency kinds, not a model of any real job.
"""

from __future__ import annotations

import numpy as np

from kernels.graph import Kind, ReplayGraph, Rt, csr_from_edges


def training_like_graph(
    n_target: int,
    *,
    seed: int = 0,
    ranks: int = 1,
    threads: int = 2,
    streams: int = 4,
    phase_ops: int = 200,
    source: str = "synthetic",
) -> ReplayGraph:
    """A graph of about ``n_target`` tasks (all ranks together); ids are topologically ordered."""
    rng = np.random.default_rng(seed)
    procs_per_rank = threads + streams
    proc_device = np.array(
        [
            -1 if p % procs_per_rank < threads else p // procs_per_rank
            for p in range(ranks * procs_per_rank)
        ],
        np.int64,
    )
    per_rank = max(1, n_target // ranks)
    # ~2.3 tasks per op on average (op + launch + GPU task, plus occasional syncs/events)
    n_ops = max(1, int(per_rank / 2.3))
    draws = rng.random((ranks, n_ops, 4))
    op_dur = rng.integers(2_000, 30_000, (ranks, n_ops))
    op_gap = rng.integers(0, 3_000, (ranks, n_ops))
    k_dur = rng.integers(5_000, 120_000, (ranks, n_ops))
    comm_every = 37

    proc: list[int] = []
    dur: list[int] = []
    delay: list[int] = []
    kind: list[int] = []
    lsrc: list[int] = []
    mode: list[int] = []
    arg: list[int] = []
    rlat: list[int] = []
    coll: list[int] = []
    esrc: list[int] = []
    edst: list[int] = []
    elat: list[int] = []

    def add(
        p: int, d: int, k: Kind, gap: int = 0, launch: int = -1, m: int = 0, a: int = -1
    ) -> int:
        proc.append(p)
        dur.append(d)
        delay.append(gap)
        kind.append(int(k))
        lsrc.append(launch)
        mode.append(m)
        arg.append(a)
        rlat.append(1_000 if m in (Rt.STREAM, Rt.DEVICE, Rt.EVENT) else 0)
        coll.append(-1)
        return len(proc) - 1

    def edge(s: int, d: int, lat: int) -> None:
        esrc.append(s)
        edst.append(d)
        elat.append(lat)

    for r in range(ranks):
        base = r * procs_per_rank
        comm = base + threads + streams - 1
        last_on_thread = [-1] * threads
        n_coll = 0
        for i in range(n_ops):
            th = base + (i // phase_ops) % threads
            ti = th - base
            u = draws[r, i]
            op = add(th, int(op_dur[r, i]), Kind.CPU_OP, gap=int(op_gap[r, i]))
            prev_other = last_on_thread[(ti + 1) % threads]
            if i % phase_ops == 0 and prev_other >= 0:
                edge(prev_other, op, 0)  # the backward thread waits for the forward's last op
            last_on_thread[ti] = op
            if i % comm_every == comm_every - 1:
                ln = add(th, 3_000, Kind.LAUNCH)
                g = add(comm, int(k_dur[r, i]) // 2, Kind.COLLECTIVE, gap=1_000, launch=ln)
                coll[g] = n_coll
                n_coll += 1
                edge(ln, g, 4_000)
                last_on_thread[ti] = ln
            elif u[0] < 0.8:
                st = base + threads + (0 if u[1] < 0.7 else int(u[2] * (streams - 1)))
                ln = add(th, 4_000, Kind.LAUNCH)
                g = add(st, int(k_dur[r, i]), Kind.GPU_KERNEL, gap=1_500, launch=ln)
                edge(ln, g, 5_000)
                last_on_thread[ti] = ln
            if u[3] < 0.02:
                st = base + threads + int(u[1] * streams)
                last_on_thread[ti] = add(th, 2_000, Kind.SYNC, m=Rt.STREAM, a=st)
            elif u[3] < 0.025:
                last_on_thread[ti] = add(th, 2_000, Kind.SYNC, m=Rt.DEVICE, a=r)
            elif u[3] < 0.06 and streams > 1:
                a_st = base + threads + int(u[2] * (streams - 1))
                b_st = base + threads + (a_st - base - threads + 1) % streams
                rec = add(th, 1_500, Kind.EVENT_RECORD, m=Rt.RECORD, a=a_st)
                wl = add(th, 1_500, Kind.LAUNCH)
                wg = add(b_st, 0, Kind.GPU_WAIT, launch=wl, m=Rt.EVENT, a=rec)
                edge(wl, wg, 2_000)
                last_on_thread[ti] = wl

    n = len(proc)
    ptr, src, lat = csr_from_edges(n, np.array(esrc), np.array(edst), np.array(elat))
    # collectives: the k-th collective of every rank is one collective
    coll_a = np.array(coll, np.int64)
    if ranks > 1:
        per = [coll_a[np.array(proc) // procs_per_rank == r] for r in range(ranks)]
        common = min(int((c >= 0).sum()) for c in per)
        coll_a[coll_a >= common] = -1
    return ReplayGraph.build(
        proc=np.array(proc),
        dur_ns=np.array(dur),
        delay_ns=np.array(delay),
        kind=np.array(kind),
        launch_src=np.array(lsrc),
        rt_mode=np.array(mode),
        rt_arg=np.array(arg),
        rt_lat_ns=np.array(rlat),
        coll=coll_a,
        dep_ptr=ptr,
        dep_src=src,
        dep_lat_ns=lat,
        proc_device=proc_device,
        source=source,
    )
