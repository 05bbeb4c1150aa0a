"""numba's on-disk cache of the replay kernels, keyed by all of their modules' sources.

numba keys a cached kernel by its own file only, but the replay kernels call across modules
(`kernels.replay_batch` links in `kernels.replay_event` and `kernels.replay_linear`): an edit of
a callee's module would leave its callers' old machine code in use. Importing this module (each
replay kernel module does) puts, ahead of numba's own cache locators, ones that claim the
functions of `kernels/replay*.py` and stamp them with the hash of every such file. The same
mechanism as the reader's `warehouse.readers.jit`, for this package's replay modules.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

from numba.core import caching

_PACKAGE = Path(__file__).resolve().parent
_PATTERN = "replay*.py"


@cache
def _sources_stamp(stamps: tuple[tuple[str, int, int], ...]) -> bytes:
    digest = hashlib.sha256()
    for name, _, _ in stamps:
        digest.update(name.encode())
        digest.update((_PACKAGE / name).read_bytes())
    return digest.digest()


class _ReplayStamp:
    """Mixed into numba's locators: claims only the replay modules' kernels and stamps them with
    the hash of every replay module rather than the kernel's own file."""

    def get_source_stamp(self) -> bytes:
        stamps = []
        for p in sorted(_PACKAGE.glob(_PATTERN)):
            st = p.stat()
            stamps.append((p.name, st.st_mtime_ns, st.st_size))
        return _sources_stamp(tuple(stamps))

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        path = Path(py_file).resolve()
        if path.parent != _PACKAGE or not path.match(_PATTERN):
            return None
        return super().from_function(py_func, py_file)  # type: ignore[misc]


# numba's own order of places (NUMBA_CACHE_DIR, the package's __pycache__, the user's cache
# folder), each with the replay modules' stamp; tried before numba's own locators
_LOCATORS = [
    type(f"_Replay{base.__name__}", (_ReplayStamp, base), {})
    for base in (
        caching.UserProvidedCacheLocator,
        caching.InTreeCacheLocator,
        caching.UserWideCacheLocator,
    )
]
if not any(issubclass(c, _ReplayStamp) for c in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS
