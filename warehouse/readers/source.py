"""The decompressed byte stream of a trace file, read in bounded chunks.

gzip is recognised by its magic bytes, not the file name, and decompressed with `isal.igzip`
(the fastest gzip measured, docs/warehouse.md). Decompression failures (a truncated or corrupt gzip member) become
MalformedTrace naming the file. `HashedFile` hashes the file's own (compressed) bytes as they
are read, so one reading gives both the events and the sha256 that identifies the content.
"""

from __future__ import annotations

import hashlib
import io
import os
import zlib
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import BinaryIO

from isal import igzip, isal_zlib

from warehouse.errors import MalformedTrace

GZIP_MAGIC = b"\x1f\x8b"
# the buffer `HashedFile.sha256` reads the rest of a file through
HASH_CHUNK = 1 << 20


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


class HashedFile(io.RawIOBase):
    """A file's raw bytes, read unbuffered and hashed (sha256) on the way: the ingest learns a
    file's content hash from the reading that parses it instead of reading the file twice (0.3 s
    of CPU per GB, and half the I/O of a fleet on a network file system)."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by close())
        self._digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # noqa: ANN001 (any writable buffer)
        n = self._f.readinto(b) or 0
        if n:
            self._digest.update(memoryview(b)[:n])  # releases the GIL for large data
        return n

    def sha256(self) -> str:
        """The whole file's sha256: bytes not read yet (after a gzip stream's end) are read now."""
        buf = bytearray(HASH_CHUNK)
        while self.readinto(buf):
            pass
        return self._digest.hexdigest()

    def close(self) -> None:
        self._f.close()
        super().close()


def decompressed(raw: HashedFile, gz: bool) -> BinaryIO:
    """The decompressed content of an open `HashedFile`, as a context manager."""
    if gz:
        # isal's C reader itself, not the IGzipFile around it: IGzipFile's `readinto` is
        # io.BufferedIOBase's, which reads each chunk into a fresh bytes object and copies it.
        # While a row group's columns are held, every such 4 MiB block came from new pages to
        # fault in: 20 of a 54 MB gzip'd trace's 190 ms of ingest. isal is pinned (pyproject).
        return closing(isal_zlib._GzipReader(raw, igzip.READ_BUFFER_SIZE))  # type: ignore[return-value]
    return raw  # type: ignore[return-value]


def open_stream(path: Path) -> BinaryIO:
    """The file's decompressed content as a binary stream."""
    if is_gzip(path):
        return igzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


# A machine that crashed or filled its disk while the profiler wrote leaves the file's length
# with zero bytes where the data never landed: said when a file breaks off into zeros.
ZERO_FILLED = "cut short and zero-filled, as a crash or a full disk leaves a trace being written"


def _truncated_gzip(path: Path) -> MalformedTrace:
    """The error for a gzip stream without its end (`ZERO_FILLED` added when the file ends in
    zero bytes)."""
    problem = "truncated gzip: the compressed stream ends before its end marker"
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            tail = f.read()
    except OSError:
        tail = b""
    if tail and not tail.strip(b"\0"):
        problem += f"; the file ends in zero bytes: it looks {ZERO_FILLED}"
    return MalformedTrace(path, problem)


def read_chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """Yield the decompressed content in chunks of `chunk_bytes` (the last may be shorter)."""
    gz = is_gzip(path)
    with open_stream(path) as stream:
        while True:
            try:
                chunk = stream.read(chunk_bytes)
            except EOFError:
                raise _truncated_gzip(path) from None
            except (OSError, zlib.error, ValueError) as err:
                what = "corrupt gzip data" if gz else "read error"
                raise MalformedTrace(path, f"{what}: {err}") from None
            if not chunk:
                return
            yield chunk


def fill(stream: BinaryIO, view: memoryview, path: Path, gz: bool) -> int:
    """Read into `view` (decompressed bytes); 0 at the end. Errors as in `read_chunks`."""
    try:
        return stream.readinto(view) or 0
    except EOFError:
        raise _truncated_gzip(path) from None
    except (OSError, zlib.error, ValueError) as err:
        what = "corrupt gzip data" if gz else "read error"
        raise MalformedTrace(path, f"{what}: {err}") from None


def read_head(path: Path, n: int = 1 << 16) -> tuple[bytes, bool, str | None]:
    """The first `n` decompressed bytes, whether the file is gzip'd, and a decompression error."""
    gz = is_gzip(path)
    try:
        with open_stream(path) as stream:
            return stream.read(n), gz, None
    except EOFError:
        return b"", gz, "truncated gzip"
    except (OSError, zlib.error, ValueError) as err:
        return b"", gz, f"corrupt gzip ({err})"
