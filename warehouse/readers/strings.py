"""Value spans → Arrow string columns, built in numba without a Python object per value.

JSON strings are unescaped (\\n, \\", \\uXXXX with surrogate pairs → UTF-8) so the column holds
the value the `json` module would return; non-string values are either an error, dropped, or kept
as their JSON text, depending on the column's mode.
"""

from __future__ import annotations

from warehouse.readers.jit import kernel
from warehouse.readers.swar import copy_bytes, skip_plain

G_STRICT = 0  # a string or null; anything else is an error (ph, name, cat, bp)
G_ONLY_STR = 1  # strings; other values → null (pid/tid labels)
G_LENIENT = 2  # strings unescaped; other values as JSON text (dtype, Process Group Ranks)
G_RAW = 3  # the JSON text as written (args_json, Input Dims); null → null

E_NOT_STRING = 1


@kernel
def _hex4(buf, p):  # pragma: no cover - numba
    v = 0
    for q in range(p, p + 4):
        c = buf[q]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        else:
            d = c - 55
        v = v * 16 + d
    return v


@kernel
def _put_utf8(out, o, cp):  # pragma: no cover - numba
    if cp < 0x80:
        out[o] = cp
        return o + 1
    if cp < 0x800:
        out[o] = 0xC0 | (cp >> 6)
        out[o + 1] = 0x80 | (cp & 0x3F)
        return o + 2
    if cp < 0x10000:
        out[o] = 0xE0 | (cp >> 12)
        out[o + 1] = 0x80 | ((cp >> 6) & 0x3F)
        out[o + 2] = 0x80 | (cp & 0x3F)
        return o + 3
    out[o] = 0xF0 | (cp >> 18)
    out[o + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[o + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[o + 3] = 0x80 | (cp & 0x3F)
    return o + 4


@kernel
def _unescape(buf, a, b, out, o):  # pragma: no cover - numba
    """Copy the string content buf[a:b] (between the quotes) to out[o:], unescaped."""
    p = a
    while p < b:
        c = buf[p]
        if c != 92:
            out[o] = c
            o += 1
            p += 1
            continue
        e = buf[p + 1]
        p += 2
        if e == 110:
            out[o] = 10
        elif e == 116:
            out[o] = 9
        elif e == 114:
            out[o] = 13
        elif e == 98:
            out[o] = 8
        elif e == 102:
            out[o] = 12
        elif e == 117:
            cp = _hex4(buf, p)
            p += 4
            if 0xD800 <= cp < 0xDC00 and p + 6 <= b and buf[p] == 92 and buf[p + 1] == 117:
                lo = _hex4(buf, p + 2)
                if 0xDC00 <= lo < 0xE000:
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                    p += 6
            if 0xD800 <= cp < 0xE000:
                cp = 0xFFFD  # a lone surrogate has no UTF-8 form
            o = _put_utf8(out, o, cp)
            continue
        else:  # \" \\ \/
            out[o] = e
        o += 1
    return o


@kernel(inline=True)
def str_value(buf, a, b, mode, out, o):  # pragma: no cover - numba
    """Append the value span buf[a:b] (a < 0: absent) to out[o:]: (new o, present, error code)."""
    if a < 0:
        return o, False, 0
    c = buf[a]
    if c == 34:
        if mode == G_RAW:
            return copy_bytes(buf, a, b, out, o), True, 0
        # the content holds no quote or control byte (validated): the first special byte is an
        # escape; up to it the bytes are copied as they are, from it on unescaped
        q = skip_plain(buf, a + 1, b - 1)
        while q < b - 1 and buf[q] != 92:
            q += 1
        o = copy_bytes(buf, a + 1, q, out, o)
        if q < b - 1:
            return _unescape(buf, q, b - 1, out, o), True, 0
        return o, True, 0
    if c == 110 and b - a == 4:  # null
        return o, False, 0
    if mode == G_STRICT:
        return o, False, E_NOT_STRING
    if mode == G_ONLY_STR:
        return o, False, 0
    return copy_bytes(buf, a, b, out, o), True, 0
