"""The decorator of the reader's numba kernels: compiled without numba's reference counting.

The reader's kernels allocate nothing, so `_nrt=False` turns off the reference counting numba
adds around every call taking arrays (its atomics dominated the scan's time), and an allocation
inside them fails at compile time. Helpers called once per token are inlined (`inline=True`).
numba is pinned (pyproject.toml) because `_nrt` is a private option. `_PackageStamp` keys the
cache by all of the package's sources (numba keys it by the kernel's own file only), and
`_LoadOnlyCache` loads a cached kernel without numba's context refresh. Measurements:
docs/warehouse.md, "Module notes".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numba
from numba.core import caching

_PACKAGE = Path(__file__).resolve().parent


@cache
def _package_stamp(stamps: tuple[tuple[str, int, int], ...]) -> bytes:
    digest = hashlib.sha256()
    for name, _, _ in stamps:
        digest.update(name.encode())
        digest.update((_PACKAGE / name).read_bytes())
    return digest.digest()


class _PackageStamp:
    """Mixed into numba's locators: claims only this package's kernels and stamps them with the
    hash of every source file of the package rather than the kernel's own file."""

    def get_source_stamp(self) -> bytes:
        stamps = []
        for p in sorted(_PACKAGE.glob("*.py")):
            st = p.stat()
            stamps.append((p.name, st.st_mtime_ns, st.st_size))
        return _package_stamp(tuple(stamps))

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if Path(py_file).resolve().parent != _PACKAGE:
            return None
        return super().from_function(py_func, py_file)  # type: ignore[misc]


# numba's own order of places (NUMBA_CACHE_DIR, the package's __pycache__, the user's cache
# folder), each with the package's stamp; tried before numba's own locators
_LOCATORS = [
    type(f"_Package{base.__name__}", (_PackageStamp, base), {})
    for base in (
        caching.UserProvidedCacheLocator,
        caching.InTreeCacheLocator,
        caching.UserWideCacheLocator,
    )
]
if not any(issubclass(c, _PackageStamp) for c in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS


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
