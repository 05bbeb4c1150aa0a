"""One validating pass over a trace's bytes: top-level structure, JSON grammar, kept-key spans.

Replaces three passes (`scanner`, msgspec validation, `walker`) with one numba walk: `scan`
follows the top-level object like `scanner`, checks every event object against the JSON grammar
(NaN and Infinity refused) and records per event the byte span of each kept key
(`walker.KEYS`) into fixed-capacity arrays; a full capacity ends the call at a clean point.
UTF-8 is not checked here: `state[S_HIGH]` says whether the caller must check it. Details:
docs/warehouse.md, "Module notes".
"""

from __future__ import annotations

import numpy as np

from warehouse.readers.jit import kernel
from warehouse.readers.scanner import (
    E_DUPLICATE,
    E_EVENT_NOT_OBJECT,
    E_NOT_OBJECT,
    E_SYNTAX,
    E_TE_NOT_ARRAY,
    E_TRAILING,
    MAX_MEMBERS,
    P_AFTER,
    P_ARRAY,
    P_COLON,
    P_END,
    P_EVAFTER,
    P_KEY,
    P_MEMBER,
    P_NEXT_KEY,
    P_START,
    P_VALUE,
    _skip_string,
)
from warehouse.readers.swar import has_high, skip_plain_high
from warehouse.readers.walker import ARGS, KEYS, N_EVENT_KEYS

E_EVENT_JSON = -6  # invalid JSON inside an event; the reason is in state[S_REASON]

# Reasons for E_EVENT_JSON.
R_UNEXPECTED = 1
R_ESCAPE = 2
R_CONTROL = 3
R_NUMBER = 4
R_LITERAL = 5
R_DEPTH = 6
R_KEY = 7

REASON_TEXT = {
    R_UNEXPECTED: "unexpected character",
    R_ESCAPE: "invalid escape in a string",
    R_CONTROL: "unescaped control character in a string",
    R_NUMBER: "invalid number",
    R_LITERAL: "invalid literal",
    R_DEPTH: "nesting too deep",
    R_KEY: "expected a string key",
}

MAX_DEPTH = 256

# Spans are buffer positions: 32-bit halves the span arrays, which are read and written once per
# kept key and event (the buffer is a chunk plus one unfinished event, far below 2 GiB).
SPAN_DTYPE = np.int32
MAX_BUFFER = 2**31 - 1

(
    S_PHASE,
    S_CLEAN,
    S_EV_START,
    S_EV_END,
    S_N_MEMBERS,
    S_ERR_POS,
    S_SEEN_TE,
    S_EV_EXPECT,
    S_EV_COUNT,
    S_REASON,
    S_ERR_SCRATCH,  # 3 slots: the walkers' err; kernels allocate nothing (jit.py)
) = range(11)
# err: the position and reason of an error, and whether an event string held a byte >= 0x80
S_HIGH = S_ERR_SCRATCH + 2
# set by the caller for a whole file: the trace is a bare array of events (the Chrome trace
# format's array form), not an object with traceEvents
S_ARRAY_FORM = S_ERR_SCRATCH + 3
STATE_SIZE = S_ERR_SCRATCH + 4

_KEY_BYTES = np.frombuffer(b"".join(k.encode() for k in KEYS), dtype=np.uint8)
_KEY_OFFSETS = np.cumsum([0] + [len(k.encode()) for k in KEYS]).astype(np.int64)
_MAX_KEY_LEN = 32


def _key_table() -> np.ndarray:
    """[group, length, (first + 3 * last byte) & 255] -> the only kept key of that group (0: event
    fields, 1: args keys) with that signature, or -1: one lookup rejects or finds a key, and the
    caller compares its bytes once (no loop over the key list)."""
    table = np.full((2, _MAX_KEY_LEN, 256), -1, dtype=np.int16)
    for f, key in enumerate(KEYS):
        raw = key.encode()
        group = 0 if f < N_EVENT_KEYS else 1
        h = (raw[0] + 3 * raw[-1]) & 255
        if len(raw) >= _MAX_KEY_LEN or table[group, len(raw), h] != -1:
            raise AssertionError(f"kept key {key!r} breaks the key table: change _key_table")
        table[group, len(raw), h] = f
    return table


_KEY_TABLE = _key_table()
_TRACE_EVENTS = np.frombuffer(b"traceEvents", dtype=np.uint8)

# What the event walker expects next.
_X_KEY_OR_END = 0  # after '{'
_X_KEY = 1  # after ',' in an object
_X_VALUE_OR_END = 2  # after '['
_X_VALUE = 3  # after ':' or after ',' in an array
_X_COMMA_OR_END = 4  # after a value
_OBJ = 0
_ARR = 1


@kernel(inline=True)
def _ws(buf, i, n):  # pragma: no cover - numba
    while i < n:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            return i
        i += 1
    return i


@kernel(inline=True)
def _is_hex(c):  # pragma: no cover - numba
    return (48 <= c <= 57) or (97 <= c <= 102) or (65 <= c <= 70)


@kernel(inline=True)
def _string(buf, i, n, err):  # pragma: no cover - numba
    """`buf[i]` follows an opening quote. End after the closing quote; -1 incomplete; -2 error.
    Bytes >= 0x80 seen on the way set err[2] (the words read 8 at a time may reach past the
    string's end: a flag set by those only costs the caller an exact check)."""
    high = np.uint64(0)
    while i < n:
        i, high = skip_plain_high(buf, i, n, high)  # 8 plain bytes at a time
        if i >= n:
            _high(err, high)
            return -1
        c = buf[i]
        if c > 92 or (34 < c < 92):  # the last < 8 bytes of the buffer go one by one
            high |= np.uint64(c)
            i += 1
            continue
        if c == 34:
            _high(err, high)
            return i + 1
        if c == 92:
            if i + 1 >= n:
                return -1
            e = buf[i + 1]
            if e == 117:  # \uXXXX
                for k in range(i + 2, i + 6):
                    if k >= n:
                        return -1
                    if not _is_hex(buf[k]):
                        err[0] = i
                        err[1] = R_ESCAPE
                        return -2
                i += 6
            elif (
                e == 34
                or e == 92
                or e == 47
                or e == 98
                or e == 102
                or e == 110
                or e == 114
                or e == 116  # " \\ / b f n r t
            ):
                i += 2
            else:
                err[0] = i
                err[1] = R_ESCAPE
                return -2
        elif c < 32:
            err[0] = i
            err[1] = R_CONTROL
            return -2
        else:
            i += 1
    _high(err, high)
    return -1


@kernel(inline=True)
def _high(err, high):  # pragma: no cover - numba
    if has_high(high):
        err[2] = 1


@kernel(inline=True)
def _digits(buf, j, n):  # pragma: no cover - numba
    while j < n and 48 <= buf[j] <= 57:
        j += 1
    return j


@kernel(inline=True)
def _number(buf, i, n, err):  # pragma: no cover - numba
    """A JSON number starting at `buf[i]`: its end; -1 incomplete; -2 error."""
    j = i
    if buf[j] == 45:  # '-'
        j += 1
        if j >= n:
            return -1
    c = buf[j]
    if c == 48:
        j += 1
    elif 49 <= c <= 57:
        j = _digits(buf, j + 1, n)
    elif c == 73 or c == 78 or c == 105 or c == 110:  # -Infinity, -NaN, -inf, -nan
        return _nonfinite(buf, j, n, err, i)
    else:
        err[0] = i
        err[1] = R_NUMBER
        return -2
    if j >= n:
        return -1
    if buf[j] == 46:  # '.'
        j += 1
        if j >= n:
            return -1
        if not 48 <= buf[j] <= 57:
            err[0] = i
            err[1] = R_NUMBER
            return -2
        j = _digits(buf, j + 1, n)
        if j >= n:
            return -1
    if buf[j] == 101 or buf[j] == 69:  # 'e' 'E'
        j += 1
        if j >= n:
            return -1
        if buf[j] == 43 or buf[j] == 45:
            j += 1
            if j >= n:
                return -1
        if not 48 <= buf[j] <= 57:
            err[0] = i
            err[1] = R_NUMBER
            return -2
        j = _digits(buf, j + 1, n)
        if j >= n:
            return -1
    return j


@kernel
def _nonfinite(buf, i, n, err, start):  # pragma: no cover - numba
    """NaN, nan, Infinity or inf at `buf[i]` (after a '-' at `start` < i): its end; -1 incomplete;
    -2 error. Not JSON, but written by real profilers: Kineto of early 2021 wrote a zero-length
    memcpy's bandwidth as `inf` (C++'s spelling), Python's json module writes NaN and Infinity.
    They are values like any number: kept in `args_json` as written (DuckDB's JSON functions
    read all four spellings), refused where a column needs an integer."""
    c = buf[i]
    if c == 73:
        word = (73, 110, 102, 105, 110, 105, 116, 121)  # Infinity
        m = 8
    elif c == 78:
        word = (78, 97, 78, 0, 0, 0, 0, 0)  # NaN
        m = 3
    elif c == 105:
        word = (105, 110, 102, 0, 0, 0, 0, 0)  # inf
        m = 3
    else:
        word = (110, 97, 110, 0, 0, 0, 0, 0)  # nan
        m = 3
    for k in range(m):
        if i + k >= n:
            return -1
        if buf[i + k] != word[k]:
            err[0] = start
            err[1] = R_LITERAL
            return -2
    return i + m


@kernel
def _literal(buf, i, n, err):  # pragma: no cover - numba
    """true / false / null (or nan, see `_nonfinite`) at `buf[i]`: its end; -1 incomplete;
    -2 error."""
    c = buf[i]
    if c == 110:
        if i + 1 >= n:
            return -1
        if buf[i + 1] == 97:
            return _nonfinite(buf, i, n, err, i)
    if c == 116:
        word = (116, 114, 117, 101)
        m = 4
    elif c == 102:
        word = (102, 97, 108, 115)  # 'fals', then the 'e' below
        m = 5
    else:
        word = (110, 117, 108, 108)
        m = 4
    for k in range(m):
        if i + k >= n:
            return -1
        want = word[k] if k < 4 else 101
        if buf[i + k] != want:
            err[0] = i
            err[1] = R_LITERAL
            return -2
    return i + m


@kernel(inline=True)
def _scalar(buf, i, n, err):  # pragma: no cover - numba
    c = buf[i]
    if c == 34:
        return _string(buf, i + 1, n, err)
    if c == 45 or 48 <= c <= 57:
        return _number(buf, i, n, err)
    if c == 116 or c == 102 or c == 110:
        return _literal(buf, i, n, err)
    if c == 78 or c == 73 or c == 105:
        return _nonfinite(buf, i, n, err, i)
    err[0] = i
    err[1] = R_UNEXPECTED
    return -2


@kernel(inline=True)
def _match(buf, ks, ke, kbytes, koff, table, group):  # pragma: no cover - numba
    """Index of the kept key of `group` whose bytes equal buf[ks:ke], or -1."""
    length = ke - ks
    if length <= 0 or length >= table.shape[1]:
        return -1
    f = table[group, length, (buf[ks] + 3 * buf[ke - 1]) & 255]
    if f < 0:
        return -1
    a = koff[f]
    for m in range(length):
        if buf[ks + m] != kbytes[a + m]:
            return -1
    return f


@kernel(inline=True)
def _hex(c):  # pragma: no cover - numba
    if c <= 57:
        return c - 48
    return (c | 32) - 87


@kernel(inline=True)
def _key_char(buf, i):  # pragma: no cover - numba
    """(byte, next position) of the key character at buf[i], escapes decoded; 256 for a
    `\\uXXXX` beyond ASCII (no kept key holds one). The string was validated by `_string`."""
    c = buf[i]
    if c != 92:
        return c, i + 1
    e = buf[i + 1]
    if e == 117:
        v = (_hex(buf[i + 2]) << 12) | (_hex(buf[i + 3]) << 8) | (_hex(buf[i + 4]) << 4)
        v |= _hex(buf[i + 5])
        return (v if v < 128 else 256), i + 6
    if e == 98:
        return 8, i + 2
    if e == 102:
        return 12, i + 2
    if e == 110:
        return 10, i + 2
    if e == 114:
        return 13, i + 2
    if e == 116:
        return 9, i + 2
    return e, i + 2  # " \\ /


@kernel
def _match_escaped(buf, ks, ke, kbytes, koff, table, group):  # pragma: no cover - numba
    """As `_match` for a key written with escapes ("n\\u0061me" is "name", as `json` reads it):
    one pass for the decoded length and end bytes, one to compare."""
    length = 0
    first = -1
    last = -1
    i = ks
    while i < ke:
        c, i = _key_char(buf, i)
        if first < 0:
            first = c
        last = c
        length += 1
    if length <= 0 or length >= table.shape[1] or last > 255 or first > 255:
        return -1
    f = table[group, length, (first + 3 * last) & 255]
    if f < 0:
        return -1
    a = koff[f]
    i = ks
    for m in range(length):
        c, i = _key_char(buf, i)
        if c != kbytes[a + m]:
            return -1
    return f


@kernel(inline=True)
def _find_key(buf, ks, ke, kbytes, koff, table, group):  # pragma: no cover - numba
    f = _match(buf, ks, ke, kbytes, koff, table, group)
    if f >= 0:
        return f
    for m in range(ks, ke):
        if buf[m] == 92:  # rare: only a key that matched nothing is looked at again
            return _match_escaped(buf, ks, ke, kbytes, koff, table, group)
    return -1


@kernel
def _event(
    buf, i, n, ev, starts, ends, totals, kbytes, koff, table, args_field, stack, err
):  # pragma: no cover - numba
    """Validate the event whose '{' is at buf[i] and record its kept-key spans in row `ev`.

    Returns the event's end; -1 when the buffer ends inside it; -2 on a grammar error (err[0]:
    position, err[1]: reason). Iterative with an explicit stack (numba's on-disk cache mishandles
    recursive functions).
    """
    for f in range(starts.shape[1]):
        starts[ev, f] = -1
    depth = 1
    stack[1] = _OBJ
    expect = _X_KEY_OR_END
    in_args = False
    f1 = -1  # field of the current event member
    v1 = 0
    f2 = -1  # field of the current args member
    v2 = 0
    i += 1
    while True:
        i = _ws(buf, i, n)
        if i >= n:
            return -1
        c = buf[i]
        closed = False
        if expect == _X_KEY_OR_END or expect == _X_KEY:
            if c == 34:
                ks = i + 1
                j = _string(buf, ks, n, err)
                if j < 0:
                    return j
                if depth == 1:
                    f1 = _find_key(buf, ks, j - 1, kbytes, koff, table, 0)
                elif depth == 2 and in_args:
                    f2 = _find_key(buf, ks, j - 1, kbytes, koff, table, 1)
                i = _ws(buf, j, n)
                if i >= n:
                    return -1
                if buf[i] != 58:
                    err[0] = i
                    err[1] = R_UNEXPECTED
                    return -2
                i += 1
                expect = _X_VALUE
                continue
            if c == 125 and expect == _X_KEY_OR_END:
                closed = True
            else:
                err[0] = i
                err[1] = R_KEY
                return -2
        elif expect == _X_VALUE or expect == _X_VALUE_OR_END:
            if c == 93 and expect == _X_VALUE_OR_END:
                closed = True
            else:
                if depth == 1:
                    v1 = i
                elif depth == 2:
                    v2 = i
                if c == 123 or c == 91:
                    if depth + 1 >= stack.shape[0]:
                        err[0] = i
                        err[1] = R_DEPTH
                        return -2
                    depth += 1
                    if c == 123:
                        stack[depth] = _OBJ
                        expect = _X_KEY_OR_END
                    else:
                        stack[depth] = _ARR
                        expect = _X_VALUE_OR_END
                    if depth == 2:
                        in_args = c == 123 and f1 == args_field
                    i += 1
                    continue
                j = _scalar(buf, i, n, err)
                if j < 0:
                    return j
                i = j
                # a value ends here: record it (below)
        else:  # _X_COMMA_OR_END
            kind = stack[depth]
            if c == 44:
                expect = _X_KEY if kind == _OBJ else _X_VALUE
                i += 1
                continue
            if (c == 125 and kind == _OBJ) or (c == 93 and kind == _ARR):
                closed = True
            else:
                err[0] = i
                err[1] = R_UNEXPECTED
                return -2
        if closed:
            i += 1
            depth -= 1
            if depth == 0:
                return i
        # a value of the container at `depth` ended at i
        if depth == 1:
            if f1 >= 0:
                starts[ev, f1] = v1
                ends[ev, f1] = i
                totals[f1] += i - v1
                f1 = -1
        elif depth == 2 and in_args:
            if f2 >= 0:
                starts[ev, f2] = v2
                ends[ev, f2] = i
                totals[f2] += i - v2
                f2 = -1
        expect = _X_COMMA_OR_END


@kernel
def scan(
    buf, state, members, te, starts, ends, totals, kbytes, koff, table, args_field, stack
):  # pragma: no cover - numba
    """Scan `buf` from position 0 in phase `state[S_PHASE]`, validating and walking events.

    As `scanner.scan`, plus: each complete event's kept-key spans go to row `S_EV_COUNT` of
    starts/ends (positions in `buf`) and their lengths are added to `totals`; the call stops at
    a clean point when `starts` is full. Returns 0 or a negative error code, with the position in
    state[S_ERR_POS] (and for E_EVENT_JSON the reason in state[S_REASON]).
    """
    n = buf.shape[0]
    cap = starts.shape[0]
    err = state[S_ERR_SCRATCH : S_HIGH + 1]
    err[2] = 0
    phase = state[S_PHASE]
    array_form = state[S_ARRAY_FORM] != 0
    seen_te = state[S_SEEN_TE]
    ev_expect = state[S_EV_EXPECT]
    clean = 0
    clean_phase = phase
    clean_ev_expect = ev_expect
    ev_start = -1
    ev_end = -1
    ev_count = 0
    n_members = 0
    key_start = -1
    key_end = -1
    val_start = -1
    is_te = False
    i = 0
    while i < n:
        c = buf[i]
        if phase == P_MEMBER:
            # A non-traceEvents member value: track depth and strings until it closes (the
            # caller validates it).
            depth = 0
            j = i
            closed = -1
            while j < n:
                d = buf[j]
                if d == 34:
                    j = _skip_string(buf, j + 1, n)
                    if j < 0:
                        break
                    if depth == 0:
                        closed = j
                        break
                    continue
                if d == 123 or d == 91:
                    depth += 1
                elif d == 125 or d == 93:
                    depth -= 1
                    if depth == 0:
                        closed = j + 1
                        break
                    if depth < 0:
                        closed = j
                        break
                elif depth == 0 and (d == 44 or d == 32 or d == 10 or d == 13 or d == 9):
                    closed = j
                    break
                j += 1
            if closed < 0:
                break
            members[n_members, 0] = key_start
            members[n_members, 1] = key_end
            members[n_members, 2] = val_start
            members[n_members, 3] = closed
            n_members += 1
            phase = P_AFTER
            clean = closed
            clean_phase = phase
            i = closed
            if n_members == members.shape[0]:
                break
            continue
        if c == 32 or c == 10 or c == 13 or c == 9:
            i += 1
            while i < n and (buf[i] == 32 or buf[i] == 10 or buf[i] == 13 or buf[i] == 9):
                i += 1
            # whitespace where no key is pending is consumed: the clean point moves past it, so
            # a run of it never piles up in the unfinished tail (5 GB of blanks took minutes)
            if phase != P_COLON and phase != P_VALUE:
                clean = i
                clean_phase = phase
                clean_ev_expect = ev_expect
            continue
        if phase == P_START:
            if array_form and c == 91:  # '[': the events themselves, entered as traceEvents'
                is_te = True
                phase = P_VALUE
                continue
            if c != 123 or array_form:
                state[S_ERR_POS] = i
                return E_NOT_OBJECT
            phase = P_KEY
            i += 1
            clean = i
            clean_phase = phase
        elif phase == P_KEY or phase == P_NEXT_KEY:
            if c == 34:
                k = _skip_string(buf, i + 1, n)
                if k < 0:
                    break
                key_start = i
                key_end = k
                is_te = False
                if k - i - 2 == te.shape[0]:
                    is_te = True
                    for m in range(te.shape[0]):
                        if buf[i + 1 + m] != te[m]:
                            is_te = False
                            break
                phase = P_COLON
                i = k
            elif c == 125 and phase == P_KEY:
                phase = P_END
                i += 1
                clean = i
                clean_phase = phase
            else:
                state[S_ERR_POS] = i
                return E_SYNTAX
        elif phase == P_COLON:
            if c != 58:
                state[S_ERR_POS] = i
                return E_SYNTAX
            phase = P_VALUE
            i += 1
        elif phase == P_VALUE:
            if is_te:
                if seen_te != 0:
                    state[S_ERR_POS] = i
                    return E_DUPLICATE
                if c != 91:
                    state[S_ERR_POS] = i
                    return E_TE_NOT_ARRAY
                seen_te = 1
                phase = P_ARRAY
                ev_expect = 2
                i += 1
                clean = i
                clean_phase = phase
                clean_ev_expect = ev_expect
            else:
                val_start = i
                phase = P_MEMBER
        elif phase == P_AFTER:
            if c == 44:
                phase = P_NEXT_KEY
            elif c == 125:
                phase = P_END
            else:
                state[S_ERR_POS] = i
                return E_SYNTAX
            i += 1
            clean = i
            clean_phase = phase
        elif phase == P_ARRAY:
            if c == 123:
                if ev_count == cap:
                    break  # spans full: resume from the clean point (the last event's end)
                end = _event(
                    buf, i, n, ev_count, starts, ends, totals, kbytes, koff, table,
                    args_field, stack, err,
                )  # fmt: skip
                if end == -1:
                    break  # incomplete: resume from the clean point with more bytes
                if end < 0:
                    state[S_ERR_POS] = err[0]
                    state[S_REASON] = err[1]
                    state[S_EV_COUNT] = ev_count
                    return E_EVENT_JSON
                if ev_start < 0:
                    ev_start = i
                ev_end = end
                ev_count += 1
                ev_expect = 0
                phase = P_EVAFTER
                clean = end
                clean_phase = phase
                i = end
            elif c == 93 and ev_expect == 2:
                phase = P_END if array_form else P_AFTER
                i += 1
                clean = i
                clean_phase = phase
            else:
                state[S_ERR_POS] = i
                state[S_EV_COUNT] = ev_count
                return E_EVENT_NOT_OBJECT if c != 93 else E_SYNTAX
        elif phase == P_EVAFTER:
            if c == 44:
                phase = P_ARRAY
                ev_expect = 1
            elif c == 93:
                phase = P_END if array_form else P_AFTER
            else:
                state[S_ERR_POS] = i
                return E_SYNTAX
            i += 1
            if phase != P_ARRAY:
                clean = i
                clean_phase = phase
        else:  # P_END
            state[S_ERR_POS] = i
            return E_TRAILING
    state[S_PHASE] = clean_phase
    state[S_CLEAN] = clean
    state[S_EV_START] = ev_start
    state[S_EV_END] = ev_end
    state[S_EV_COUNT] = ev_count
    state[S_N_MEMBERS] = n_members
    state[S_SEEN_TE] = seen_te
    state[S_EV_EXPECT] = clean_ev_expect
    return 0


class Scanner:
    """Per-reader state of `scan`: the state vector, member rows, span arrays, nesting stack.

    The span arrays are reused from buffer to buffer (fresh ones cost a page fault per 4 KiB);
    their capacity starts at `chunk_bytes // 256` events and grows when a buffer fills them.
    """

    def __init__(self, chunk_bytes: int) -> None:
        self.state = np.zeros(STATE_SIZE, dtype=np.int64)
        self.members = np.empty((MAX_MEMBERS, 4), dtype=np.int64)
        rows = max(1024, chunk_bytes // 256)
        self.starts = np.empty((rows, len(KEYS)), dtype=SPAN_DTYPE)
        self.ends = np.empty((rows, len(KEYS)), dtype=SPAN_DTYPE)
        self.totals = np.zeros(len(KEYS), dtype=np.int64)
        self.stack = np.zeros(MAX_DEPTH + 1, dtype=np.uint8)
        self.grow = False

    def reset(self) -> None:
        """Ready for a new file (the arrays are kept: reusing them saves their page faults)."""
        self.state[:] = 0
        self.grow = False

    @property
    def capacity(self) -> int:
        return self.starts.shape[0]

    def scan(self, buf: np.ndarray) -> int:
        """One call of `scan` on `buf`; 0 or a negative error code."""
        if buf.shape[0] > MAX_BUFFER:
            raise ValueError(
                f"a single event or member of over {MAX_BUFFER >> 20} MiB: spans are 32-bit"
            )
        if self.grow:
            rows = self.starts.shape[0] * 3 // 2
            self.starts = np.empty((rows, len(KEYS)), dtype=SPAN_DTYPE)
            self.ends = np.empty((rows, len(KEYS)), dtype=SPAN_DTYPE)
            self.grow = False
        self.totals[:] = 0
        rc = scan(
            buf,
            self.state,
            self.members,
            _TRACE_EVENTS,
            self.starts,
            self.ends,
            self.totals,
            _KEY_BYTES,
            _KEY_OFFSETS,
            _KEY_TABLE,
            ARGS,
            self.stack,
        )
        return int(rc)

    def full(self) -> bool:
        """Whether the last call stopped early (members or spans full) and should be resumed."""
        if int(self.state[S_EV_COUNT]) == self.starts.shape[0]:
            self.grow = True
            return True
        return int(self.state[S_N_MEMBERS]) == MAX_MEMBERS

    def spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """starts, ends (views, valid until the next call) and totals of the last call's events."""
        n = int(self.state[S_EV_COUNT])
        return self.starts[:n], self.ends[:n], self.totals
