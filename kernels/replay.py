"""Replay of execution graphs: list scheduling with fixed and runtime dependencies, in numba.

The public entry of the replay kernels; the array contract of a graph is in `kernels.graph`
(read it first). Each processor runs its queue in task-id order; a ready task starts at ``max(
processor free, max(pred end + edge latency)) + delay``. The kernels, by algorithm:
`kernels.replay_event` (the event-driven simulation, the reference), `kernels.replay_linear`
(the default linear pass, which falls back to the simulation for whatever it cannot prove, so
schedules are always the simulation's), `kernels.replay_batch` (many instances in one call) and
`kernels.replay_codes` (shared codes). Outputs per task: start, end, what bound its end
(``crit_src``, ``crit_kind``) and the resolved runtime target; per instance: makespan and
status. The rules, tie breaks, batches and speed: docs/replay.md, "Module notes".
"""

from __future__ import annotations

import numpy as np

from kernels.graph import GraphBatch, ReplayGraph
from kernels.replay_batch import (
    BatchResult,
    LinearPlan,
    Pool,
    Schedule,
    linear_plan,
    replay_batch,
)
from kernels.replay_codes import (
    DEFAULT_QUEUE_DEPTH,
    STATUS_DEADLOCK,
    STATUS_OK,
    Crit,
    ReplayError,
)

__all__ = [
    "DEFAULT_QUEUE_DEPTH",
    "STATUS_DEADLOCK",
    "STATUS_OK",
    "BatchResult",
    "Crit",
    "LinearPlan",
    "Pool",
    "ReplayError",
    "Schedule",
    "linear_plan",
    "replay",
    "replay_batch",
    "replay_sweep",
]


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
