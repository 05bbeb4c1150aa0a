"""SIMD within a register: find the next byte of interest in a string 8 bytes at a time.

JSON string contents are most of a trace's bytes (names, keys, args text), and a string only ends
or needs attention at a quote, a backslash or a control character. `special8` tests 8 bytes for
those with a few integer operations (the classic has-zero-byte / has-less-than tricks) instead of
8 compares and branches, and `skip_plain` uses it to jump to the next such byte.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from warehouse.readers.jit import kernel

_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(0x2222222222222222)
_BACKSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
_SPACES = np.uint64(0x2020202020202020)  # bytes below 0x20 are control characters


@intrinsic
def load8(typingctx, arr, i):  # pragma: no cover - numba
    """The 8 bytes of a uint8 array at index i as a little-endian uint64 (unaligned load).

    No bounds check: the caller guarantees i + 8 <= len(arr).
    """
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8):
        return None
    if not isinstance(i, types.Integer):
        return None
    sig = types.uint64(arr, i)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.gep(ary.data, [idx])
        word = builder.bitcast(ptr, ir.IntType(64).as_pointer())
        return builder.load(word, align=1)

    return sig, codegen


@kernel(inline=True)
def special8(x):  # pragma: no cover - numba
    """High bit set in the byte lanes of `x` that are '"', '\\' or < 0x20. The lowest set lane is
    exact (a borrow only reaches lanes above a true match), which is all `skip_plain` uses."""
    q = x ^ _QUOTES
    b = x ^ _BACKSLASHES
    return (((q - _ONES) & ~q) | ((b - _ONES) & ~b) | ((x - _SPACES) & ~x)) & _HIGH


@kernel(inline=True)
def skip_plain(buf, i, n):  # pragma: no cover - numba
    """The first index >= i of a '"', '\\' or control byte, looking 8 bytes at a time while 8
    remain; `n - 8 < result <= n` (or a special byte) when fewer than 8 bytes remain."""
    return skip_plain_high(buf, i, n, np.uint64(0))[0]


@kernel(inline=True)
def skip_plain_high(buf, i, n, high):  # pragma: no cover - numba
    """`skip_plain`, and `high` ORed with every 8-byte word it read (`has_high` of it: a byte
    >= 0x80 among them, possibly just past the special byte it stopped at)."""
    while i + 8 <= n:
        x = load8(buf, i)
        high |= x
        m = special8(x)
        if m != 0:
            return i + (np.int64(trailing_zeros(m)) >> 3), high
        i += 8
    return i, high


@kernel(inline=True)
def has_high(x):  # pragma: no cover - numba
    """Whether a byte of `x` is >= 0x80."""
    return (x & _HIGH) != 0


@intrinsic
def store8(typingctx, arr, i, word):  # pragma: no cover - numba
    """Store the uint64 `word` little-endian into the uint8 array at index i (unaligned).

    No bounds check: the caller guarantees i + 8 <= len(arr).
    """
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8):
        return None
    if not isinstance(i, types.Integer) or word != types.uint64:
        return None
    sig = types.void(arr, i, word)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.gep(ary.data, [idx])
        builder.store(args[2], builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


@kernel(inline=True)
def copy_bytes(src, a, b, dst, o):  # pragma: no cover - numba
    """dst[o : o + b - a] = src[a:b], 8 bytes at a time; returns o + b - a.

    A loop of word loads and stores rather than a slice assignment: numba copies slices that may
    overlap through a temporary (an allocation, which the reader's kernels have none of), and a
    byte loop is not vectorised (it was ~1 ns a byte). Never writes past dst[o + b - a].
    """
    while a + 8 <= b:
        store8(dst, o, load8(src, a))
        a += 8
        o += 8
    while a < b:
        dst[o] = src[a]
        a += 1
        o += 1
    return o


_ZEROS = np.uint64(0x3030303030303030)
_NIBBLE_HIGH = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIXES = np.uint64(0x0606060606060606)
_LOW_BYTES = np.uint64(0x000000FF000000FF)
_MUL1 = np.uint64(100 + (1000000 << 32))
_MUL2 = np.uint64(1 + (10000 << 32))
_EIGHT = np.uint64(8)
_SIXTEEN = np.uint64(16)
_THIRTY_TWO = np.uint64(32)
_TEN = np.uint64(10)


@kernel(inline=True)
def eight_digits(x):  # pragma: no cover - numba
    """Whether the 8 bytes of `x` (as `load8` reads them) are all ASCII digits."""
    return (x & _NIBBLE_HIGH) == _ZEROS and ((x + _SIXES) & _NIBBLE_HIGH) == _ZEROS


@kernel(inline=True)
def parse8(x):  # pragma: no cover - numba
    """The value of 8 ASCII digits (first byte most significant), as `eight_digits` accepted
    them: three multiply-and-shift steps instead of eight (simdjson's parse_eight_digits)."""
    v = x - _ZEROS
    v = v * _TEN + (v >> _EIGHT)
    v = ((v & _LOW_BYTES) * _MUL1 + ((v >> _SIXTEEN) & _LOW_BYTES) * _MUL2) >> _THIRTY_TWO
    return np.int64(v)
