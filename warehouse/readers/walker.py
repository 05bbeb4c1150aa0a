"""Find the value spans of the keys we keep, in every event of a chunk, in one numba pass.

Input: the events region of a chunk (`{...},{...}` as found by `scanner`), already validated as
JSON by msgspec, so the walker can trust the grammar and only has to track strings and nesting.
Output: for each wanted key (the event fields and the promoted `args` keys) and each event, the
byte span [start, end) of its value, or -1. Later kernels turn spans into Arrow columns without a
Python object per event. A key written twice keeps its last value, as the `json` module does.
"""

from __future__ import annotations

import numba
import numpy as np

from warehouse.readers.scanner import _skip_string

# Event fields, then the args keys that become columns. Order = row in the span arrays.
EVENT_KEYS = ["ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "args"]
ARGS_KEYS = [
    "device",
    "stream",
    "correlation",
    "External id",
    "external id",  # legacy 2021 traces
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Seq",
    "seq",
    "Input Dims",
    "Input type",
]
KEYS = EVENT_KEYS + ARGS_KEYS
FIELD = {k: i for i, k in enumerate(KEYS)}
N_EVENT_KEYS = len(EVENT_KEYS)
ARGS = FIELD["args"]

_KEY_BYTES = np.frombuffer(b"".join(k.encode() for k in KEYS), dtype=np.uint8)
_KEY_OFFSETS = np.cumsum([0] + [len(k.encode()) for k in KEYS]).astype(np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def _ws(buf, i, n):  # pragma: no cover - numba
    while i < n:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            return i
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def _skip_value(buf, i, n):  # pragma: no cover - numba
    c = buf[i]
    if c == 34:
        return _skip_string(buf, i + 1, n)
    if c == 123 or c == 91:
        depth = 0
        while i < n:
            c = buf[i]
            if c == 34:
                i = _skip_string(buf, i + 1, n)
                continue
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return n
    while i < n:
        c = buf[i]
        if c == 44 or c == 125 or c == 93 or c == 32 or c == 10 or c == 13 or c == 9:
            return i
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def _match(buf, ks, ke, kbytes, koff, lo, hi):  # pragma: no cover - numba
    """Index in [lo, hi) of the key whose bytes equal buf[ks:ke], or -1."""
    length = ke - ks
    for f in range(lo, hi):
        a = koff[f]
        if koff[f + 1] - a != length:
            continue
        same = True
        for m in range(length):
            if buf[ks + m] != kbytes[a + m]:
                same = False
                break
        if same:
            return f
    return -1


@numba.njit(cache=True, nogil=True)
def _args_object(
    buf, i, n, ev, starts, ends, totals, kbytes, koff, lo, hi
):  # pragma: no cover - numba
    """Walk the args object whose '{' is at buf[i]; record spans of keys in [lo, hi)."""
    i += 1
    while True:
        i = _ws(buf, i, n)
        c = buf[i]
        if c == 125:
            return i + 1
        if c == 44:
            i += 1
            continue
        ks = i + 1
        i = _skip_string(buf, ks, n)
        ke = i - 1
        i = _ws(buf, i, n) + 1  # the ':'
        i = _ws(buf, i, n)
        ve = _skip_value(buf, i, n)
        f = _match(buf, ks, ke, kbytes, koff, lo, hi)
        if f >= 0:
            starts[ev, f] = i
            ends[ev, f] = ve
            totals[f] += ve - i
        i = ve


@numba.njit(cache=True, nogil=True)
def _event_object(
    buf, i, n, ev, starts, ends, totals, kbytes, koff, n_event_keys, args_field
):  # pragma: no cover
    """Walk the event whose '{' is at buf[i]; record spans of kept keys. Returns its end."""
    # (Not recursive on purpose: numba's on-disk cache mishandles recursive functions.)
    i += 1
    while True:
        i = _ws(buf, i, n)
        c = buf[i]
        if c == 125:
            return i + 1
        if c == 44:
            i += 1
            continue
        ks = i + 1
        i = _skip_string(buf, ks, n)
        ke = i - 1
        i = _ws(buf, i, n) + 1  # the ':'
        i = _ws(buf, i, n)
        f = _match(buf, ks, ke, kbytes, koff, 0, n_event_keys)
        if f == args_field and buf[i] == 123:
            ve = _args_object(
                buf, i, n, ev, starts, ends, totals, kbytes, koff, n_event_keys, koff.shape[0] - 1
            )
        else:
            ve = _skip_value(buf, i, n)
        if f >= 0:
            starts[ev, f] = i
            ends[ev, f] = ve
            totals[f] += ve - i
        i = ve


@numba.njit(cache=True, nogil=True)
def walk(
    buf, starts, ends, totals, kbytes, koff, n_event_keys, args_field
):  # pragma: no cover - numba
    """Fill starts/ends[event, field] for every event object in buf; returns the event count."""
    n = buf.shape[0]
    i = 0
    ev = 0
    while i < n:
        if buf[i] != 123:  # commas and blanks between events
            i += 1
            continue
        for f in range(starts.shape[1]):
            starts[ev, f] = -1
        i = _event_object(
            buf, i, n, ev, starts, ends, totals, kbytes, koff, n_event_keys, args_field
        )
        ev += 1
    return ev


class SpanScratch:
    """Span arrays reused from chunk to chunk: fresh ones cost a page fault per 4 KiB (about as
    much as the walk itself, measured here)."""

    def __init__(self) -> None:
        self.starts = np.empty((0, len(KEYS)), dtype=np.int64)
        self.ends = np.empty((0, len(KEYS)), dtype=np.int64)

    def take(self, n_events: int) -> tuple[np.ndarray, np.ndarray]:
        if self.starts.shape[0] < n_events:
            rows = max(n_events, self.starts.shape[0] * 5 // 4)
            self.starts = np.empty((rows, len(KEYS)), dtype=np.int64)
            self.ends = np.empty((rows, len(KEYS)), dtype=np.int64)
        return self.starts[:n_events], self.ends[:n_events]


def find_spans(
    buf: np.ndarray, n_events: int, scratch: SpanScratch | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spans (starts, ends), each of shape (n_events, len(KEYS)), -1 where a key is absent, and
    the total span length per key (a bound for the string columns' data).

    Row-major by event, so the conversion pass that follows reads each event's bytes once while
    they are in cache. With `scratch`, the arrays are views into it, valid until its next use.
    """
    starts, ends = (scratch or SpanScratch()).take(n_events)
    totals = np.zeros(len(KEYS), dtype=np.int64)
    found = walk(buf, starts, ends, totals, _KEY_BYTES, _KEY_OFFSETS, N_EVENT_KEYS, ARGS)
    if found != n_events:
        raise AssertionError(f"walker found {found} events, scanner {n_events}")
    return starts, ends, totals
