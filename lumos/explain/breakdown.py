"""Breakdown of each step's GPU span into exposed compute, overlap, exposed communication, idle.

The Lumos paper's definition, over the step's GPU span ``[a, b]`` (first start to last end
of the GPU tasks the step launched, in the mode's times): with C the union of compute intervals
and M the union of communication intervals of *all* the rank's GPU tasks (every stream) clipped
to ``[a, b]``:

    exposed_compute = |C \\ M|, overlapped = |C ∩ M|, exposed_comm = |M \\ C|,
    idle = (b - a) - |C ∪ M|              (the four sum to the span)

Communication = NCCL/RCCL collective and p2p kernels and peer-to-peer copies; compute = every other
kernel, memcpy and memset (see lumos_sql/explain/task_steps.sql). Steps without GPU work have no
row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kernels.intervals import cumulative, timeline
from lumos.explain.inputs import RankView, step_windows
from warehouse.schema import BREAKDOWN

# timeline masks: bit 0 compute, bit 1 communication
IDLE, COMPUTE, COMM, BOTH = 0, 1, 2, 3


def gpu_timeline(view: RankView, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Elementary segments (bounds, mask) of the rank's GPU tasks in the given times."""
    ids = np.flatnonzero(view.is_gpu & (view.cls >= 0))
    return timeline(
        np.ascontiguousarray(start[ids]),
        np.ascontiguousarray(end[ids]),
        np.ascontiguousarray(view.cls[ids]),
    )


def breakdown(view: RankView, mode: str) -> pa.Table:
    """One row per step of the rank with GPU work, in `mode` ('measured' or a replay mode)."""
    start, end = view.times(mode)
    w = step_windows(view, start, end, view.is_gpu & (view.cls >= 0))
    bounds, mask = gpu_timeline(view, start, end)
    pts = np.concatenate([w.start_ns, w.end_ns])
    cum = cumulative(bounds, mask, 4, np.ascontiguousarray(pts, np.int64))
    k = w.step.size
    within = cum[k:] - cum[:k]
    span = w.end_ns - w.start_ns
    busy = within[:, COMPUTE] + within[:, COMM] + within[:, BOTH]
    return pa.table(
        {
            "job": pa.array([view.job] * k, pa.string()),
            "rank": pa.array(np.full(k, view.rank, np.int32)),
            "step": w.step,
            "mode": pa.array([mode] * k, pa.string()),
            "span_start_ns": w.start_ns,
            "span_end_ns": w.end_ns,
            "span_ns": span,
            "exposed_compute_ns": within[:, COMPUTE],
            "overlapped_ns": within[:, BOTH],
            "exposed_comm_ns": within[:, COMM],
            "idle_ns": span - busy,
            "n_gpu_tasks": w.n_tasks,
            "warmup": w.warmup,
            "truncated": w.truncated,
        },
        schema=BREAKDOWN,
    )
