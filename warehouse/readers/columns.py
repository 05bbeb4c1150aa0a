"""Value spans → all int64 and string columns of a chunk, in one row-wise numba pass.

Row-wise (event by event, every column) rather than column by column: an event's ~250 bytes are
read while they are in cache, instead of 27 random passes over a 32 MiB buffer (3x faster here).
Per-value rules live in `numbers.int_value` and `strings.str_value`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa

from warehouse.readers.numbers import int_value
from warehouse.readers.strings import str_value


@numba.njit(cache=True, nogil=True)
def convert(
    buf,
    starts,
    ends,
    int_f,
    int_alt,
    int_scale,
    int_mode,
    ints,
    ivalid,
    str_f,
    str_alt,
    str_mode,
    str_base,
    sout,
    soff,
    svalid,
):  # pragma: no cover - numba
    """Fill ints/ivalid[col, row] and the string columns; returns (row, field, code) of an error."""
    n = starts.shape[0]
    o = str_base.copy()
    for c in range(str_f.shape[0]):
        soff[c, 0] = 0
    for k in range(n):
        for c in range(int_f.shape[0]):
            f = int_f[c]
            if starts[k, f] < 0 and int_alt[c] >= 0:
                f = int_alt[c]
            v, ok, code = int_value(buf, starts[k, f], ends[k, f], int_scale[c], int_mode[c])
            if code != 0:
                return k, f, code
            ints[c, k] = v
            ivalid[c, k] = ok
        for c in range(str_f.shape[0]):
            f = str_f[c]
            if starts[k, f] < 0 and str_alt[c] >= 0:
                f = str_alt[c]
            o2, ok, code = str_value(buf, starts[k, f], ends[k, f], str_mode[c], sout, o[c])
            if code != 0:
                return k, f, code
            o[c] = o2
            soff[c, k + 1] = o2 - str_base[c]
            svalid[c, k] = ok
    return -1, -1, 0


@dataclass(frozen=True)
class Plan:
    """Which span field feeds which column, how; built once from the decode tables."""

    int_names: list[str]
    int_f: np.ndarray
    int_alt: np.ndarray
    int_scale: np.ndarray
    int_mode: np.ndarray
    str_names: list[str]
    str_f: np.ndarray
    str_alt: np.ndarray
    str_mode: np.ndarray


def run(
    plan: Plan, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, totals: np.ndarray
) -> tuple[dict[str, pa.Array], tuple[int, int, int]]:
    """Columns by name, and (row, field, code) of the first bad value (row -1: none)."""
    n = starts.shape[0]
    n_int, n_str = len(plan.int_names), len(plan.str_names)
    ints = np.empty((n_int, n), dtype=np.int64)
    ivalid = np.empty((n_int, n), dtype=np.bool_)
    # A string column's data is at most its spans' bytes (plus the alternative key's).
    bounds = totals[plan.str_f] + np.where(plan.str_alt >= 0, totals[plan.str_alt], 0)
    if int(bounds.max(initial=0)) >= 2**31:
        raise ValueError("a string column over 2 GiB within one chunk: use a smaller chunk_bytes")
    base = np.zeros(n_str + 1, dtype=np.int64)
    np.cumsum(bounds, out=base[1:])
    sout = np.empty(max(int(base[-1]), 1), dtype=np.uint8)
    soff = np.empty((n_str, n + 1), dtype=np.int32)
    svalid = np.empty((n_str, n), dtype=np.bool_)
    err = convert(
        buf,
        starts,
        ends,
        plan.int_f,
        plan.int_alt,
        plan.int_scale,
        plan.int_mode,
        ints,
        ivalid,
        plan.str_f,
        plan.str_alt,
        plan.str_mode,
        base[:-1].copy(),
        sout,
        soff,
        svalid,
    )
    row, field, code = (int(x) for x in err)
    if row >= 0:
        return {}, (row, field, code)
    cols: dict[str, pa.Array] = {}
    for c, name in enumerate(plan.int_names):
        valid = ivalid[c]
        cols[name] = pa.array(ints[c], pa.int64(), mask=None if valid.all() else ~valid)
    for c, name in enumerate(plan.str_names):
        valid = svalid[c]
        offsets = soff[c]
        start = int(base[c])
        data = sout[start : start + int(offsets[-1])]
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        cols[name] = pa.Array.from_buffers(
            pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
    return cols, (-1, -1, 0)
