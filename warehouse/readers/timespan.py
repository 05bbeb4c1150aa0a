"""The time span of a chunk's timed events: the earliest start and the latest end (ts + dur).

Metadata events ('M') carry placeholder timestamps (often 0) and are not part of the span; an
event without `dur` ends at its `ts`. One numba pass over the columns in place: the same with
pyarrow compute was ten calls and copies per chunk (docs/warehouse.md, "Module notes").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from warehouse.readers.jit import kernel
from warehouse.readers.views import int_view, is_valid, str_view

_M = ord("M")


@kernel
def _span(
    ph_off, ph_data, ph_bits, ph_bit0, ts, ts_bits, ts_bit0, dur, dur_bits, dur_bit0, out
):  # pragma: no cover - numba
    """out = [any, lo, hi] over the rows with a ts whose ph is not "M"."""
    found = False
    lo = np.int64(0)
    hi = np.int64(0)
    for k in range(ts.shape[0]):
        if not is_valid(ts_bits, ts_bit0, k):
            continue
        if is_valid(ph_bits, ph_bit0, k):
            a = ph_off[k]
            if ph_off[k + 1] - a == 1 and ph_data[a] == _M:
                continue
        t = ts[k]
        end = t + dur[k] if is_valid(dur_bits, dur_bit0, k) else t
        if not found:
            found = True
            lo, hi = t, end
        else:
            lo = min(lo, t)
            hi = max(hi, end)
    out[0] = 1 if found else 0
    out[1] = lo
    out[2] = hi


def timed_span(ph: pa.Array, ts_ns: pa.Array, dur_ns: pa.Array) -> tuple[int, int] | None:
    """(first start, last end) of the rows with a timestamp that are not metadata; None if none."""
    p, t, d = str_view(ph), int_view(ts_ns), int_view(dur_ns)
    out = np.zeros(3, dtype=np.int64)
    _span(
        p.offsets, p.data, p.bits, p.bit0, t.values, t.bits, t.bit0, d.values, d.bits, d.bit0, out
    )
    return (int(out[1]), int(out[2])) if out[0] else None
