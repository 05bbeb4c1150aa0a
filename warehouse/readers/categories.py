"""Category normalisation across Kineto schema versions (legacy 2021, AMD/HIP, MTIA).

The aliases live in the schema registry (`warehouse.schema.CATEGORY_ALIASES`); this module applies
them to a whole column at once through its dictionary, so the cost is per distinct category,
not per event. The dictionary is found by a numba pass that compares each row's bytes with the
few categories seen so far (the previous row's first): a trace has a dozen categories, and
pyarrow's hash-based `dictionary_encode` cost more per chunk (docs/warehouse.md, "Module notes").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from warehouse.readers.jit import kernel
from warehouse.readers.swar import load8
from warehouse.readers.views import is_valid, str_view
from warehouse.schema import CATEGORY_ALIASES

# Categories that only the 2021 schema wrote; their presence marks a legacy trace.
LEGACY_CATEGORIES = frozenset({"Operator", "Runtime", "Kernel"})
# Past this many distinct categories in one chunk (not a Kineto trace's way) the linear search
# gives way to pyarrow's hash table.
MAX_SCANNED = 64


def normalise(cat: str | None) -> str:
    """The normalised name of one raw category ('' for an event without one)."""
    if cat is None:
        return ""
    return CATEGORY_ALIASES.get(cat, cat)


@dataclass(frozen=True)
class EncodedCategories:
    """A chunk's raw `cat` column encoded once: the normalised column, and per row the index of
    its raw category in `raw` (`len(raw)` for an event without one), which the reader's
    accounting counts instead of hashing the strings again."""

    cat: pa.Array
    raw: list[str]
    codes: np.ndarray
    counts: np.ndarray  # rows per code, len(raw) + 1 of them

    def raw_counts(self) -> dict[str, int]:
        """Events per raw category ('' for events without one, as `normalise` has it)."""
        out: dict[str, int] = {}
        for r, c in zip([*self.raw, ""], self.counts.tolist(), strict=True):
            if c:
                out[r] = out.get(r, 0) + c
        return out

    def rows_in(self, normalised: tuple[str, ...]) -> np.ndarray:
        """Per row, whether its normalised category is one of `normalised`."""
        hit = np.array([normalise(r) in normalised for r in self.raw] + [False], dtype=bool)
        return hit[self.codes]


@kernel(inline=True)
def _same(data, a, b, c, d):  # pragma: no cover - numba
    """data[a:b] == data[c:d], 8 bytes at a time while 8 remain in the buffer."""
    n = b - a
    if n != d - c:
        return False
    i = 0
    end = data.shape[0]
    while i + 8 <= n or (i < n and a + i + 8 <= end and c + i + 8 <= end):
        x = load8(data, a + i) ^ load8(data, c + i)
        if i + 8 > n:  # the last word: only its first n - i bytes are the strings'
            x &= (np.uint64(1) << np.uint64(8 * (n - i))) - np.uint64(1)
        if x != 0:
            return False
        i += 8
    while i < n:
        if data[a + i] != data[c + i]:
            return False
        i += 1
    return True


@kernel
def _codes(off, data, bits, bit0, codes, first, counts):  # pragma: no cover - numba
    """codes[k]: the index of row k's value among the distinct values in order of appearance
    (first[d]: the row where value d first appears; counts[d]: its rows); null rows get the
    number of values n. Returns (n, whether every null row is empty), n = -1 when there are
    more than len(first) values (the outputs are then undefined)."""
    n_distinct = 0
    last = -1
    empty_nulls = True
    for k in range(codes.shape[0]):
        a, b = off[k], off[k + 1]
        if not is_valid(bits, bit0, k):
            codes[k] = -1
            empty_nulls = empty_nulls and a == b
            continue
        if last >= 0 and _same(data, a, b, off[first[last]], off[first[last] + 1]):
            codes[k] = last
            counts[last] += 1
            continue
        hit = -1
        for d in range(n_distinct):
            if _same(data, a, b, off[first[d]], off[first[d] + 1]):
                hit = d
                break
        if hit < 0:
            if n_distinct == first.shape[0]:
                return -1, False
            first[n_distinct] = k
            hit = n_distinct
            n_distinct += 1
        codes[k] = hit
        counts[hit] += 1
        last = hit
    for k in range(codes.shape[0]):
        if codes[k] < 0:
            codes[k] = n_distinct
            counts[n_distinct] += 1
    return n_distinct, empty_nulls


@kernel
def _gather_bytes(codes, value_off, value_data, off, data):  # pragma: no cover - numba
    o = 0
    off[0] = 0
    for k in range(codes.shape[0]):
        c = codes[k]
        for i in range(value_off[c], value_off[c + 1]):
            data[o] = value_data[i]
            o += 1
        off[k + 1] = o


def _gather(values: list[str], codes: np.ndarray) -> pa.Array:
    """The string column whose row k is values[codes[k]] (a `take` without pyarrow compute,
    which costs 0.05 s to import)."""
    encoded = [v.encode() for v in values]
    value_off = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(v) for v in encoded], out=value_off[1:])
    size = int((value_off[1:] - value_off[:-1])[codes].sum())
    if size >= 2**31:
        raise ValueError("a category column over 2 GiB within one chunk")
    off = np.empty(len(codes) + 1, dtype=np.int32)
    data = np.empty(size, dtype=np.uint8)
    _gather_bytes(codes, value_off, np.frombuffer(b"".join(encoded), dtype=np.uint8), off, data)
    return pa.Array.from_buffers(
        pa.string(), len(codes), [None, pa.py_buffer(off), pa.py_buffer(data)]
    )


def encode_categories(cat_raw: pa.Array) -> EncodedCategories:
    """Normalise a raw `cat` column through its dictionary (cost per distinct category)."""
    v = str_view(cat_raw)
    codes = np.empty(len(cat_raw), dtype=np.int32)
    first = np.empty(MAX_SCANNED, dtype=np.int64)
    counts = np.zeros(MAX_SCANNED + 1, dtype=np.int64)
    n, empty_nulls = _codes(v.offsets, v.data, v.bits, v.bit0, codes, first, counts)
    if n >= 0:
        off = v.offsets
        raw = [bytes(v.data[off[r] : off[r + 1]]).decode() for r in first[:n]]
        counts = counts[: n + 1]
    else:
        import pyarrow.compute as pc  # rare: not imported by every ingest (0.05 s)

        encoded = pc.dictionary_encode(cat_raw)
        raw = encoded.dictionary.to_pylist()
        codes = encoded.indices.fill_null(len(raw)).to_numpy()
        counts = np.bincount(codes, minlength=len(raw) + 1)
        empty_nulls = False
    normalised = [normalise(c) for c in raw]
    if normalised != raw:
        cat = _gather([*normalised, ""], codes)
    elif cat_raw.null_count == 0:  # no alias applies (any trace of the current schema): no copy
        cat = cat_raw
    elif empty_nulls:  # the null rows hold no bytes: they read as '' without the validity
        _, offsets, data = cat_raw.buffers()
        cat = pa.Array.from_buffers(
            pa.string(), len(cat_raw), [None, offsets, data], 0, cat_raw.offset
        )
    else:
        cat = cat_raw.fill_null("")
    return EncodedCategories(cat, raw, codes, counts)
