"""Multi-rank replay: every rank's model graph in one kernel instance, joined by collectives.

Each rank's graph is its single-rank ``model`` graph (`lumos.replay.build`). They are stacked
into one `ReplayGraph` (task, processor and device ids shifted per rank; runtime-dependency
arguments, launch sources and edges renumbered with them), and the collective kernels matched
across ranks (`lumos.replay.collectives.collective_arrays`) get a shared collective id: a
participant arrives when it starts, the transfer begins when the last one has arrived, and each
ends at that moment plus its *transfer* time (its traced duration minus its wait for peers). A
collective whose participants are not all in the job keeps its traced duration and joins no one.

Clocks: task times are relative to each rank's origin (its first traced event). The ranks start
apart by their origins on a common clock, `origin - offset` with the clock offsets recovered from
the collectives' ends, so each rank's root tasks (first on their processor, no predecessor) are
delayed by that shift. Everything after the roots is the model's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kernels.graph import ReplayGraph, Rt
from lumos.replay.build import build_graph
from lumos.replay.collectives import collective_arrays
from lumos.replay.constants import DeviceConstants

MODE = "multirank"


@dataclass(frozen=True)
class MultiRankGraph:
    """The stacked graph and, per task, its rank and its task id within that rank."""

    graph: ReplayGraph
    rank: np.ndarray
    local_task: np.ndarray
    n_collectives: int


def _rank_shift(tasks: pa.Table, collectives: pa.Table) -> dict[int, int]:
    """Start of each rank on the common clock, relative to the earliest rank (ns, >= 0)."""
    rank = tasks.column("rank").to_numpy()
    origin = tasks.column("origin_ns").to_numpy()
    offsets: dict[int, int] = {}
    if collectives.num_rows:
        for r, off in zip(
            collectives.column("rank").to_pylist(),
            collectives.column("offset_ns").to_pylist(),
            strict=True,
        ):
            offsets.setdefault(int(r), int(off))
    start = {}
    for r in np.unique(rank):
        o = int(origin[np.flatnonzero(rank == r)[0]])
        start[int(r)] = o - offsets.get(int(r), 0)
    first = min(start.values())
    return {r: s - first for r, s in start.items()}


def build_multirank(
    tasks: pa.Table,
    deps: pa.Table,
    consts: list[DeviceConstants],
    collectives: pa.Table,
    *,
    drop: Collection[str] = (),
    source: str = "job",
) -> MultiRankGraph:
    """Stack the model graphs of every rank in ``tasks`` (sorted by rank, task) into one graph."""
    t_rank = tasks.column("rank").to_numpy()
    d_rank = deps.column("rank").to_numpy()
    ranks = [int(r) for r in np.unique(t_rank)]
    shift = _rank_shift(tasks, collectives)
    parts: list[ReplayGraph] = []
    for r in ranks:
        t = tasks.filter(pa.array(t_rank == r))
        d = deps.filter(pa.array(d_rank == r))
        c = [x for x in consts if x.rank == r]
        parts.append(build_graph(t, d, c, mode="model", drop=drop, source=f"{source} rank {r}"))

    n_off = np.cumsum([0] + [g.n_tasks for g in parts])
    p_off = np.cumsum([0] + [g.n_procs for g in parts])
    d_off = np.cumsum([0] + [g.n_devices for g in parts])
    cols: dict[str, list[np.ndarray]] = {
        k: []
        for k in (
            "proc",
            "dur",
            "delay",
            "kind",
            "launch",
            "mode",
            "arg",
            "rlat",
            "ptr",
            "src",
            "lat",
            "pdev",
            "rank",
            "local",
        )
    }
    m_off = np.cumsum([0] + [g.dep_src.shape[0] for g in parts])
    for i, (r, g) in enumerate(zip(ranks, parts, strict=True)):
        n, po, do = int(n_off[i]), int(p_off[i]), int(d_off[i])
        arg = g.rt_arg.copy()
        on_proc = np.isin(g.rt_mode, [Rt.STREAM, Rt.RECORD]) & (arg >= 0)
        arg[on_proc] += po
        on_dev = (g.rt_mode == Rt.DEVICE) & (arg >= 0)
        arg[on_dev] += do
        on_task = (g.rt_mode == Rt.EVENT) & (arg >= 0)
        arg[on_task] += n
        delay = g.delay_ns.copy()
        # roots: first task of a processor with no fixed predecessor start at the rank's shift
        first = g.proc_list[g.proc_ptr[:-1][np.diff(g.proc_ptr) > 0]]
        roots = first[g.indeg[first] == 0]
        delay[roots] += shift[r]
        cols["proc"].append(g.proc + po)
        cols["dur"].append(g.dur_ns)
        cols["delay"].append(delay)
        cols["kind"].append(g.kind.astype(np.int64))
        cols["launch"].append(np.where(g.launch_src >= 0, g.launch_src + n, -1))
        cols["mode"].append(g.rt_mode)
        cols["arg"].append(arg)
        cols["rlat"].append(g.rt_lat_ns)
        cols["ptr"].append((g.dep_ptr[1:] if i else g.dep_ptr) + int(m_off[i]))
        cols["src"].append(g.dep_src + n)
        cols["lat"].append(g.dep_lat_ns)
        cols["pdev"].append(np.where(g.proc_device >= 0, g.proc_device + do, -1))
        cols["rank"].append(np.full(g.n_tasks, r, np.int64))
        cols["local"].append(np.arange(g.n_tasks, dtype=np.int64))
    cat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}

    is_gpu = np.asarray(tasks.column("is_gpu").to_numpy(zero_copy_only=False), bool)
    event_idx = np.asarray(tasks.column("event_idx").to_numpy(zero_copy_only=False), np.int64)
    ca = collective_arrays(collectives, np.where(is_gpu, cat["rank"], -1), event_idx)
    coll = ca.coll
    dur = cat["dur"].copy()
    join = coll >= 0
    dur[join] = np.maximum(ca.dur_ns[join], 0)
    graph = ReplayGraph.build(
        proc=cat["proc"],
        dur_ns=dur,
        proc_device=cat["pdev"],
        dep_ptr=cat["ptr"],
        dep_src=cat["src"],
        dep_lat_ns=cat["lat"],
        delay_ns=cat["delay"],
        kind=cat["kind"],
        launch_src=cat["launch"],
        rt_mode=cat["mode"],
        rt_arg=cat["arg"],
        rt_lat_ns=cat["rlat"],
        coll=coll,
        source=f"{source} ({MODE})",
    )
    return MultiRankGraph(graph, cat["rank"], cat["local"], ca.n_collectives)
