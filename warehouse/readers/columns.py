"""Value spans → all int64 and string columns of a chunk, in one row-wise numba pass.

Row-wise (event by event) rather than column by column: an event's ~250 bytes are read while
they are in cache, instead of 27 random passes over a chunk. Within a row only the fields the
event holds are visited: a Kineto event fills ~8 of the 27 columns, and checking every absent
one cost more than the values. Measurements: docs/warehouse.md, "Module notes".
Per-value rules live in `numbers.int_value` and `strings.str_value`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
from numba.cpython.unsafe.numbers import trailing_zeros

from warehouse.readers.jit import kernel
from warehouse.readers.numbers import int_value
from warehouse.readers.strings import str_value

# Columns are allocated from the C library's allocator, not Arrow's default (mimalloc), which
# hands blocks of a chunk's size back to the OS when they are freed: every chunk then faulted in
# fresh pages for the kernel to zero (perf on a 1 GB read: 7% in clear_page_erms). glibc keeps
# freed blocks for the next chunk (all of them in an ingest process: `keep_freed_memory` in
# warehouse/ingest_process.py). The Parquet writer uses the same pool for its buffers.
POOL = pa.system_memory_pool()


@kernel
def _row_error(
    buf, starts, ends, k, int_f, int_alt, int_scale, int_mode, str_f, str_alt, str_mode, sout, o
):  # pragma: no cover - numba
    """(field, code) of row k's first bad value in column order (ints, then strings), as a
    column-by-column pass would meet it; (-1, 0) when the row has none."""
    for c in range(int_f.shape[0]):
        f = int_f[c]
        if starts[k, f] < 0 and int_alt[c] >= 0:
            f = int_alt[c]
        _, _, code = int_value(buf, starts[k, f], ends[k, f], int_scale[c], int_mode[c])
        if code != 0:
            return f, code
    for c in range(str_f.shape[0]):
        f = str_f[c]
        if starts[k, f] < 0 and str_alt[c] >= 0:
            f = str_alt[c]
        _, _, code = str_value(buf, starts[k, f], ends[k, f], str_mode[c], sout, o[c])
        if code != 0:
            return f, code
    return -1, 0


@kernel
def convert(
    buf,
    starts,
    ends,
    int_f,
    int_alt,
    int_scale,
    int_mode,
    ints,
    ibits,
    str_f,
    str_alt,
    str_mode,
    str_base,
    o,
    sout,
    soff,
    sbits,
    valid,
    targets,
    guards,
):  # pragma: no cover - numba
    """Fill ints[col, row] and the string columns, their validity as Arrow bitmaps
    (`ibits`/`sbits`[col, byte], LSB first) and `valid[col]`, the valid rows of each column (int
    columns first); returns (row, field, code) of an error.

    Row by row, only the fields an event holds are visited (`targets[f]`: the columns field f
    feeds, int columns first, then `n_int` + string column; `guards[f, t]`: a field whose presence
    makes f a fallback not taken). Absent values, most of a row's columns, cost nothing there:
    validity starts clear and a string column's offsets are carried over its null rows after.
    `o` starts as a copy of `str_base` and ends as each string column's end in `sout`.
    """
    n = starts.shape[0]
    n_int = int_f.shape[0]
    n_str = str_f.shape[0]
    for c in range(n_int):
        for k in range(n):
            ints[c, k] = 0
        for b in range(ibits.shape[1]):
            ibits[c, b] = 0
    for c in range(n_str):
        for b in range(sbits.shape[1]):
            sbits[c, b] = 0
    for c in range(n_int + n_str):
        valid[c] = 0
    n_fields = targets.shape[0]
    for k in range(n):
        present = np.uint64(0)
        for f in range(n_fields):
            present |= np.uint64(starts[k, f] >= 0) << np.uint64(f)
        while present:
            f = trailing_zeros(present)
            present &= present - np.uint64(1)
            a = starts[k, f]
            b = ends[k, f]
            for t in range(targets.shape[1]):
                tc = targets[f, t]
                if tc < 0:
                    break
                g = guards[f, t]
                if g >= 0 and starts[k, g] >= 0:
                    continue
                if tc < n_int:
                    v, ok, code = int_value(buf, a, b, int_scale[tc], int_mode[tc])
                    if code == 0:
                        ints[tc, k] = v
                        if ok:  # a row feeds a column once (a fallback only when unset)
                            ibits[tc, k >> 3] |= np.uint8(1 << (k & 7))
                            valid[tc] += 1
                else:
                    c = tc - n_int
                    o2, ok, code = str_value(buf, a, b, str_mode[c], sout, o[c])
                    if code == 0:
                        o[c] = o2
                        soff[c, k + 1] = o2 - str_base[c]
                        if ok:
                            sbits[c, k >> 3] |= np.uint8(1 << (k & 7))
                            valid[tc] += 1
                if code != 0:
                    # report the value a column-by-column pass meets first, whatever the order
                    # of the row's fields
                    f, code = _row_error(
                        buf, starts, ends, k, int_f, int_alt, int_scale, int_mode,
                        str_f, str_alt, str_mode, sout, o,
                    )  # fmt: skip
                    return k, f, code
    for c in range(n_str):
        soff[c, 0] = 0
        for k in range(n):
            if not (sbits[c, k >> 3] >> (k & 7)) & 1:
                soff[c, k + 1] = soff[c, k]
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

    @cached_property
    def routes(self) -> tuple[np.ndarray, np.ndarray]:
        """`convert`'s targets[f, t] (the t-th column field f feeds: int columns first, then
        n_int + string column; -1 past the last) and guards[f, t] (the field whose presence
        makes f's value for that column a fallback not taken, or -1)."""
        n_int = len(self.int_names)
        pairs: list[tuple[int, int, int]] = []  # (field, column, guard)
        for c, (f, alt) in enumerate(zip(self.int_f, self.int_alt, strict=True)):
            pairs.append((int(f), c, -1))
            if alt >= 0:
                pairs.append((int(alt), c, int(f)))
        for c, (f, alt) in enumerate(zip(self.str_f, self.str_alt, strict=True)):
            pairs.append((int(f), n_int + c, -1))
            if alt >= 0:
                pairs.append((int(alt), n_int + c, int(f)))
        n_fields = max((f for f, _, _ in pairs), default=-1) + 1
        if n_fields > 64:
            raise ValueError("convert marks a row's present fields in one 64-bit word")
        width = max((sum(1 for p, _, _ in pairs if p == f) for f in range(n_fields)), default=1)
        targets = np.full((n_fields, width), -1, dtype=np.int64)
        guards = np.full((n_fields, width), -1, dtype=np.int64)
        used = np.zeros(n_fields, dtype=np.int64)
        for f, c, g in pairs:
            targets[f, used[f]], guards[f, used[f]] = c, g
            used[f] += 1
        return targets, guards


class _PoolOut:
    """One chunk's int values, validity bitmaps, string offsets and string bytes, each one buffer
    of Arrow's pool (a column is a zero-copy slice of it), with numpy views for `convert` to fill.
    Bitmaps are written by `convert` itself: a bool per value, packed after, cost 0.07 s per GB."""

    def __init__(self, n_int: int, n_str: int, n: int, data_bytes: int) -> None:
        self.n = n
        self.nb = (n + 7) // 8  # bytes of one column's bitmap
        self.ints_buf = pa.allocate_buffer(max(n_int * n * 8, 1), memory_pool=POOL)
        self.soff_buf = pa.allocate_buffer(max(n_str * (n + 1) * 4, 1), memory_pool=POOL)
        self.sout_buf = pa.allocate_buffer(max(data_bytes, 1), memory_pool=POOL)
        self.bits_buf = pa.allocate_buffer(max((n_int + n_str) * self.nb, 1), memory_pool=POOL)
        self.ints = np.frombuffer(self.ints_buf, np.int64, n_int * n).reshape(n_int, n)
        self.soff = np.frombuffer(self.soff_buf, np.int32, n_str * (n + 1)).reshape(n_str, n + 1)
        self.sout = np.frombuffer(self.sout_buf, np.uint8)
        bits = np.frombuffer(self.bits_buf, np.uint8, (n_int + n_str) * self.nb)
        bits = bits.reshape(n_int + n_str, self.nb)
        self.ibits, self.sbits = bits[:n_int], bits[n_int:]

    def int_values(self, c: int) -> pa.Buffer:
        return self.ints_buf.slice(c * self.n * 8, self.n * 8)

    def offsets(self, c: int) -> pa.Buffer:
        return self.soff_buf.slice(c * (self.n + 1) * 4, (self.n + 1) * 4)

    def bitmap(self, c: int, valid: int) -> pa.Buffer | None:
        """Column c's validity (int columns first), None when every row is valid."""
        return None if valid == self.n else self.bits_buf.slice(c * self.nb, self.nb)


def run(
    plan: Plan,
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    totals: np.ndarray,
) -> tuple[dict[str, pa.Array], tuple[int, int, int]]:
    """Columns by name, and (row, field, code) of the first bad value (row -1: none)."""
    n = starts.shape[0]
    n_int, n_str = len(plan.int_names), len(plan.str_names)
    # A string column's data is at most its spans' bytes (plus the alternative key's).
    bounds = totals[plan.str_f] + np.where(plan.str_alt >= 0, totals[plan.str_alt], 0)
    if int(bounds.max(initial=0)) >= 2**31:
        raise ValueError("a string column over 2 GiB within one chunk: use a smaller chunk_bytes")
    base = np.zeros(n_str + 1, dtype=np.int64)
    np.cumsum(bounds, out=base[1:])
    valid = np.zeros(n_int + n_str, dtype=np.int64)  # valid rows per column, from convert
    out = _PoolOut(n_int, n_str, n, int(base[-1]))
    err = convert(
        buf,
        starts,
        ends,
        plan.int_f,
        plan.int_alt,
        plan.int_scale,
        plan.int_mode,
        out.ints,
        out.ibits,
        plan.str_f,
        plan.str_alt,
        plan.str_mode,
        base[:-1],
        base[:-1].copy(),
        out.sout,
        out.soff,
        out.sbits,
        valid,
        *plan.routes,
    )
    row, field, code = (int(x) for x in err)
    if row >= 0:
        return {}, (row, field, code)
    cols: dict[str, pa.Array] = {}
    counts = valid.tolist()
    for c, name in enumerate(plan.int_names):
        bits = out.bitmap(c, counts[c])
        cols[name] = pa.Array.from_buffers(
            pa.int64(), n, [bits, out.int_values(c)], null_count=n - counts[c]
        )
    for c, name in enumerate(plan.str_names):
        start = int(base[c])
        data = out.sout_buf.slice(start, int(out.soff[c, n]))
        bits = out.bitmap(n_int + c, counts[n_int + c])
        cols[name] = pa.Array.from_buffers(
            pa.string(), n, [bits, out.offsets(c), data], null_count=n - counts[n_int + c]
        )
    return cols, (-1, -1, 0)
