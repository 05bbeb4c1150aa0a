"""Exact JSON number text → int64, vectorised over value spans (numba).

`ts` in a Kineto trace is microseconds written as an integer or as decimal text such as
`1712345678901234.567`; a float64 holds only ~15.9 significant digits, so at epoch scale it drops
the nanoseconds. Here the digits are read as an integer mantissa and shifted by
an exact power of ten (`scale` = 3 turns µs into ns). Digits below the unit are rounded half to
even (Kineto writes at most 3 decimals, so this never happens on real traces).

The input is the trace text and, per row, the span [start, end) of a value found by `fused.scan`
(start -1: the key is absent). The text is already known to be valid JSON.
"""

from __future__ import annotations

import numpy as np

from warehouse.readers.jit import kernel
from warehouse.readers.swar import eight_digits, load8, parse8

# Error codes (the parse stops at the first error and reports its row).
E_STRING = 1
E_BOOL = 2
E_CONTAINER = 3
E_OVERFLOW = 4
E_NOT_INT = 5
E_NOT_FINITE = 6

ERROR_TEXT = {
    E_STRING: "is a string, expected a number",
    E_BOOL: "is a boolean, expected a number",
    E_CONTAINER: "is an object or array, expected a number",
    E_OVERFLOW: "is outside the signed 64-bit range lumos stores (±9223372036854775807)",
    E_NOT_INT: "is not an integer",
    E_NOT_FINITE: "is not a finite number (NaN or infinity)",
}

# How a column treats values that are not plain numbers.
M_NUMBER = 0  # ts/dur: a number or null, anything else is an error
M_LABEL = 1  # pid/tid: an integer, or a string whose first integer is taken ("stream 7" → 7)
# promoted args: integers and int-like strings ("7", "0x0"); other types → null; an integer
# beyond int64 is refused like any other (a wrong id would mislink the graph silently)
M_LENIENT = 2

_INT64_MAX = np.int64(9223372036854775807)
_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
# the largest mantissa that each power of ten can scale without overflow (a lookup, not a division)
_SCALE_LIMIT = np.array([(2**63 - 1) // 10**k for k in range(19)], dtype=np.int64)


@kernel(inline=True)
def _number(buf, a, b, scale):  # pragma: no cover - numba
    """Parse the JSON number buf[a:b] × 10**scale. Returns (value, code, is_integer_text)."""
    p = a
    neg = False
    if buf[p] == 45:
        neg = True
        p += 1
    mant = np.int64(0)
    nd = 0  # digits in `mant`: below 19 of them it cannot overflow (no division per digit)
    # 8 digits at a time while they fit (an epoch timestamp in µs has 16 before its point)
    while nd <= 10 and p + 8 <= b:
        x = load8(buf, p)
        if not eight_digits(x):
            break
        mant = mant * 100000000 + parse8(x)
        nd += 8
        p += 8
    full = False  # digits were dropped: the first one is `guard`,
    guard = np.int64(0)
    sticky = False  # and a later one is not zero
    dropped = 0  # integer digits past what the mantissa holds: a power of ten each
    while p < b and 48 <= buf[p] <= 57:
        d = np.int64(buf[p] - 48)
        p += 1
        if full:
            dropped += 1
            sticky = sticky or d != 0
            continue
        if nd >= 18 and mant > (_INT64_MAX - d) // 10:
            # a negative exponent may still bring it in range ("9300000000000000000e-4")
            full = True
            guard = d
            dropped = 1
            continue
        mant = mant * 10 + d
        nd += 1
    frac = 0
    exp = 0
    is_int = True
    if p < b and buf[p] == 46:
        is_int = False
        p += 1
        # Zeros are taken in only when a non-zero digit follows (trailing zeros change nothing).
        # Fraction digits past what the mantissa holds lie far below the unit: they are dropped
        # and only say whether the rounding below is a tie ("1.000000000000000000001" is 1).
        zeros = 0
        while p < b and 48 <= buf[p] <= 57:
            d = np.int64(buf[p] - 48)
            p += 1
            if d == 0:
                zeros += 1
                continue
            if full:
                sticky = True
                continue
            for z in range(zeros + 1):
                dd = d if z == zeros else np.int64(0)
                if nd >= 18 and mant > (_INT64_MAX - dd) // 10:
                    full = True
                    guard = dd
                    sticky = z < zeros  # the non-zero digit after the dropped zeros
                    break
                mant = mant * 10 + dd
                nd += 1
                frac += 1
            zeros = 0
    if p < b and (buf[p] == 101 or buf[p] == 69):
        is_int = False
        p += 1
        eneg = False
        if buf[p] == 43 or buf[p] == 45:
            eneg = buf[p] == 45
            p += 1
        while p < b and 48 <= buf[p] <= 57:
            if exp < 100000:
                exp = exp * 10 + (buf[p] - 48)
            p += 1
        if eneg:
            exp = -exp
    shift = scale + exp - frac + dropped
    if full and shift > 0:  # the dropped digits were at or above the unit after all
        return np.int64(0), E_OVERFLOW, is_int
    if full and shift == 0:  # the dropped digits are the fraction of the unit: round them
        v = mant
        if guard > 5 or (guard == 5 and (sticky or (v & 1) == 1)):
            if v == _INT64_MAX:
                return np.int64(0), E_OVERFLOW, is_int
            v += 1
        return (-v if neg else v), 0, is_int
    if mant == 0:
        v = np.int64(0)
    elif shift >= 0:
        if shift > 18:
            return np.int64(0), E_OVERFLOW, is_int
        if mant > _SCALE_LIMIT[shift]:
            return np.int64(0), E_OVERFLOW, is_int
        v = mant * _POW10[shift]
    elif -shift > 19:
        v = np.int64(0)  # mant < 2**63 < 10**20 / 2: rounds to zero
    elif -shift == 19:  # 10**19 does not fit: compare with its half
        half = np.int64(5) * _POW10[18]
        up = mant > half or (mant == half and (guard > 0 or sticky))
        v = np.int64(1) if up else np.int64(0)
    else:
        m = _POW10[-shift]
        q = mant // m
        r = mant - q * m
        if 2 * r > m or (2 * r == m and (guard > 0 or sticky or (q & 1) == 1)):
            q += 1
        v = q
    return (-v if neg else v), 0, is_int


@kernel
def _int_in_string(buf, a, b, hex_ok):  # pragma: no cover - numba
    """The first integer inside the string content buf[a:b]; (value, found, overflow)."""
    p = a
    if hex_ok:
        # the whole content must be an integer: decimal or 0x-hex, optional sign
        q = a
        neg = False
        if q < b and (buf[q] == 45 or buf[q] == 43):
            neg = buf[q] == 45
            q += 1
        if q + 1 < b and buf[q] == 48 and (buf[q + 1] == 120 or buf[q + 1] == 88):
            q += 2
            if q == b:
                return np.int64(0), False, False
            v = np.int64(0)
            while q < b:
                c = buf[q]
                if 48 <= c <= 57:
                    d = c - 48
                elif 97 <= c <= 102:
                    d = c - 87
                elif 65 <= c <= 70:
                    d = c - 55
                else:
                    return np.int64(0), False, False
                if v > (_INT64_MAX - d) // 16:
                    return np.int64(0), False, True
                v = v * 16 + d
                q += 1
            return (-v if neg else v), True, False
        if q == b:
            return np.int64(0), False, False
        v = np.int64(0)
        while q < b:
            c = buf[q]
            if not 48 <= c <= 57:
                return np.int64(0), False, False
            d = c - 48
            if v > (_INT64_MAX - d) // 10:
                return np.int64(0), False, True
            v = v * 10 + d
            q += 1
        return (-v if neg else v), True, False
    while p < b and not 48 <= buf[p] <= 57:
        p += 1
    if p == b:
        return np.int64(0), False, False
    neg = p > a and buf[p - 1] == 45
    v = np.int64(0)
    while p < b and 48 <= buf[p] <= 57:
        d = buf[p] - 48
        if v > (_INT64_MAX - d) // 10:
            return np.int64(0), False, False  # a huge number in a label: no integer part
        v = v * 10 + d
        p += 1
    # an escape before or in the digits ("\u0037" is "7", not 37): the raw text is not the label
    for q in range(a, p):
        if buf[q] == 92:
            return np.int64(0), False, False
    return (-v if neg else v), True, False


@kernel(inline=True)
def _nonfinite(buf, a, b):  # pragma: no cover - numba
    """Whether the (valid) value buf[a:b] is NaN, Infinity, inf or nan, signed or not: the
    non-JSON spellings `fused._nonfinite` lets through."""
    c = buf[a + 1] if buf[a] == 45 and b - a > 1 else buf[a]
    return c == 73 or c == 78 or c == 105 or (c == 110 and b - a == 3)


@kernel(inline=True)
def int_value(buf, a, b, scale, mode):  # pragma: no cover - numba
    """The value span buf[a:b] (a < 0: absent) as (value, present, error code)."""
    if a < 0:
        return np.int64(0), False, 0
    c = buf[a]
    if (c > 57 or c == 45) and _nonfinite(buf, a, b):  # not a digit or a quote: checked
        return np.int64(0), False, 0 if mode == M_LENIENT else E_NOT_FINITE
    if c == 110:  # null
        return np.int64(0), False, 0
    if c == 34:  # a string
        if mode == M_NUMBER:
            return np.int64(0), False, E_STRING
        v, found, overflow = _int_in_string(buf, a + 1, b - 1, mode == M_LENIENT)
        if overflow:
            return np.int64(0), False, E_OVERFLOW
        return v, found, 0
    if c == 116 or c == 102:
        return np.int64(0), False, 0 if mode == M_LENIENT else E_BOOL
    if c == 123 or c == 91:
        return np.int64(0), False, 0 if mode == M_LENIENT else E_CONTAINER
    v, code, is_int = _number(buf, a, b, scale)
    if not is_int and mode == M_LENIENT:
        return np.int64(0), False, 0
    if code != 0:
        return np.int64(0), False, code
    if not is_int and mode == M_LABEL:
        return np.int64(0), False, E_NOT_INT
    return v, True, 0
