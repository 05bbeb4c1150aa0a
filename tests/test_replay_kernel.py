"""The replay kernel (kernels/replay.py): hand-computed schedules and properties on random graphs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kernels.graph import GraphBatch, GraphError, Kind, ReplayGraph, Rt, csr_from_edges
from kernels.replay import Crit, ReplayError, replay, replay_batch, replay_sweep
from kernels.synthetic import training_like_graph

K = Kind


def build(tasks: list[dict], proc_device: list[int], edges=(), **kw) -> ReplayGraph:  # noqa: ANN001
    """tasks: dicts with p, d and optional delay/kind/launch/rt/arg/rlat/coll; edges: (s, d, lat)."""
    n = len(tasks)
    e = np.array(edges, np.int64).reshape(-1, 3)
    ptr, src, lat = csr_from_edges(n, e[:, 0], e[:, 1], e[:, 2])
    return ReplayGraph.build(
        proc=[t["p"] for t in tasks],
        dur_ns=[t["d"] for t in tasks],
        delay_ns=[t.get("delay", 0) for t in tasks],
        kind=[
            int(t.get("kind", K.GPU_KERNEL if proc_device[t["p"]] >= 0 else K.CPU_OP))
            for t in tasks
        ],
        launch_src=[t.get("launch", -1) for t in tasks],
        rt_mode=[int(t.get("rt", 0)) for t in tasks],
        rt_arg=[t.get("arg", -1) for t in tasks],
        rt_lat_ns=[t.get("rlat", 0) for t in tasks],
        coll=[t.get("coll", -1) for t in tasks],
        dep_ptr=ptr,
        dep_src=src,
        dep_lat_ns=lat,
        proc_device=proc_device,
        **kw,
    )


def sched(g: ReplayGraph, **kw) -> tuple[list[int], list[int]]:  # noqa: ANN003
    s = replay(g, **kw)
    return s.start_ns.tolist(), s.end_ns.tolist()


# ---------------------------------------------------------------- hand-checkable graphs


def test_cpu_chain_keeps_gaps() -> None:
    g = build([{"p": 0, "d": 10}, {"p": 0, "d": 5, "delay": 3}, {"p": 0, "d": 7, "delay": 2}], [-1])
    assert sched(g) == ([0, 13, 20], [10, 18, 27])


def test_inter_thread_edge_with_latency() -> None:
    # thread 1's op waits for thread 0's op (end 10) + 4, then its gap of 1
    g = build([{"p": 0, "d": 10}, {"p": 1, "d": 5, "delay": 1}], [-1, -1], edges=[(0, 1, 4)])
    s = replay(g)
    assert (s.start_ns.tolist(), s.end_ns.tolist()) == ([0, 15], [10, 20])
    assert s.crit_kind[1] == Crit.EDGE and s.crit_src[1] == 0


def test_launch_latency() -> None:
    g = build(
        [{"p": 0, "d": 4, "kind": K.LAUNCH}, {"p": 1, "d": 10, "launch": 0}],
        [-1, 0],
        edges=[(0, 1, 6)],
    )
    assert sched(g) == ([0, 10], [4, 20])


def test_stream_order_with_inter_op_gap() -> None:
    tasks = [
        {"p": 0, "d": 2, "kind": K.LAUNCH},
        {"p": 0, "d": 2, "kind": K.LAUNCH},
        {"p": 1, "d": 10, "delay": 2, "launch": 0},
        {"p": 1, "d": 5, "delay": 2, "launch": 1},
    ]
    g = build(tasks, [-1, 0], edges=[(0, 2, 1), (1, 3, 1)])
    # K1: max(0, 2+1)+2 = 5..15; K2: max(15, 4+1)+2 = 17..22
    s = replay(g)
    assert (s.start_ns.tolist(), s.end_ns.tolist()) == ([0, 2, 5, 17], [2, 4, 15, 22])
    assert s.crit_kind[3] == Crit.PROC and s.crit_src[3] == 2


def _two_thread_stream() -> list[dict]:
    # thread 0: launch L1 (0-2) of K1, sync on the stream (issued at 2), op after it.
    # thread 1: op (0-5), launch L2 (5-7) of K2 on the same stream, then a second sync.
    return [
        {"p": 0, "d": 2, "kind": K.LAUNCH},  # 0 L1
        {"p": 0, "d": 1, "kind": K.SYNC, "rt": Rt.STREAM, "arg": 2, "rlat": 2},  # 1 S1
        {"p": 0, "d": 1},  # 2 X
        {"p": 1, "d": 5},  # 3 Y
        {"p": 1, "d": 2, "kind": K.LAUNCH},  # 4 L2
        {"p": 1, "d": 1, "kind": K.SYNC, "rt": Rt.STREAM, "arg": 2, "rlat": 2},  # 5 S2
        {"p": 2, "d": 10, "launch": 0},  # 6 K1
        {"p": 2, "d": 10, "launch": 4},  # 7 K2
    ]


def test_stream_sync_waits_for_what_is_enqueued_at_its_issue() -> None:
    g = build(_two_thread_stream(), [-1, -1, 0], edges=[(0, 6, 1), (4, 7, 1)])
    s = replay(g)
    # K1 3..13; S1 issued at 2 sees only K1: ends 13+2 = 15; X 15..16.
    # K2 enqueued at 7, starts after K1: 13..23; S2 issued at 7 sees K2: ends 25.
    assert s.start_ns.tolist() == [0, 2, 15, 0, 5, 7, 3, 13]
    assert s.end_ns.tolist() == [2, 15, 16, 5, 7, 25, 13, 23]
    assert s.rt_src[1] == 6 and s.rt_src[5] == 7
    assert s.crit_kind[1] == Crit.RUNTIME


def test_sync_issued_before_launch_ends_does_not_wait_for_it() -> None:
    tasks = _two_thread_stream()
    tasks[3]["d"] = 0  # Y: 0..0, L2: 0..2, so K2 is enqueued at 2 == S1's issue time
    tasks[4]["d"] = 3  # L2: 0..3, enqueued after S1 is issued at 2
    g = build(tasks, [-1, -1, 0], edges=[(0, 6, 1), (4, 7, 1)])
    s = replay(g)
    assert s.rt_src[1] == 6 and s.end_ns[1] == 15


def test_device_sync_waits_for_every_stream() -> None:
    tasks = [
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 0 -> K on stream 1 (dur 20)
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 1 -> K on stream 2 (dur 30)
        {"p": 0, "d": 1, "kind": K.SYNC, "rt": Rt.DEVICE, "arg": 0, "rlat": 5},  # 2
        {"p": 1, "d": 20, "launch": 0},  # 3: 1..21
        {"p": 2, "d": 30, "launch": 1},  # 4: 2..32
        {"p": 3, "d": 99},  # 5: another device's stream, never waited for
    ]
    g = build(tasks, [-1, 0, 0, 1], edges=[(0, 3, 0), (1, 4, 0)])
    s = replay(g)
    assert s.end_ns.tolist()[:5] == [1, 2, 37, 21, 32]
    assert s.rt_src[2] == 4


def test_event_sync_waits_only_for_work_recorded_before_the_event() -> None:
    tasks = [
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 0 L1
        {"p": 0, "d": 1, "kind": K.EVENT_RECORD, "rt": Rt.RECORD, "arg": 1},  # 1 record at 1
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 2 L2
        {"p": 0, "d": 1, "kind": K.SYNC, "rt": Rt.EVENT, "arg": 1, "rlat": 1},  # 3 event sync
        {"p": 1, "d": 10, "launch": 0},  # 4 K1: 1..11
        {"p": 1, "d": 10, "launch": 2},  # 5 K2: 11..21
    ]
    g = build(tasks, [-1, 0], edges=[(0, 4, 0), (2, 5, 0)])
    s = replay(g)
    assert s.rt_src[1] == 4 and s.rt_src[3] == 4
    assert s.end_ns.tolist() == [1, 2, 3, 12, 11, 21]


def test_inter_stream_wait_event() -> None:
    tasks = [
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 0 L1 -> K1 on stream A
        {"p": 0, "d": 1, "kind": K.EVENT_RECORD, "rt": Rt.RECORD, "arg": 1},  # 1 record on A
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 2 cudaStreamWaitEvent -> wait task on B
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 3 L2 -> K2 on B
        {"p": 1, "d": 50, "launch": 0},  # 4 K1: 1..51
        {"p": 2, "d": 0, "kind": K.GPU_WAIT, "launch": 2, "rt": Rt.EVENT, "arg": 1, "rlat": 3},
        {"p": 2, "d": 5, "launch": 3, "delay": 1},  # 6 K2
    ]
    g = build(tasks, [-1, 0, 0], edges=[(0, 4, 0), (2, 5, 0), (3, 6, 0)])
    s = replay(g)
    # wait task starts at 3 and ends at K1's end + 3 = 54; K2 starts 54 + 1 = 55
    assert s.start_ns.tolist()[4:] == [1, 3, 55]
    assert s.end_ns.tolist()[4:] == [51, 54, 60]
    assert s.crit_src[6] == 5 and s.crit_src[5] == 4


def _launches(n: int) -> ReplayGraph:
    tasks = [{"p": 0, "d": 1, "kind": K.LAUNCH} for _ in range(n)]
    tasks += [{"p": 1, "d": 10, "launch": i} for i in range(n)]
    return build(tasks, [-1, 0], edges=[(i, n + i, 0) for i in range(n)])


def test_launch_queue_back_pressure() -> None:
    g = _launches(5)
    s = replay(g, queue_depth=2)
    # K0 starts at 1 as L0 ends; L1 (1..2) and L2 (2..3) fill the queue with K1, K2 (the stream
    # runs K0 until 11); L3 reaches its end at 4 with 2 outstanding and is held until K1 starts at
    # 11; L4 (11..12) finds K2, K3 outstanding and is held until K2 starts at 21.
    assert s.start_ns.tolist() == [0, 1, 2, 3, 11, 1, 11, 21, 31, 41]
    assert s.end_ns.tolist() == [1, 2, 3, 11, 21, 11, 21, 31, 41, 51]
    assert s.crit_kind[3] == Crit.QUEUE and s.crit_src[3] == 6
    free = replay(g, queue_depth=0)
    assert free.end_ns.tolist()[:5] == [1, 2, 3, 4, 5]
    assert free.makespan_ns == s.makespan_ns == 51


def test_launch_queue_counts_outstanding_tasks_not_launch_order() -> None:
    # device 0 with streams A and B; X on A also waits for a 100 ns CPU op (an NCCL kernel
    # waiting for its peers); L1..L4 launch K1..K4 on B. Queue depth 2.
    tasks = [{"p": 0, "d": 1, "kind": K.LAUNCH} for _ in range(5)]  # 0..4: L0..L4
    tasks.append({"p": 1, "d": 100})  # 5: C, 0..100
    tasks.append({"p": 2, "d": 5, "launch": 0})  # 6: X on A
    tasks += [{"p": 3, "d": 10, "launch": i} for i in range(1, 5)]  # 7..10: K1..K4 on B
    edges = [(0, 6, 0), (5, 6, 0)] + [(i, 6 + i, 0) for i in range(1, 5)]
    g = build(tasks, [-1, -1, 0, 0], edges=edges)
    s = replay(g, queue_depth=2)
    # L0 ends at 1 (X outstanding); L1 at 2 (K1 starts at once); L2 at 3 (X, K2 outstanding: full).
    # L3 reaches its end at 4, held until K2 starts at 12; L4 (12..13) held until K3 starts at 22.
    # The launch-order rule would have held L2 until X started at 100.
    assert s.start_ns.tolist() == [0, 1, 2, 3, 12, 0, 100, 2, 12, 22, 32]
    assert s.end_ns.tolist() == [1, 2, 3, 12, 22, 100, 105, 12, 22, 32, 42]
    assert s.crit_kind[3] == s.crit_kind[4] == Crit.QUEUE
    assert s.crit_src[3] == 8 and s.crit_src[4] == 9
    assert s.crit_kind[2] == Crit.PROC


def test_held_launches_take_freed_slots_in_order() -> None:
    # depth 1, one stream, three threads: Lb fills the queue with Kb (the stream runs Ka 1..11);
    # Lc reaches its end at 5 and Ld at 6: both held. Kb's start at 11 frees the slot for Lc
    # (held first), Kc's start at 21 frees it for Ld.
    tasks = [
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 0 La: 0..1
        {"p": 0, "d": 3},  # 1 C0: 1..4
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 2 Lc: 4..5, held to 11
        {"p": 1, "d": 2},  # 3 C1: 0..2
        {"p": 1, "d": 1, "kind": K.LAUNCH},  # 4 Lb: 2..3
        {"p": 2, "d": 1, "delay": 5, "kind": K.LAUNCH},  # 5 Ld: 5..6, held to 21
    ]
    tasks += [{"p": 3, "d": 10, "launch": i} for i in (0, 4, 2, 5)]  # 6..9: Ka, Kb, Kc, Kd
    g = build(tasks, [-1, -1, -1, 0], edges=[(0, 6, 0), (4, 7, 0), (2, 8, 0), (5, 9, 0)])
    s = replay(g, queue_depth=1)
    assert s.start_ns.tolist() == [0, 1, 4, 0, 2, 5, 1, 11, 21, 31]
    assert s.end_ns.tolist() == [1, 4, 11, 2, 3, 21, 11, 21, 31, 41]
    assert (s.crit_src[2], s.crit_src[5]) == (7, 8)
    assert s.crit_kind[2] == s.crit_kind[5] == Crit.QUEUE


def test_launch_queue_does_not_wait_behind_its_own_task() -> None:
    # thread 1 launches Kb on stream S (queued behind Ka in stream order) and Kt on stream T
    # before thread 0 launches Ka. Numbered in simulated order with Q = 2, La would wait for the
    # start of Kb, which waits for Ka: a deadlock. Only Kb is outstanding when La ends.
    tasks = [
        {"p": 0, "d": 3},  # 0 C0: 0..3
        {"p": 0, "d": 1, "kind": K.LAUNCH},  # 1 La: 3..4
        {"p": 1, "d": 1, "kind": K.LAUNCH},  # 2 Lb: 0..1
        {"p": 1, "d": 1, "kind": K.LAUNCH},  # 3 Lt: 1..2
        {"p": 2, "d": 10, "launch": 1},  # 4 Ka on S: 4..14
        {"p": 2, "d": 10, "launch": 2},  # 5 Kb on S: 14..24
        {"p": 3, "d": 10, "launch": 3},  # 6 Kt on T: 2..12
    ]
    g = build(tasks, [-1, -1, 0, 0], edges=[(1, 4, 0), (2, 5, 0), (3, 6, 0)])
    s = replay(g, queue_depth=2)
    assert s.start_ns.tolist() == [0, 3, 0, 1, 4, 14, 2]
    assert s.end_ns.tolist() == [3, 4, 1, 2, 14, 24, 12]
    assert Crit.QUEUE not in s.crit_kind.tolist()
    # depth 1: Kb fills the queue and never starts before Ka, whose launch is held: a deadlock
    with pytest.raises(ReplayError):
        replay(g, queue_depth=1)


def _ranks(arrive: list[int], transfer: list[int]) -> ReplayGraph:
    """Per rank: an op of `arrive - 1`, a 1 ns launch, a collective on the rank's comm stream."""
    tasks, edges, pdev = [], [], []
    for r, (a, x) in enumerate(zip(arrive, transfer, strict=True)):
        base = len(tasks)
        tasks += [
            {"p": 2 * r, "d": a - 1},
            {"p": 2 * r, "d": 1, "kind": K.LAUNCH},
            {"p": 2 * r + 1, "d": x, "launch": base + 1, "kind": K.COLLECTIVE, "coll": 0},
        ]
        edges.append((base + 1, base + 2, 0))
        pdev += [-1, r]
    return build(tasks, pdev, edges=edges)


def test_collective_two_ranks() -> None:
    s = replay(_ranks([11, 31], [5, 5]))
    assert s.start_ns.tolist() == [0, 10, 11, 0, 30, 31]
    assert s.end_ns.tolist() == [10, 11, 36, 30, 31, 36]
    assert s.crit_kind[2] == Crit.COLLECTIVE and s.crit_src[2] == 5


def test_collective_three_ranks_different_arrivals() -> None:
    s = replay(_ranks([21, 11, 31], [5, 6, 7]))
    assert s.start_ns[[2, 5, 8]].tolist() == [21, 11, 31]
    assert s.end_ns[[2, 5, 8]].tolist() == [36, 37, 38]
    assert s.makespan_ns == 38


def test_critical_path_walks_back_to_time_zero() -> None:
    s = replay(_launches(5), queue_depth=2)
    path = s.critical_path().tolist()
    assert path[0] == 9 and path[-1] in (0, 5)
    assert all(s.end_ns[a] >= s.end_ns[b] for a, b in zip(path, path[1:], strict=False))


def test_deadlock_is_reported() -> None:
    # a collective whose second participant sits behind a sync on the first one's stream
    g = build(
        [
            {"p": 0, "d": 1, "kind": K.LAUNCH},
            {"p": 1, "d": 1, "launch": 0, "kind": K.COLLECTIVE, "coll": 0},
            {"p": 0, "d": 1, "kind": K.SYNC, "rt": Rt.STREAM, "arg": 1},
            {"p": 0, "d": 1, "kind": K.LAUNCH},
            {"p": 2, "d": 1, "launch": 3, "kind": K.COLLECTIVE, "coll": 0},
        ],
        [-1, 0, 1],
        edges=[(0, 1, 0), (3, 4, 0)],
        source="job=x rank=0",
    )
    with pytest.raises(ReplayError, match="job=x rank=0"):
        replay(g)
    assert replay(g, check=False).end_ns[2] == -1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"proc": [0, 5]}, "proc\\[1\\]=5"),
        ({"dur_ns": [1, -1]}, "dur_ns\\[1\\]=-1 is negative"),
        ({"launch_src": [-1, -1], "kind": [int(K.CPU_OP), int(K.CPU_OP)]}, "runs on a GPU stream"),
        ({"dep_src": [1]}, "depends on itself"),
        ({"rt_mode": [1, 0], "rt_arg": [0, -1]}, "not a GPU stream"),
    ],
)
def test_bad_arrays_are_named(change: dict, message: str) -> None:
    arrays = dict(
        proc=[0, 1],
        dur_ns=[1, 1],
        proc_device=[-1, 0],
        dep_ptr=[0, 0, 1],
        dep_src=[0],
        launch_src=[-1, 0],
        kind=[int(K.LAUNCH), int(K.GPU_KERNEL)],
    )
    arrays.update(change)
    with pytest.raises(GraphError, match=message):
        ReplayGraph.build(source="g1", **arrays)


def test_missing_launch_edge_is_named() -> None:
    with pytest.raises(GraphError, match="launch edge 0 -> 1 missing"):
        ReplayGraph.build(proc=[0, 1], dur_ns=[1, 1], proc_device=[-1, 0], launch_src=[-1, 0])


# ---------------------------------------------------------------- random graphs


@st.composite
def random_graphs(draw: st.DrawFn) -> ReplayGraph:
    n_threads = draw(st.integers(1, 3))
    n_dev = draw(st.integers(1, 2))
    n_streams = draw(st.integers(n_dev, 4))
    pdev = [-1] * n_threads + [i % n_dev for i in range(n_streams)]
    streams = list(range(n_threads, n_threads + n_streams))
    n = draw(st.integers(1, 40))
    tasks: list[dict] = []
    edges: list[tuple[int, int, int]] = []
    records: list[int] = []
    n_coll = 0
    dur = st.integers(0, 20)
    for _ in range(n):
        th = draw(st.integers(0, n_threads - 1))
        what = draw(st.sampled_from(["op", "launch", "launch", "sync", "dev", "rec", "ev", "wait"]))
        t = {"p": th, "d": draw(dur), "delay": draw(st.integers(0, 5))}
        if what == "launch" or (what == "wait" and records):
            t["kind"] = K.LAUNCH
            tasks.append(t)
            s = draw(st.sampled_from(streams))
            gpu = {
                "p": s,
                "d": draw(dur),
                "delay": draw(st.integers(0, 3)),
                "launch": len(tasks) - 1,
            }
            if what == "wait":
                gpu.update(kind=K.GPU_WAIT, rt=Rt.EVENT, arg=draw(st.sampled_from(records)))
                gpu["rlat"] = draw(st.integers(0, 3))
            elif draw(st.booleans()) and draw(st.booleans()):
                gpu.update(kind=K.COLLECTIVE, coll=n_coll)
                n_coll += 1
            tasks.append(gpu)
            edges.append((len(tasks) - 2, len(tasks) - 1, draw(st.integers(0, 4))))
        else:
            if what == "sync":
                t.update(kind=K.SYNC, rt=Rt.STREAM, arg=draw(st.sampled_from(streams)))
            elif what == "dev":
                t.update(kind=K.SYNC, rt=Rt.DEVICE, arg=draw(st.integers(0, n_dev - 1)))
            elif what == "rec":
                t.update(kind=K.EVENT_RECORD, rt=Rt.RECORD, arg=draw(st.sampled_from(streams)))
                records.append(len(tasks))
            elif what == "ev" and records:
                t.update(kind=K.SYNC, rt=Rt.EVENT, arg=draw(st.sampled_from(records)))
            t["rlat"] = draw(st.integers(0, 3)) if "rt" in t else 0
            tasks.append(t)
        # a few extra fixed edges from earlier tasks (ids stay topological)
        me = len(tasks) - 1
        for _ in range(draw(st.integers(0, 2))):
            if me > 0:
                edges.append((draw(st.integers(0, me - 1)), me, draw(st.integers(0, 4))))
    # pair collectives: ids 2k and 2k+1 on different processors form one collective
    coll_tasks = [i for i, t in enumerate(tasks) if "coll" in t]
    cid = 0
    for a, b in zip(coll_tasks[::2], coll_tasks[1::2], strict=False):
        if tasks[a]["p"] != tasks[b]["p"]:
            tasks[a]["coll"] = tasks[b]["coll"] = cid
            cid += 1
        else:
            del tasks[a]["coll"], tasks[b]["coll"]
    for i in coll_tasks[2 * (len(coll_tasks) // 2) :]:
        tasks[i].pop("coll", None)
    for t in tasks:
        if t.get("kind") == K.COLLECTIVE and "coll" not in t:
            t["kind"] = K.GPU_KERNEL
    return build(tasks, pdev, edges=sorted(set(edges)))


def check_schedule(g: ReplayGraph, s, q: int) -> None:  # noqa: ANN001
    """Every rule of the kernel's docstring, recomputed independently from the schedule."""
    start, end = s.start_ns, s.end_ns
    n = g.n_tasks
    assert (end >= 0).all()
    ready = np.zeros(n, np.int64)
    for d in range(n):
        for k in range(g.dep_ptr[d], g.dep_ptr[d + 1]):
            src, lat = g.dep_src[k], g.dep_lat_ns[k]
            assert start[d] >= end[src] + lat + g.delay_ns[d], "fixed dependency"
            ready[d] = max(ready[d], end[src] + lat)
    for p in range(g.n_procs):
        ids = np.flatnonzero(g.proc == p)
        for a, b in zip(ids, ids[1:], strict=False):
            assert start[b] >= end[a] + g.delay_ns[b], "processor exclusivity"
            ready[b] = max(ready[b], end[a])
    # tight: each task starts exactly when its last constraint allows
    assert (start == ready + g.delay_ns).all(), "unexplained idle before a start"

    def prefix(stream: int, t: int, strict: bool) -> int:
        ids = np.flatnonzero(g.proc == stream)
        last = -1
        for i in ids:
            c = g.launch_src[i]
            if c >= 0 and not (end[c] < t if strict else end[c] <= t):
                break
            last = i
        return last

    expect_end = start + g.dur_ns
    for w in range(n):
        m, t = int(g.rt_mode[w]), int(start[w])
        if m in (Rt.STREAM, Rt.RECORD, Rt.DEVICE):
            sts = [g.rt_arg[w]] if m != Rt.DEVICE else np.flatnonzero(g.proc_device == g.rt_arg[w])
            for stream in sts:
                lo, hi = prefix(stream, t, True), prefix(stream, t, False)
                if m == Rt.DEVICE:
                    if lo >= 0:
                        assert end[w] >= end[lo] + g.rt_lat_ns[w], "device sync too early"
                    continue
                assert lo <= s.rt_src[w] <= hi, "runtime target outside the enqueued prefix"
                if lo >= 0 and m == Rt.STREAM:
                    assert end[w] >= end[lo] + g.rt_lat_ns[w], "stream sync too early"
        if m in (Rt.STREAM, Rt.DEVICE) and s.rt_src[w] >= 0:
            expect_end[w] = max(expect_end[w], end[s.rt_src[w]] + g.rt_lat_ns[w])
        if m == Rt.EVENT:
            tgt = s.rt_src[g.rt_arg[w]]
            assert s.rt_src[w] == tgt
            expect_end[w] = max(expect_end[w], start[g.rt_arg[w]])
            if tgt >= 0:
                expect_end[w] = max(expect_end[w], end[tgt] + g.rt_lat_ns[w])
    for c in range(g.coll_size.shape[0]):
        members = np.flatnonzero(g.coll == c)
        arrive = start[members].max()
        expect_end[members] = arrive + g.dur_ns[members]
    if q > 0:
        # launch queue: sorted by natural end e (the end by every other rule), the k-th launch of
        # a device ends at max(e, the (k-q)-th start of its launched GPU tasks). Launches with the
        # same e take their places in processing order (a zero-length launch may only exist once
        # another has completed), so each such group must get that group's ends in some order.
        for d in range(g.n_devices):
            launches = [
                i
                for i in range(n)
                if g.launch_dst[i] >= 0 and g.proc_device[g.proc[g.launch_dst[i]]] == d
            ]
            natural = {w: int(expect_end[w]) for w in launches}
            launches.sort(key=lambda w: natural[w])
            starts = np.sort(start[g.launch_dst[launches]]) if launches else start[:0]
            want: dict[int, list[int]] = {}
            for k, w in enumerate(launches):
                v = max(natural[w], int(starts[k - q])) if k >= q else natural[w]
                want.setdefault(natural[w], []).append(v)
            for e, ends in want.items():
                group = [w for w in launches if natural[w] == e]
                assert sorted(end[group].tolist()) == sorted(ends), "launch queue rule"
            for w in launches:
                expect_end[w] = end[w]
                queued = (end[launches] <= end[w]).sum() - (starts <= end[w]).sum()
                assert queued <= q, "launch queue over its depth"
                if end[w] > natural[w]:
                    src = s.crit_src[w]
                    assert s.crit_kind[w] == Crit.QUEUE, "held launch not bound by the queue"
                    assert start[src] == end[w] and g.launch_src[src] >= 0, "wrong queue bound"
                    assert g.proc_device[g.proc[src]] == d, "queue bound on another device"
    assert (end == expect_end).all(), "end differs from the rules"
    assert s.makespan_ns == (end.max() if n else 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from([0, 1, 2, 1024]))
def test_random_graphs_obey_every_rule(g: ReplayGraph, q: int) -> None:
    s = replay(g, queue_depth=q, check=False)
    assume((s.end_ns >= 0).all())
    check_schedule(g, s, q)


@settings(max_examples=40, deadline=None)
@given(st.lists(random_graphs(), min_size=1, max_size=6), st.sampled_from([0, 2]))
def test_batched_equals_single(graphs: list[ReplayGraph], q: int) -> None:
    res = replay_batch(GraphBatch.of(graphs), queue_depth=q, check=False, parallel=True)
    for i, g in enumerate(graphs):
        one = replay(g, queue_depth=q, check=False)
        got = res.instance(i)
        for name in ("start_ns", "end_ns", "crit_src", "crit_kind", "rt_src"):
            np.testing.assert_array_equal(getattr(got, name), getattr(one, name))
        assert got.makespan_ns == one.makespan_ns


def test_sweep_overrides_durations_per_config() -> None:
    g = training_like_graph(3_000, seed=4, ranks=2)
    rng = np.random.default_rng(0)
    durs = (g.dur_ns[None, :] * rng.uniform(0.5, 2.0, (6, 1))).astype(np.int64)
    delays = np.repeat(g.delay_ns[None, :], 6, axis=0) * np.arange(6)[:, None]
    got = replay_sweep(g, durs, delay_ns=delays)
    for c in range(6):
        one = replay(g, dur_ns=durs[c], delay_ns=delays[c])
        assert got[c] == one.makespan_ns
    check_schedule(dataclasses.replace(g, dur_ns=durs[1]), replay(g, dur_ns=durs[1]), 1024)
    # longer durations never shorten this graph: the two scale factors are ordered
    order = np.argsort(durs[:, 0])
    assert (np.diff(got[order]) >= 0).all()


def test_synthetic_multirank_graph_obeys_every_rule() -> None:
    g = training_like_graph(4_000, seed=7, ranks=3, threads=2, streams=3)
    s = replay(g, queue_depth=64)
    check_schedule(g, s, 64)
    assert set(np.unique(s.crit_kind)) >= {Crit.PROC, Crit.EDGE, Crit.RUNTIME, Crit.COLLECTIVE}


# ---------------------------------------------------------------- fast path against the reference


def assert_same_schedule(a, b) -> None:  # noqa: ANN001
    for name in ("start_ns", "end_ns", "crit_src", "crit_kind", "rt_src"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.makespan_ns == b.makespan_ns


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from([0, 1, 2, 1024]))
def test_eager_plain_tasks_equal_the_heap_reference(g: ReplayGraph, q: int) -> None:
    # the fast path starts plain tasks without the time-ordered heap; every output, including
    # the tie-broken critical-path sources and deadlocks, must equal the all-heap reference
    fast = replay(g, queue_depth=q, check=False)
    ref = replay(g, queue_depth=q, check=False, eager=False)
    assert_same_schedule(fast, ref)


@pytest.mark.parametrize("q", [0, 3, 1024])
def test_eager_equals_reference_on_synthetic_multirank_graph(q: int) -> None:
    g = training_like_graph(6_000, seed=11, ranks=3, threads=3, streams=4)
    assert (g.flags == 0).mean() > 0.5  # the fast path is exercised on most tasks
    # (a shallow queue deadlocks this graph: ranks block on collectives; that must match too)
    fast = replay(g, queue_depth=q, check=False)
    assert_same_schedule(fast, replay(g, queue_depth=q, check=False, eager=False))
    assert (fast.end_ns >= 0).all() == (q != 3)


def test_sweep_reuses_working_arrays_without_leaking_state() -> None:
    # instances of different sizes run back to back on the same working arrays, serially and in
    # parallel chunks: each must equal its own fresh single replay
    small = training_like_graph(500, seed=5, ranks=2)
    big = training_like_graph(2_000, seed=6, ranks=1)
    batch = GraphBatch.of([big, small])
    inst = np.array([0, 1, 1, 0, 1, 0, 0])
    for parallel in (False, True):
        res = replay_batch(batch, instance_graph=inst, parallel=parallel)
        for i, gi in enumerate(inst):
            assert_same_schedule(res.instance(i), replay((big, small)[gi]))
