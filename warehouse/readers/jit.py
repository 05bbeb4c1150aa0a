"""The decorator of the reader's numba kernels: compiled without numba's reference counting.

Passing an array to a numba function that is not inlined makes numba increment and decrement the
array's reference count around the call, with atomic (`lock`) instructions. The reader calls its
helpers a few times per JSON token, and those atomics were 65% of the scan's time (perf on a
54 MB trace: 166 MB/s with them, 730 MB/s without). The reader's kernels allocate nothing (every
buffer comes from the caller), so they need no reference counting: `_nrt=False` turns it off, and
any allocation inside them fails at compile time instead of leaking. numba is pinned
(pyproject.toml) because `_nrt` is a private option.

Helpers called once per value or token are inlined (`inline=True`): a call passes every array
as its seven fields, pushed on the stack, and the 27 calls per event were half of the conversion's
time (perf, 54 MB trace). Inlining `int_value`, `str_value`, the number parser and the scan's
`_string`/`_number`/`_scalar` took the conversion 60 -> 35 ms and the scan 84 -> 65 ms; the key
lookup `_match` (a dozen per event), the scan 3 % more. Rare paths (`_unescape`,
`_int_in_string`, `_literal`, `_match_escaped`) and `_event` (once per event: inlined, no
faster) stay calls.

The kernels call helpers across this package's modules (`swar` inside `fused` and `columns`, ...),
and numba keys a cached kernel by the hash of its own file only: an edited helper left the
callers' cached machine code in use. `_PackageStamp` keys them by all of the package's sources.
"""

from __future__ import annotations

import hashlib
import sys
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


def _skip_blas_probe() -> None:
    """Load numba's array functions without their BLAS probe. At the first compile or cache load
    numba imports `numba.np.arraymath`, which imports scipy.linalg only to learn whether BLAS
    exists (0.16 s of CPU, a third of what an ingest worker spends before its first byte). The
    answer only picks how `np.correlate`/`np.convolve` compile (a loop instead of `np.dot`);
    `np.dot` itself still finds BLAS when something compiles it, and scipy.linalg imports
    normally afterwards. The reader's kernels use none of them."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg"] = None  # type: ignore[assignment]  # its import fails fast
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg"]


_skip_blas_probe()


def kernel(fn: Callable[..., Any] | None = None, *, inline: bool = False) -> Any:
    """`numba.njit(cache=True, nogil=True, _nrt=False)`, optionally inlined at numba IR level."""
    opts: dict[str, Any] = {"cache": True, "nogil": True, "_nrt": False}
    if inline:
        opts["inline"] = "always"
    jit = numba.njit(**opts)
    return jit if fn is None else jit(fn)
