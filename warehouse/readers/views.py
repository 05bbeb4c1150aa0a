"""numpy views of an Arrow array's buffers, for kernels that read a chunk's columns in place.

A kernel reads row k's validity as bit `bit0 + k` of `bits` (`bits` is empty when the array has
no validity buffer: every row valid).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from warehouse.readers.jit import kernel

_NO_BITS = np.zeros(0, dtype=np.uint8)


@dataclass(frozen=True)
class IntView:
    values: np.ndarray  # int64, one per row
    bits: np.ndarray
    bit0: int


@dataclass(frozen=True)
class StrView:
    offsets: np.ndarray  # int32, rows + 1, into `data`
    data: np.ndarray  # uint8
    bits: np.ndarray
    bit0: int


def _bits(arr: pa.Array) -> tuple[np.ndarray, int]:
    validity = arr.buffers()[0]
    if validity is None or arr.null_count == 0:
        return _NO_BITS, 0
    return np.frombuffer(validity, dtype=np.uint8), arr.offset


def valid_mask(bits: np.ndarray, bit0: int, n: int) -> np.ndarray:
    """Per row, whether it is valid (the view's `bits` and `bit0`)."""
    if bits.shape[0] == 0:
        return np.ones(n, dtype=bool)
    return np.unpackbits(bits, count=bit0 + n, bitorder="little")[bit0:].view(bool)


def int_view(arr: pa.Array) -> IntView:
    if arr.type != pa.int64():
        raise TypeError(f"int_view needs int64, got {arr.type}")
    values = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr)]
    return IntView(values, *_bits(arr))


def str_view(arr: pa.Array) -> StrView:
    if arr.type != pa.string():
        raise TypeError(f"str_view needs string, got {arr.type}")
    _, offsets, data = arr.buffers()
    off = np.frombuffer(offsets, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    raw = _NO_BITS if data is None else np.frombuffer(data, dtype=np.uint8)
    return StrView(off, raw, *_bits(arr))


@kernel(inline=True)
def is_valid(bits, bit0, k):  # pragma: no cover - numba
    if bits.shape[0] == 0:
        return True
    i = bit0 + k
    return (bits[i >> 3] >> (i & 7)) & 1 == 1
