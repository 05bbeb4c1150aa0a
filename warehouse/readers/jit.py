"""The decorator of the reader's numba kernels: compiled without numba's reference counting.

The reader's kernels allocate nothing, so `_nrt=False` turns off the reference counting numba
adds around every call taking arrays (its atomics dominated the scan's time), and an allocation
inside them fails at compile time. Helpers called once per token are inlined (`inline=True`).
numba is pinned (pyproject.toml) because `_nrt` is a private option. `kernels.jit_cache` keys
the cache by all of the package's sources (numba keys it by the kernel's own file only), and
its `cached_kernel` loads a cached kernel without numba's context refresh. Measurements:
docs/warehouse.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernels.jit_cache import cached_kernel, key_by_sources

_PACKAGE = Path(__file__).resolve().parent


# every kernel of the package stamped with all of its sources (kernels/jit_cache.py)
key_by_sources(_PACKAGE, "*.py")


def kernel(fn: Callable[..., Any] | None = None, *, inline: bool = False) -> Any:
    """`numba.njit(cache=True, nogil=True, _nrt=False)`, optionally inlined at numba IR level."""
    opts: dict[str, Any] = {"nogil": True, "_nrt": False}
    if inline:
        opts["inline"] = "always"
    jit = cached_kernel(nrt=False, **opts)
    return jit if fn is None else jit(fn)
