"""The decorator of the reader's numba kernels: compiled without numba's reference counting.

Passing an array to a numba function that is not inlined makes numba increment and decrement the
array's reference count around the call, with atomic (`lock`) instructions. The reader calls its
helpers a few times per JSON token, and those atomics were 65% of the scan's time (perf on a
54 MB trace: 166 MB/s with them, 730 MB/s without). The reader's kernels allocate nothing (every
buffer comes from the caller), so they need no reference counting: `_nrt=False` turns it off, and
any allocation inside them fails at compile time instead of leaking. numba is pinned
(pyproject.toml) because `_nrt` is a private option.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba


def kernel(fn: Callable[..., Any] | None = None, *, inline: bool = False) -> Any:
    """`numba.njit(cache=True, nogil=True, _nrt=False)`, optionally inlined at numba IR level."""
    opts: dict[str, Any] = {"cache": True, "nogil": True, "_nrt": False}
    if inline:
        opts["inline"] = "always"
    jit = numba.njit(**opts)
    return jit if fn is None else jit(fn)
