"""The reader's per-chunk facts, computed by numba over the columns in place: the category
dictionary (`categories.encode_categories`) and the timed span (`timespan.timed_span`), each
against a plain-Python reference, on arrays with nulls, slices and many distinct values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as hs

from warehouse.readers.categories import MAX_SCANNED, encode_categories, normalise
from warehouse.readers.timespan import timed_span

_CATS = hs.one_of(
    hs.none(),
    hs.sampled_from(
        ["cpu_op", "kernel", "Kernel", "Runtime", "cuda_runtime", "", "é", "cpu_o", "cpu_oq"]
        + ["user_annotation", "user_annotatioN", "gpu_user_annotation", "cuda_runtimf"]
    ),
    hs.text(max_size=20),
)


def _sliced(values: list, type_: pa.DataType, cut: int) -> pa.Array:
    """`values` as an Arrow array that is a slice of a longer one (nonzero offset) when cut > 0."""
    return pa.array(["pad"] * cut + values if type_ == pa.string() else [7] * cut + values, type_)[
        cut:
    ]


@settings(max_examples=200, deadline=None)
@given(hs.lists(_CATS, max_size=300), hs.integers(0, 9))
def test_category_dictionary_matches_python(cats: list, cut: int) -> None:
    enc = encode_categories(_sliced(cats, pa.string(), cut))
    distinct = list(dict.fromkeys(c for c in cats if c is not None))
    assert enc.raw == distinct  # in order of first appearance
    assert enc.codes.tolist() == [len(distinct) if c is None else distinct.index(c) for c in cats]
    assert enc.cat.to_pylist() == [normalise(c) for c in cats]
    counts: dict[str, int] = {}
    for c in cats:
        counts[c or ""] = counts.get(c or "", 0) + 1
    assert enc.raw_counts() == counts


def test_more_categories_than_scanned() -> None:
    cats = [f"c{i % (MAX_SCANNED + 5)}" for i in range(1000)] + [None, "Kernel"]
    enc = encode_categories(pa.array(cats))
    distinct = list(dict.fromkeys(c for c in cats if c is not None))
    assert enc.raw == distinct
    assert enc.cat.to_pylist() == [normalise(c) for c in cats]
    assert enc.codes[-2] == len(distinct)


_ROW = hs.tuples(
    hs.one_of(hs.none(), hs.sampled_from(["X", "M", "i", "MM", "", "b"])),
    hs.one_of(hs.none(), hs.integers(-(2**40), 2**40)),
    hs.one_of(hs.none(), hs.integers(0, 2**30)),
)


@settings(max_examples=200, deadline=None)
@given(hs.lists(_ROW, max_size=200), hs.integers(0, 5))
def test_timed_span_matches_python(rows: list, cut: int) -> None:
    ph, ts, dur = ([r[i] for r in rows] for i in range(3))
    timed = [(t, t + (d or 0)) for p, t, d in rows if t is not None and p != "M"]
    want = (min(s for s, _ in timed), max(e for _, e in timed)) if timed else None
    got = timed_span(
        _sliced(ph, pa.string(), cut), _sliced(ts, pa.int64(), cut), _sliced(dur, pa.int64(), cut)
    )
    assert got == want


def test_null_rows_holding_bytes_still_read_as_empty() -> None:
    # Arrow allows a null slot to span bytes; the zero-copy '' (validity dropped) must not apply
    offsets = pa.py_buffer(np.array([0, 6, 9, 15], dtype=np.int32))
    data = pa.py_buffer(b"cpu_opXYZkernel")
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little"))
    arr = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data])
    assert encode_categories(arr).cat.to_pylist() == ["cpu_op", "", "kernel"]
