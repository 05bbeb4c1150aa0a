"""The malformed and hostile inputs of `bench/torture.py`, built from one real trace: edited
copies, and the two large ones (gigabytes of blanks, a string of hundreds of megabytes) streamed
into a gzip file a block at a time, never held in memory."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from pathlib import Path

from isal import isal_zlib

_BLOCK = 4 << 20


def load(trace: Path) -> dict:
    """A gzip'd Chrome-trace JSON file as a dict."""
    return json.loads(gzip.decompress(trace.read_bytes()))


def write_gz(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _streamed(path: Path, head: bytes, fill: bytes, n_bytes: int, tail: bytes) -> Path:
    """gzip of `head`, then `fill` repeated to `n_bytes`, then `tail`, compressed as it goes."""
    z = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)  # wbits 31: a gzip stream
    block = (fill * (_BLOCK // len(fill) + 1))[:_BLOCK]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(z.compress(head))
        left = n_bytes
        while left > 0:
            f.write(z.compress(block[: min(left, _BLOCK)]))
            left -= _BLOCK
        f.write(z.compress(tail))
        f.write(z.flush())
    return path


def _split(doc: dict) -> tuple[bytes, list]:
    """The document's text up to its `traceEvents` array's opening bracket, and its events."""
    rest = {k: v for k, v in doc.items() if k != "traceEvents"}
    head = json.dumps(rest)[:-1] + (", " if rest else "") + '"traceEvents": ['
    return head.encode(), doc["traceEvents"]


def blanks_between_events(path: Path, doc: dict, n_bytes: int) -> Path:
    """The trace with `n_bytes` of whitespace between its first and second event."""
    head, events = _split(doc)
    first = json.dumps(events[0]).encode() + b","
    rest = ",".join(json.dumps(e) for e in events[1:]).encode() + b"]}"
    return _streamed(path, head + first, b" \n\t ", n_bytes, rest)


def giant_string(path: Path, doc: dict, n_bytes: int) -> Path:
    """The trace with its second event's name `n_bytes` long."""
    head, events = _split(doc)
    first = json.dumps(events[0]).encode() + b', {"ph": "X", "cat": "cpu_op", "name": "'
    rest = b'", "pid": 1, "tid": 1, "ts": 1, "dur": 1}, '
    rest += ",".join(json.dumps(e) for e in events[1:]).encode() + b"]}"
    return _streamed(path, head + first, b"x", n_bytes, rest)


def padded(path: Path, trace: Path, pad_bytes: int) -> Path:
    """The trace with one more event whose `args` hold `pad_bytes` of incompressible text: a
    gzip file that weighs what a big trace does (the ingest sizes its worker pool by it)."""
    text = gzip.decompress(trace.read_bytes())
    at = re.search(rb'"traceEvents"\s*:\s*\[', text).end()
    pad = base64.b64encode(os.urandom(pad_bytes * 3 // 4))
    event = b'{"ph": "i", "s": "t", "name": "pad", "pid": 0, "tid": 0, "ts": 0, "args": {"pad": "'
    return _streamed(path, text[:at] + event + pad + b'"}},', b" ", 0, text[at:])


def uncompressed_size(path: Path) -> int:
    """The size of a gzip file's content, read a block at a time."""
    n = 0
    with gzip.open(path, "rb") as f:
        while block := f.read(_BLOCK):
            n += len(block)
    return n
