"""The decorator of the reader's numba kernels: compiled without numba's reference counting.

The reader's kernels allocate nothing, so `_nrt=False` turns off the reference counting numba
adds around every call taking arrays (its atomics dominated the scan's time), and an allocation
inside them fails at compile time. Helpers called once per token are inlined (`inline=True`).
numba is pinned (pyproject.toml) because `_nrt` is a private option. `kernels.jit_cache` keys
the cache by all of the package's sources (numba keys it by the kernel's own file only), and
`_LoadOnlyCache` loads a cached kernel without numba's context refresh. Measurements:
docs/warehouse.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
from numba.core import caching

from kernels.jit_cache import key_by_sources

_PACKAGE = Path(__file__).resolve().parent


# every kernel of the package stamped with all of its sources (kernels/jit_cache.py)
key_by_sources(_PACKAGE, "*.py")


class _LoadOnlyCache(caching.FunctionCache):
    """numba's cache of one kernel, loading machine code without first refreshing the target
    context. The refresh imports and installs every lowering registry numba has, numpy's
    `arraymath` among them with its probe of scipy's BLAS (0.1 s of CPU, and the import of
    `numba.np` 0.06 s more: together a fifth of a small ingest's process), for what compiling
    needs; loading a cached kernel of this package only links its object code: the kernels
    allocate nothing (no NRT) and their callees are linked in. A cache miss compiles, and
    compiling refreshes the context itself."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def _jit(opts: dict[str, Any]) -> Callable[[Callable[..., Any]], Any]:
    def wrap(fn: Callable[..., Any]) -> Any:
        dispatcher = numba.njit(**opts)(fn)
        dispatcher._cache = _LoadOnlyCache(dispatcher.py_func)
        return dispatcher

    return wrap


def kernel(fn: Callable[..., Any] | None = None, *, inline: bool = False) -> Any:
    """`numba.njit(cache=True, nogil=True, _nrt=False)`, optionally inlined at numba IR level."""
    opts: dict[str, Any] = {"cache": True, "nogil": True, "_nrt": False}
    if inline:
        opts["inline"] = "always"
    jit = _jit(opts)
    return jit if fn is None else jit(fn)
