"""numba's on-disk cache keyed by all the sources of a set of modules, not by a kernel's own file.

numba stamps a cached kernel with its own file only, but a kernel that calls across modules (the
batch replay links in the event-driven and linear kernels; the reader's kernels call each
other's helpers) would keep its old machine code after a callee's module changed.
`key_by_sources(package, pattern)` puts, ahead of numba's own cache locators, ones that claim
the functions of `package/<pattern>` and stamp them with the hash of every such file. Importing
this module does it for the replay modules (`kernels/replay*.py`); the reader's kernels do it
for their package (`warehouse.readers.jit`).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from numba.core import caching

__all__ = ["key_by_sources"]

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


key_by_sources(Path(__file__).parent, "replay*.py")
