"""The decompressed byte stream of a trace file, read in bounded chunks.

gzip is recognised by its magic bytes, not the file name, and decompressed with `isal.igzip`
(1-3 GB/s, field-notes §4). Decompression failures (a truncated or corrupt gzip member) become
MalformedTrace naming the file.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from isal import igzip

from warehouse.errors import MalformedTrace

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_stream(path: Path) -> BinaryIO:
    """The file's decompressed content as a binary stream."""
    if is_gzip(path):
        return igzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def read_chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """Yield the decompressed content in chunks of `chunk_bytes` (the last may be shorter)."""
    gz = is_gzip(path)
    with open_stream(path) as stream:
        while True:
            try:
                chunk = stream.read(chunk_bytes)
            except EOFError:
                raise MalformedTrace(
                    path, "truncated gzip: the compressed stream ends before its end marker"
                ) from None
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
        raise MalformedTrace(
            path, "truncated gzip: the compressed stream ends before its end marker"
        ) from None
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
