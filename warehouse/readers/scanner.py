"""Codes shared with the fused scanner (`fused.py`): the phases of a trace's top-level JSON
structure at a clean point, the error codes, and the string skipper.

A Kineto trace is one object, `{"k": v, ..., "traceEvents": [{...}, {...}], "k2": v2}`, that can
be gigabytes long; `fused.scan` walks it in chunks and resumes at a clean point whose state is
just the phase below. The Chrome trace format's array form, a bare `[{...}, {...}]` of events, is
walked from P_ARRAY to P_END (`fused.S_ARRAY_FORM`, set by the reader from the file's first byte).
"""

from __future__ import annotations

from warehouse.readers.jit import kernel

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
P_NEXT_KEY = 10  # a member key '"' after ',' (no '}': a trailing comma is not JSON)

# Error codes (negative return of `scan`), mapped to messages by the reader.
E_NOT_OBJECT = -1  # first non-blank byte is not '{'
E_SYNTAX = -2  # unexpected byte for the phase
E_EVENT_NOT_OBJECT = -3  # an element of traceEvents is not an object
E_TRAILING = -4  # bytes after the closing brace
E_DUPLICATE = -5  # traceEvents appears twice
E_TE_NOT_ARRAY = -7  # traceEvents' value is not an array (-6 is fused.E_EVENT_JSON)

MAX_MEMBERS = 64


@kernel
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
