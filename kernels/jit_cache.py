"""numba's on-disk cache keyed by all the sources of a set of modules, not by a kernel's own file.

numba stamps a cached kernel with its own file only, but a kernel that calls across modules (the
batch replay links in the event-driven and linear kernels; the reader's kernels call each
other's helpers) would keep its old machine code after a callee's module changed.
`key_by_sources(package, pattern)` puts, ahead of numba's own cache locators, ones that claim
the functions of `package/<pattern>` and stamp them with the hash of every such file. Importing
this module does it for the replay modules (`kernels/replay*.py`); the reader's kernels do it
for their package (`warehouse.readers.jit`). `cached_kernel` is `numba.njit(cache=True)` whose
cached machine code loads without numba's context refresh (`LoadOnlyCache`).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import numba
from numba.core import caching

__all__ = ["LoadOnlyCache", "cached_kernel", "key_by_sources"]

_KEYED: set[tuple[Path, str]] = set()


@cache
def _sources_stamp(package: Path, stamps: tuple[tuple[str, int, int], ...]) -> bytes:
    digest = hashlib.sha256()
    for name, _, _ in stamps:
        digest.update(name.encode())
        digest.update((package / name).read_bytes())
    return digest.digest()


def key_by_sources(package: Path, pattern: str) -> None:
    """Stamp the cached kernels of `package/<pattern>` with the hash of all those files (once
    per package and pattern)."""
    package = package.resolve()
    if (package, pattern) in _KEYED:
        return

    class _Stamp:
        def get_source_stamp(self) -> bytes:
            stamps = []
            for p in sorted(package.glob(pattern)):
                st = p.stat()
                stamps.append((p.name, st.st_mtime_ns, st.st_size))
            return _sources_stamp(package, tuple(stamps))

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            path = Path(py_file).resolve()
            if path.parent != package or not path.match(pattern):
                return None
            return super().from_function(py_func, py_file)  # type: ignore[misc]

    # numba's own order of places (NUMBA_CACHE_DIR, the package's __pycache__, the user's cache
    # folder), each with the stamp; tried before numba's own locators
    caching.CacheImpl._locator_classes[:0] = [
        type(f"_Sources{base.__name__}", (_Stamp, base), {})
        for base in (
            caching.UserProvidedCacheLocator,
            caching.InTreeCacheLocator,
            caching.UserWideCacheLocator,
        )
    ]
    _KEYED.add((package, pattern))


class LoadOnlyCache(caching.FunctionCache):
    """numba's cache of one kernel, loading machine code without first refreshing the target
    context. The refresh imports and installs every lowering registry numba has, numpy's
    `arraymath` among them with its probe of scipy's BLAS (0.3 s of a `lumos estimate`'s 1 s,
    0.16 s of a small ingest), for what compiling needs; loading a cached kernel only links its
    object code. A kernel that allocates (`nrt`, numba's reference-counted arrays: the replay's)
    needs the runtime initialised first, the one part of the refresh a load uses. A cache miss
    compiles, and compiling refreshes the context itself."""

    nrt = True

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        if self.nrt:
            from numba.core.runtime import rtsys

            rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def cached_kernel(fn: Any = None, *, nrt: bool = True, **opts: Any) -> Any:
    """`numba.njit(cache=True, **opts)` loading from its cache with `LoadOnlyCache`; `nrt=False`
    for a kernel compiled without numba's runtime (`_nrt=False`: it allocates nothing)."""

    def wrap(f: Any) -> Any:
        dispatcher = numba.njit(cache=True, **opts)(f)
        dispatcher._cache = LoadOnlyCache(dispatcher.py_func)
        dispatcher._cache.nrt = nrt
        return dispatcher

    return wrap if fn is None else wrap(fn)


key_by_sources(Path(__file__).parent, "replay*.py")
