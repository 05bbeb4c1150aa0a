"""Breakdown of each step's GPU span into exposed compute, overlap, exposed communication, idle.

The Lumos paper's definition, over the step's GPU span ``[a, b]`` (first start to last end of the
GPU tasks the step launched), with C and M the unions of the compute and the communication
intervals of all the rank's GPU tasks clipped to ``[a, b]``:

    exposed_compute = |C \\ M|, overlapped = |C ∩ M|, exposed_comm = |M \\ C|,
    idle = (b - a) - |C ∪ M|              (the four sum to the span)

``ext_wait``: the part of idle in which a GPU task sat in its measured external wait
(``tasks.ext_wait_ns``, lumos_sql/graph/waits.sql). Communication = NCCL/RCCL collective and p2p
kernels and peer copies; compute = every other kernel, memcpy and memset
(lumos_sql/explain/task_steps.sql). Steps without GPU work have no row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kernels.intervals import cumulative, timeline
from lumos.explain.inputs import RankView, step_windows
from warehouse.schema import BREAKDOWN

# timeline masks: bit 0 compute, bit 1 communication, bit 2 a measured external wait
IDLE, COMPUTE, COMM, BOTH, WAIT = 0, 1, 2, 3, 4
WAIT_CLS = 2  # the class (bit) of external-wait intervals in the timeline


def gpu_timeline(
    view: RankView, start: np.ndarray, end: np.ndarray, waits: bool = False
) -> tuple[np.ndarray, ...]:
    """Elementary segments (bounds, mask) of the rank's GPU tasks in the given times; with
    `waits`, their external waits (the interval before each waiting task's start) as class
    WAIT_CLS too (masks 0..7, else 0..3)."""
    ids = np.flatnonzero(view.is_gpu & (view.cls >= 0))
    w = np.flatnonzero(view.is_gpu & (view.ext_wait > 0) & waits)
    return timeline(
        np.ascontiguousarray(np.concatenate([start[ids], start[w] - view.ext_wait[w]])),
        np.ascontiguousarray(np.concatenate([end[ids], start[w]])),
        np.ascontiguousarray(np.concatenate([view.cls[ids], np.full(w.size, WAIT_CLS, np.int64)])),
    )


def breakdown(view: RankView, mode: str) -> pa.Table:
    """One row per step of the rank with GPU work, in `mode` ('measured' or a replay mode)."""
    start, end = view.times(mode)
    w = step_windows(view, start, end, view.is_gpu & (view.cls >= 0))
    bounds, mask = gpu_timeline(view, start, end, waits=True)
    pts = np.concatenate([w.start_ns, w.end_ns])
    cum = cumulative(bounds, mask, 8, np.ascontiguousarray(pts, np.int64))
    k = w.step.size
    masks = cum[k:] - cum[:k]
    # the busy classes whether or not a wait runs beside them
    within = masks[:, :4] + masks[:, 4:]
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
            "ext_wait_ns": masks[:, WAIT],
            "n_gpu_tasks": w.n_tasks,
            "warmup": w.warmup,
            "truncated": w.truncated,
        },
        schema=BREAKDOWN,
    )
