"""Readers: Kineto Chrome-trace JSON (plain or gzip'd) → Arrow batches of READER_EVENTS.

    trace = open_trace(path)          # raises NotKinetoTrace / MalformedTrace
    for batch in trace.batches():     # streamed; errors found late (truncation) raise here
        ...
    trace.meta                        # complete once batches() is exhausted

Modules: `source` (decompressed chunks), `fused` (one numba pass per chunk: top-level structure,
JSON validation of every event, spans of the kept keys; `swar` skips string contents 8 bytes at
a time), `scanner` and `walker` (the codes and the key list it shares), `decode` and `columns`
(spans → Arrow columns), `numbers` (exact decimal → int64 ns, numba), `strings`, `categories`
(normalisation, category codes), `timespan` and `views` (per-chunk facts read in place), `sniff`
(what a file looks like), `trace` (the streaming loop, with buffers reused from file to file),
`jit` (the kernels' decorator: no reference counting, no allocation).
"""

from __future__ import annotations

from pathlib import Path

from warehouse.readers.sniff import sniff
from warehouse.readers.trace import KinetoTrace, TraceMeta, open_kineto

# The conversion reads each event's bytes again after the scan: a chunk that stays in the caches
# of one core between the two passes is read from cache, not from memory. 4 MiB against 32 MiB:
# 1 GB ingest 5.7 -> 5.2 s of CPU, peak RSS 615 -> 412 MB; the corpus of small gzip'd traces
# 1.82 -> 1.62 s (medians of 3-5). Below 4 MiB the per-chunk work (a batch each) costs more.
DEFAULT_CHUNK_BYTES = 4 << 20


def open_trace(path: str | Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> KinetoTrace:
    """Open a trace for streaming. Cheap: the file is read by `batches()`.

    Raises NotKinetoTrace for a missing path or a directory; every other problem surfaces while
    iterating `batches()` (the type of a file is only certain once its top level has been read).
    """
    return open_kineto(path, chunk_bytes)


__all__ = ["DEFAULT_CHUNK_BYTES", "KinetoTrace", "TraceMeta", "open_trace", "sniff"]
