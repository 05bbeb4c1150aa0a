"""SM-utilisation timeline: the share of each 1 ms bin in which at least one GPU stream is busy.

The Lumos paper's definition. Bins start at the step's GPU span start (the same span as
the breakdown) and tile it; the last bin is cut at the span's end and its share is over its own
length. Any GPU task of the rank counts (compute or communication, any stream, launched in any
step): the question is whether the GPU had work, not whose.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kernels.intervals import cumulative
from lumos.explain.breakdown import gpu_timeline
from lumos.explain.inputs import RankView, step_windows
from warehouse.schema import SM_UTILIZATION

BIN_NS = 1_000_000


def utilization(view: RankView, mode: str, bin_ns: int = BIN_NS) -> pa.Table:
    """One row per bin of every step of the rank with GPU work, in `mode`."""
    if bin_ns <= 0:
        raise ValueError(f"bin_ns must be positive, got {bin_ns}")
    start, end = view.times(mode)
    w = step_windows(view, start, end, view.is_gpu & (view.cls >= 0))
    bounds, mask = gpu_timeline(view, start, end)
    nbin = np.maximum((w.end_ns - w.start_ns + bin_ns - 1) // bin_ns, 1)
    rep = np.repeat(np.arange(w.step.size), nbin)
    first = np.repeat(np.cumsum(nbin) - nbin, nbin)
    b = np.arange(rep.size, dtype=np.int64) - first
    lo = w.start_ns[rep] + b * bin_ns
    hi = np.minimum(lo + bin_ns, w.end_ns[rep])
    cum = cumulative(bounds, mask, 4, np.ascontiguousarray(np.concatenate([lo, hi]), np.int64))
    n = rep.size
    busy = (cum[n:, 1:] - cum[:n, 1:]).sum(axis=1)
    width = hi - lo
    share = np.where(width > 0, busy / np.maximum(width, 1), 0.0)
    return pa.table(
        {
            "job": pa.repeat(pa.scalar(view.job, pa.string()), n),
            "rank": pa.array(np.full(n, view.rank, np.int32)),
            "step": w.step[rep],
            "mode": pa.repeat(pa.scalar(mode, pa.string()), n),
            "bin": b.astype(np.int32),
            "bin_start_ns": lo,
            "bin_ns": width,
            "busy_ns": busy,
            "busy_share": share,
        },
        schema=SM_UTILIZATION,
    )
