"""Byte-level scanner of a trace's top-level JSON structure, resumable across chunks.

A Kineto trace is one object, `{"k": v, ..., "traceEvents": [{...}, {...}], "k2": v2}`, that can
be gigabytes long. The scanner walks the bytes once (numba, ~1 GB/s), tracking strings, escapes
and nesting depth, and reports

- the span of complete events inside the `traceEvents` array (one contiguous region per buffer,
  commas included, so `b"[" + region + b"]"` is a JSON array that msgspec decodes in one call);
- the key and value spans of the other top-level members (small: deviceProperties, ...);
- a *clean point*: the position after the last complete item, from which the next call resumes
  with the leftover bytes plus the next chunk. State at a clean point is just the phase.

Braces inside strings (`"name": "f({x})"`) and escaped quotes are handled by the string state.
The scanner checks the top-level grammar (commas, colons, brackets); the insides of events and
member values are checked later by msgspec.
"""

from __future__ import annotations

import numba
import numpy as np

# Phases: what the scanner expects next at a clean point.
P_START = 0  # leading whitespace, then '{'
P_KEY = 1  # a member key '"' or '}'
P_COLON = 2
P_VALUE = 3
P_MEMBER = 4  # inside a non-traceEvents member value
P_AFTER = 5  # ',' or '}' after a member
P_ARRAY = 6  # '{' or ']' inside traceEvents
P_EVENT = 7  # inside an event object
P_EVAFTER = 8  # ',' or ']' after an event
P_END = 9  # only whitespace after the closing '}'

# Error codes (negative return of `scan`), mapped to messages by the reader.
E_NOT_OBJECT = -1  # first non-blank byte is not '{'
E_SYNTAX = -2  # unexpected byte for the phase
E_EVENT_NOT_OBJECT = -3  # an element of traceEvents is not an object
E_TRAILING = -4  # bytes after the closing brace
E_DUPLICATE = -5  # traceEvents appears twice

_TRACE_EVENTS = np.frombuffer(b"traceEvents", dtype=np.uint8)

# state vector layout (int64): what a call reads and writes back
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
) = range(9)
STATE_SIZE = 9
MAX_MEMBERS = 64


@numba.njit(cache=True, nogil=True)
def _is_blank(c: int) -> bool:
    return c == 32 or c == 10 or c == 13 or c == 9


@numba.njit(cache=True, nogil=True)
def _skip_string(buf, i, n):  # pragma: no cover - numba
    """`buf[i]` is the byte after an opening quote; return the index after the closing quote or -1."""
    while i < n:
        c = buf[i]
        if c == 92:  # backslash: the next byte is escaped, whatever it is
            i += 2
        elif c == 34:
            return i + 1
        else:
            i += 1
    return -1


@numba.njit(cache=True, nogil=True)
def scan(buf, state, members, te):  # pragma: no cover - numba
    """Scan `buf` from position 0 in phase `state[S_PHASE]`.

    Writes into `state`: the clean point and its phase, the events region [S_EV_START, S_EV_END)
    (-1 when no complete event), the number of complete members written to `members` (rows of
    key_start, key_end, value_start, value_end), and whether traceEvents was seen. Returns 0, or
    a negative error code with the offending position in state[S_ERR_POS]. Stops early when
    `members` is full; the caller resumes from the clean point.
    """
    n = buf.shape[0]
    phase = state[S_PHASE]
    seen_te = state[S_SEEN_TE]
    ev_expect = state[S_EV_EXPECT]  # 1 right after '[' or ',': an event (or ']' after '[') is due
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
        if phase == P_EVENT or phase == P_MEMBER:
            # Nested value: track depth and strings until it closes.
            depth = 0
            j = i
            closed = -1
            while j < n:
                d = buf[j]
                if d == 34:
                    j = _skip_string(buf, j + 1, n)
                    if j < 0:
                        break
                    if depth == 0:  # a string member value
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
                    if depth < 0:  # the member was a scalar closed by the parent's '}'
                        closed = j
                        break
                elif depth == 0 and (d == 44 or _is_blank(d)):
                    closed = j  # end of a scalar member value
                    break
                j += 1
            if closed < 0:
                break  # incomplete: resume from the clean point with more bytes
            if phase == P_EVENT:
                if ev_start < 0:
                    ev_start = i
                ev_end = closed
                ev_count += 1
                phase = P_EVAFTER
                clean = closed
                clean_phase = phase
            else:
                members[n_members, 0] = key_start
                members[n_members, 1] = key_end
                members[n_members, 2] = val_start
                members[n_members, 3] = closed
                n_members += 1
                phase = P_AFTER
                clean = closed
                clean_phase = phase
                if n_members == members.shape[0]:
                    i = closed
                    break
            i = closed
            continue
        if _is_blank(c):
            i += 1
            continue
        if phase == P_START:
            if c != 123:
                state[S_ERR_POS] = i
                return E_NOT_OBJECT
            phase = P_KEY
            i += 1
            clean = i
            clean_phase = phase
        elif phase == P_KEY:
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
            elif c == 125:
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
                    return E_SYNTAX
                seen_te = 1
                phase = P_ARRAY
                ev_expect = 2  # 2: just after '[', where ']' is also fine
                i += 1
                clean = i
                clean_phase = phase
                clean_ev_expect = ev_expect
            else:
                val_start = i
                phase = P_MEMBER
        elif phase == P_AFTER:
            if c == 44:
                phase = P_KEY
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
                phase = P_EVENT
                ev_expect = 0
            elif c == 93 and ev_expect == 2:
                phase = P_AFTER
                i += 1
                clean = i
                clean_phase = phase
            else:
                state[S_ERR_POS] = i
                state[S_EV_COUNT] = ev_count  # so the error can give the element's index
                return E_EVENT_NOT_OBJECT if c != 93 else E_SYNTAX
        elif phase == P_EVAFTER:
            if c == 44:
                phase = P_ARRAY
                ev_expect = 1
            elif c == 93:
                phase = P_AFTER
            else:
                state[S_ERR_POS] = i
                return E_SYNTAX
            i += 1
            # Keep the clean point at the last event's end so the region stays contiguous;
            # only a closed array moves it (the comma is re-read on resume).
            if phase == P_AFTER:
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


def new_state() -> np.ndarray:
    """A fresh scanner state at the start of a file."""
    return np.zeros(STATE_SIZE, dtype=np.int64)


def new_members() -> np.ndarray:
    return np.empty((MAX_MEMBERS, 4), dtype=np.int64)


TRACE_EVENTS_KEY = _TRACE_EVENTS
