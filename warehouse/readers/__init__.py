"""Readers: Kineto Chrome-trace JSON (plain or gzip'd) → Arrow batches of READER_EVENTS.

    trace = open_trace(path)          # raises NotKinetoTrace / MalformedTrace
    for batch in trace.batches():     # streamed; errors found late (truncation) raise here
        ...
    trace.meta                        # complete once batches() is exhausted

Modules: `source` (decompressed chunks), `fused` (one numba pass per chunk: top-level structure,
JSON validation of every event, spans of the kept keys; `swar` skips string contents 8 bytes at
a time), `scanner` and `walker` (the codes and the key list it shares), `decode` and `columns`
(spans → Arrow columns), `numbers` (exact decimal → int64 ns, numba), `strings`, `categories`
(normalisation), `sniff` (what a file looks like), `trace` (the streaming loop, with buffers
reused from file to file), `jit` (the kernels' decorator: no reference counting, no allocation).
"""

from __future__ import annotations

from pathlib import Path

from warehouse.readers.sniff import sniff
from warehouse.readers.trace import KinetoTrace, TraceMeta, open_kineto

DEFAULT_CHUNK_BYTES = 32 << 20


def open_trace(path: str | Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> KinetoTrace:
    """Open a trace for streaming. Cheap: the file is read by `batches()`.

    Raises NotKinetoTrace for a missing path or a directory; every other problem surfaces while
    iterating `batches()` (the type of a file is only certain once its top level has been read).
    """
    return open_kineto(path, chunk_bytes)


__all__ = ["DEFAULT_CHUNK_BYTES", "KinetoTrace", "TraceMeta", "open_trace", "sniff"]
