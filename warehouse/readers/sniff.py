"""Say in one line what a file looks like, for refusals ("a PyTorch host execution trace", ...).

Used twice: by `sniff()` on the first 64 KiB of a file, and by the reader when the stream it is
reading turns out not to be a Kineto trace (it then knows the top-level keys).
"""

from __future__ import annotations

import re
from pathlib import Path

from warehouse.readers.source import read_head

# Top-level keys of a PyTorch host execution trace (torch.profiler.ExecutionTraceObserver,
# Chakra's JSON): a graph of nodes, no traceEvents.
HOST_ET_KEYS = frozenset({"schema", "nodes"})

_SCHEMA_VALUE = re.compile(rb'"schema"\s*:\s*"([^"]{0,60})"')
_KEYS = re.compile(rb'(?:^|[{,])\s*"([^"\\]{1,40})"\s*:')


def describe_keys(keys: list[str], schema: str | None = None) -> str:
    """What a JSON object with these top-level keys (and no traceEvents) is."""
    if HOST_ET_KEYS & set(keys):
        version = f" (schema {schema})" if schema else ""
        return f"a PyTorch host execution trace{version}, not a Kineto trace: it has no traceEvents"
    if "traceEvents" in keys:  # the scanner matches the key's bytes: only an escaped one got here
        return (
            "a JSON object whose traceEvents key is written with escape sequences; lumos reads "
            'the key only as the plain bytes "traceEvents", which every profiler writes'
        )
    shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
    return f"a JSON object without traceEvents (keys: {shown or 'none'}), not a Kineto trace"


# the first element of an array-form Chrome trace: an object with a "ph" (every trace event has
# one) among its first keys
_FIRST_EVENT = re.compile(rb'\[\s*\{[^{}]{0,2048}?"ph"\s*:\s*"')


def is_event_array(head: bytes) -> bool:
    """Whether a top-level JSON array (its first bytes) is the Chrome trace format's array form:
    trace events without a wrapping object or metadata."""
    return _FIRST_EVENT.match(head.lstrip()) is not None


def describe_array(head: bytes) -> str:
    """What a top-level JSON array is (memory timelines are arrays of [ts, action, bytes, ...])."""
    body = head.lstrip()[1:].lstrip()
    if re.match(rb"\[\s*-?\d", body):
        return (
            "a JSON array of numeric rows (looks like a PyTorch memory timeline, "
            "export_memory_timeline raw output), not a Kineto trace object"
        )
    if is_event_array(head):
        return "array-form Chrome trace (a JSON array of trace events, no metadata)"
    if body.startswith(b"{"):
        return (
            'a JSON array of objects that are not trace events (the first has no "ph"), '
            "not a Kineto trace object"
        )
    return "a JSON array, not a Kineto trace object"


_UTF16_32 = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def wide_encoding(head: bytes) -> str | None:
    """ "UTF-16" or "UTF-32" for text saved by Windows tools (a byte order mark, or a NUL beside
    every ASCII byte), else None. JSON holds no raw NUL, so a trace never looks like this."""
    wide = next((name for bom, name in _UTF16_32 if head.startswith(bom)), None)
    if wide is None and len(head) >= 8 and b"\x00" * 4 in (head[1:8:2], head[0:8:2]):
        wide = "UTF-16"
    return wide


def describe_binary(head: bytes) -> str:
    first = head[:8].hex(" ")
    if head and not head.strip(b"\x00"):  # before the UTF-16 test: zeros have NULs everywhere
        return "only zero bytes (a file allocated but never written, or wiped): not a trace"
    wide = wide_encoding(head)
    if wide:
        return f"{wide} text (first bytes {first}); a trace is UTF-8 JSON: re-encode it to UTF-8"
    return f"not JSON: binary data (first bytes {first})"


def looks_binary(head: bytes) -> bool:
    """Control bytes, or not UTF-8 (a character cut by the end of the sample is not counted)."""
    if any(b < 9 or 13 < b < 32 for b in head):
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start < len(head) - 3
    return False


def describe_other(text: bytes) -> str:
    """What a file whose content is neither a JSON object nor an array is: binary data, a JSON
    scalar, or other text."""
    if looks_binary(text[:64]):
        return describe_binary(text)
    sample = text[:64].decode("utf-8", "ignore")
    kinds = (("null", "null"), ("true", "boolean"), ("false", "boolean"), ('"', "string"))
    kind = next((k for word, k in kinds if sample.startswith(word)), None)
    if kind is None and sample[:1] in "-0123456789":
        kind = "number"
    if kind is not None:
        return f"a JSON {kind}, not a trace (a Kineto trace is a JSON object with traceEvents)"
    return f"not JSON: text starting with {sample[:32]!r}"


def describe_head(head: bytes, gz: bool, error: str | None, size: int) -> str:
    """One line for the first bytes of a (decompressed) file."""
    wrap = "gzip'd " if gz else ""
    if size == 0:
        return "an empty file (0 bytes)"
    if error:
        return f"a gzip file that cannot be decompressed: {error}"
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if not text:
        return f"{wrap}empty content ({len(head)} blank bytes)"
    first = text[:1]
    if wide_encoding(text):
        return wrap + describe_binary(text)
    if first == b"[":
        return wrap + describe_array(text)
    if first != b"{":
        return wrap + describe_other(text)
    keys = [k.decode("utf-8", "replace") for k in _KEYS.findall(text[:4096])]
    if "traceEvents" in keys or b'"traceEvents"' in text:
        legacy = b'"cat": "Kernel"' in text or b'"cat": "Operator"' in text
        kind = "legacy (2021) Kineto trace" if legacy else "Kineto trace"
        return f"{wrap}{kind} (JSON object with traceEvents)"
    m = _SCHEMA_VALUE.search(text)
    schema = m.group(1).decode("utf-8", "replace") if m else None
    return wrap + describe_keys(keys, schema)


def sniff(path: str | Path) -> str:
    """A one-line description of what the file looks like (for refusals)."""
    p = Path(path)
    size = p.stat().st_size
    if size == 0:
        return "an empty file (0 bytes)"
    head, gz, error = read_head(p)
    return describe_head(head, gz, error, size)
