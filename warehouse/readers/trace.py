"""KinetoTrace: stream one trace file into Arrow batches of READER_EVENTS, plus its metadata.

The loop: read a chunk of decompressed bytes into one reused buffer, after the unfinished tail
of the previous one, let `fused.scan` find the top-level members and the complete events
(validated as JSON, with the spans of their kept keys, in one pass), turn the spans into columns
in one call, yield a batch, keep the tail. Memory is bounded by a chunk plus the largest single event or
top-level member, never by the file size.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa

from warehouse.errors import MalformedTrace, NotKinetoTrace
from warehouse.readers import fused
from warehouse.readers import scanner as sc
from warehouse.readers.categories import LEGACY_CATEGORIES, EncodedCategories
from warehouse.readers.decode import decode_spans, gc_paused
from warehouse.readers.sniff import (
    HOST_ET_KEYS,
    describe_array,
    describe_binary,
    describe_head,
    describe_keys,
    is_event_array,
    looks_binary,
    wide_encoding,
)
from warehouse.readers.source import (
    ZERO_FILLED,
    HashedFile,
    decompressed,
    fill,
    is_gzip,
    read_head,
)
from warehouse.readers.timespan import timed_span
from warehouse.readers.views import int_view, valid_mask

# Categories of work that runs on an accelerator (normalised names).
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_MTIA_CATS = ("mtia_ccp_events", "mtia_runtime")
_ZERO_FILLED = f"; zero bytes where the JSON goes on: the file looks {ZERO_FILLED}"
_ZERO_PADDED = "; zero bytes after the trace's end: the file was padded past its JSON"
# A top-level member before traceEvents larger than this is not a Kineto trace's metadata.
_MAX_MEMBER_BYTES = 256 << 20
# the longest event (or top-level member after traceEvents) read: past it the reader would hold
# a string of any size in memory (a 300 MB one took 1.4 GB)
_MAX_EVENT_BYTES = 64 << 20


@dataclass
class TraceMeta:
    """What a trace says about itself; complete only after `KinetoTrace.batches()` is exhausted."""

    top_level: dict[str, str] = field(
        default_factory=dict
    )  # key -> JSON text, traceEvents excluded
    schema_version: str | None = None
    # 'kineto' | 'kineto-legacy' | 'chrome-array' (a bare array of events: no trace metadata)
    trace_format: str = "kineto"
    rank: int | None = None
    world_size: int | None = None
    device: str | None = None  # GPU name, 'cpu' without device activity, 'mtia', ...
    n_events: int = 0
    first_ts_ns: int | None = None  # earliest event start
    last_ts_ns: int | None = None  # latest event end (ts + dur)
    category_counts: dict[str, int] = field(default_factory=dict)  # normalised cat -> count


class KinetoTrace:
    """A Kineto Chrome-trace JSON file (plain or gzip'd), read lazily in chunks; `array_form`:
    the file is the Chrome trace format's bare array of events (PyTorch's autograd profiler
    before Kineto wrote it so), read as a trace whose metadata is all absent."""

    def __init__(self, path: Path, chunk_bytes: int, array_form: bool = False) -> None:
        self.path = path
        self.chunk_bytes = chunk_bytes
        self.array_form = array_form
        self.meta = TraceMeta()
        self._raw_cats: Counter[str] = Counter()
        self._gpu_devices: Counter[int] = Counter()
        self._state_ev_count = 0  # complete events before a scanner error, within its buffer
        self._reason = 0  # fused.R_* of an invalid-JSON error inside an event
        self._work = bytearray()
        # the sha256 of the file's bytes, known once batches() has read it all without error
        self.sha256: str | None = None

    def __repr__(self) -> str:
        return f"KinetoTrace({str(self.path)!r})"

    # -- streaming -------------------------------------------------------------------------------

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the events as RecordBatches (schema READER_EVENTS), in file order."""
        self.meta = TraceMeta()
        self.sha256 = None
        self._raw_cats.clear()
        self._gpu_devices.clear()
        # One buffer for the whole file: chunks are read into it after the unfinished tail of the
        # previous one (no copy per chunk, no fresh pages to fault in). Byte 0 is unused slack.
        gz = is_gzip(self.path)
        # a plain file smaller than a chunk needs no more room than its size (+1 to see its end)
        step = (
            self.chunk_bytes if gz else max(1, min(self.chunk_bytes, self.path.stat().st_size + 1))
        )
        work, scanner = _take_buffers(step)
        scanner.state[fused.S_ARRAY_FORM] = int(self.array_form)
        self._work = work  # the buffer in use (replaced when it grows), handed back at the end
        try:
            yield from self._read(work, scanner, step, gz)
        finally:
            if len(self._work) <= 2 * step + 2:  # not a buffer grown for a giant event
                _give_back(self._work, scanner)

    def _read(
        self, work: bytearray, scanner: fused.Scanner, step: int, gz: bool
    ) -> Iterator[pa.RecordBatch]:
        state, members = scanner.state, scanner.members
        n_data = 0  # bytes of text in work[1 : 1 + n_data]
        offset = 0  # absolute (decompressed) offset of work[1]
        n_events = 0
        # Reads never go past `limit` (a reused buffer may be bigger): chunks stay `step` long.
        limit = step
        with HashedFile(self.path) as raw, decompressed(raw, gz) as stream:
            while True:
                room = limit - n_data
                if room < max(1, step // 2):
                    # the unfinished tail (an event or member longer than half a chunk) leaves
                    # too little room: grow (a new buffer: numpy views of the old one may live)
                    if state[fused.S_SEEN_TE] and n_data > _MAX_EVENT_BYTES:
                        raise MalformedTrace(
                            self.path,
                            f"an event (or member) at byte {offset} runs past "
                            f"{_MAX_EVENT_BYTES >> 20} MiB without ending (a Kineto event is a "
                            "few hundred bytes): a giant string or a broken file",
                        )
                    limit = n_data + step
                    if len(work) < limit + 2:
                        bigger = bytearray(limit + 2)
                        bigger[: n_data + 1] = memoryview(work)[: n_data + 1]
                        work = self._work = bigger
                    room = step
                got = fill(stream, memoryview(work)[1 + n_data : 1 + n_data + room], self.path, gz)
                if got == 0:
                    break
                if offset == 0 and n_data == 0 and work[1:4] == b"\xef\xbb\xbf":
                    _move(work, 4, 1 + got, 1)  # a UTF-8 byte order mark
                    got -= 3
                    offset = 3
                n_data += got
                while True:
                    arr = np.frombuffer(work, dtype=np.uint8, count=n_data, offset=1)
                    rc = scanner.scan(arr)
                    if rc < 0:
                        self._state_ev_count = int(state[fused.S_EV_COUNT])
                        self._reason = int(state[fused.S_REASON])
                        buf = bytes(arr)
                        self._scan_error(rc, buf, int(state[fused.S_ERR_POS]), offset, n_events)
                    for k in range(int(state[fused.S_N_MEMBERS])):
                        ks, ke, vs, ve = (int(x) for x in members[k])
                        self._member(bytes(arr[ks:ve]), ke - ks, vs - ks, offset + ks)
                    if not state[fused.S_SEEN_TE]:
                        self._refuse_early(n_data)
                    ev_start, ev_end = int(state[fused.S_EV_START]), int(state[fused.S_EV_END])
                    if ev_start >= 0:
                        if state[fused.S_HIGH]:  # a byte >= 0x80 in an event string
                            _check_utf8(self.path, bytes(arr[ev_start:ev_end]), offset + ev_start)
                        starts, ends, totals = scanner.spans()
                        with gc_paused():
                            batch, cats = decode_spans(
                                arr, starts, ends, totals, n_events, self.path
                            )
                        n_events += batch.num_rows
                        self._account(batch, cats)
                        yield batch
                    clean = int(state[fused.S_CLEAN])
                    full = scanner.full()
                    del arr
                    if clean:
                        tail = n_data - clean
                        _move(work, 1 + clean, 1 + n_data, 1)
                        n_data = tail
                        offset += clean
                    if not full:
                        break
            sha256 = raw.sha256()
        self._finish(bytes(memoryview(work)[1 : 1 + n_data]), state, offset, n_events)
        self.sha256 = sha256

    def read_all(self) -> pa.Table:
        """All events as one table (convenience for tests and small traces)."""
        from warehouse.schema import READER_EVENTS

        return pa.Table.from_batches(list(self.batches()), schema=READER_EVENTS)

    # -- pieces of the loop ----------------------------------------------------------------------

    def _member(self, text: bytes, key_end: int, value_start: int, at: int) -> None:
        """One top-level member: `text` runs from its key's opening quote to its value's end."""
        _check_utf8(self.path, text, at)
        try:
            key = msgspec.json.decode(text[:key_end])
            value = text[value_start:].decode()
            msgspec.json.decode(value)  # the value must be valid JSON on its own
        except msgspec.DecodeError as err:
            raise MalformedTrace(
                self.path, f"invalid JSON in top-level member at byte {at}: {err}"
            ) from None
        except RecursionError:
            raise MalformedTrace(
                self.path, f"top-level member at byte {at}: nesting too deep"
            ) from None
        self.meta.top_level[key] = value

    def _refuse_early(self, pending: int) -> None:
        """Before traceEvents: refuse host execution traces and giant members without reading on."""
        keys = list(self.meta.top_level)
        if HOST_ET_KEYS & set(keys):
            raise NotKinetoTrace(self.path, describe_keys(keys, self._schema_text()))
        if pending > _MAX_MEMBER_BYTES:
            raise NotKinetoTrace(
                self.path,
                f"a JSON object whose top-level member after keys {keys} exceeds "
                f"{_MAX_MEMBER_BYTES >> 20} MiB before any traceEvents; not a Kineto trace",
            )

    def _schema_text(self) -> str | None:
        raw = self.meta.top_level.get("schema")
        if raw is None:
            return None
        value = msgspec.json.decode(raw)
        return value if isinstance(value, str) else raw

    def _scan_error(self, rc: int, buf: bytes, pos: int, offset: int, n_events: int) -> None:
        try:
            self._raise_scan_error(rc, buf, pos, offset, n_events)
        except MalformedTrace as exc:
            if buf[pos : pos + 1] == b"\0":
                hint = _ZERO_PADDED if rc == sc.E_TRAILING else _ZERO_FILLED
                raise MalformedTrace(self.path, exc.problem + hint) from None
            raise

    def _raise_scan_error(self, rc: int, buf: bytes, pos: int, offset: int, n_events: int) -> None:
        at = offset + pos
        snippet = buf[pos : pos + 20].decode("utf-8", "replace")
        if offset == 0 and pos < 8 and wide_encoding(buf[:8]):
            raise NotKinetoTrace(self.path, describe_binary(buf[:64]))
        if rc == sc.E_NOT_OBJECT:
            if buf[pos : pos + 1] == b"[":
                raise NotKinetoTrace(self.path, describe_array(buf[pos : pos + 4096]))
            if not buf[:pos].strip() and looks_binary(buf[pos : pos + 64]):
                raise NotKinetoTrace(self.path, describe_binary(buf[pos:]))
            raise NotKinetoTrace(self.path, f"not a JSON object: starts with {snippet!r}")
        if rc == sc.E_EVENT_NOT_OBJECT:
            n_events += int(self._state_ev_count)
            raise MalformedTrace(
                self.path,
                f"traceEvents element {n_events} is not an object (byte {at}: {snippet!r})",
            )
        if rc == fused.E_EVENT_JSON:
            n_events += int(self._state_ev_count)
            reason = fused.REASON_TEXT.get(int(self._reason), "invalid JSON")
            raise MalformedTrace(
                self.path,
                f"invalid JSON in traceEvents element {n_events} at byte {at}: {reason} "
                f"({snippet!r})",
            )
        if rc == sc.E_TE_NOT_ARRAY:
            raise MalformedTrace(self.path, f"traceEvents is not an array (byte {at}: {snippet!r})")
        if rc == sc.E_DUPLICATE:
            raise MalformedTrace(self.path, f"a second traceEvents array at byte {at}")
        if rc == sc.E_TRAILING:
            end = "bracket" if self.array_form else "brace"
            raise MalformedTrace(
                self.path, f"unexpected data after the closing {end} at byte {at}: {snippet!r}"
            )
        raise MalformedTrace(self.path, f"invalid JSON at byte {at}: unexpected {snippet!r}")

    def _finish(self, buf: bytes, state: np.ndarray, offset: int, n_events: int) -> None:
        phase = int(state[fused.S_PHASE])
        if phase == sc.P_START:
            if buf.strip() or offset:
                raise NotKinetoTrace(self.path, "not JSON: no content")
            raise NotKinetoTrace(self.path, "an empty file (no content after decompression)")
        if phase != sc.P_END:
            where = (
                f"inside traceEvents after {n_events} complete events"
                if state[fused.S_SEEN_TE] and phase in (sc.P_ARRAY, sc.P_EVAFTER)
                else "inside the top-level object"
            )
            raise MalformedTrace(
                self.path, f"truncated JSON: the text ends at byte {offset + len(buf)} {where}"
            )
        if not state[fused.S_SEEN_TE]:
            raise NotKinetoTrace(
                self.path, describe_keys(list(self.meta.top_level), self._schema_text())
            )
        self._complete_meta(n_events)

    def _account(self, batch: pa.RecordBatch, cats: EncodedCategories) -> None:
        meta = self.meta
        self._raw_cats.update(cats.raw_counts())
        span = timed_span(batch.column("ph"), batch.column("ts_ns"), batch.column("dur_ns"))
        if span is not None:
            lo, hi = span
            meta.first_ts_ns = lo if meta.first_ts_ns is None else min(meta.first_ts_ns, lo)
            meta.last_ts_ns = hi if meta.last_ts_ns is None else max(meta.last_ts_ns, hi)
        on_device = cats.rows_in(_DEVICE_CATS)
        if on_device.any():
            dev = int_view(batch.column("device"))
            used = dev.values[on_device & valid_mask(dev.bits, dev.bit0, len(on_device))]
            for value, count in zip(*np.unique(used, return_counts=True), strict=True):
                self._gpu_devices[int(value)] += int(count)

    def _complete_meta(self, n_events: int) -> None:
        from warehouse.readers.categories import normalise

        meta = self.meta
        meta.n_events = n_events
        counts: Counter[str] = Counter()
        for raw, c in self._raw_cats.items():
            counts[normalise(raw or None)] += c
        meta.category_counts = dict(counts)
        if self.array_form:
            meta.trace_format = "chrome-array"
        elif LEGACY_CATEGORIES & set(self._raw_cats):
            meta.trace_format = "kineto-legacy"
        else:
            meta.trace_format = "kineto"
        top = {k: _json_or_none(v) for k, v in meta.top_level.items()}
        sv = top.get("schemaVersion")
        meta.schema_version = None if sv is None else str(sv)
        dist = top.get("distributedInfo")
        if isinstance(dist, dict):
            meta.rank = _int_or_none(dist.get("rank"))
            meta.world_size = _int_or_none(dist.get("world_size"))
        meta.device = self._device_name(top.get("deviceProperties"), counts)

    def _device_name(self, props: object, counts: Counter[str]) -> str | None:
        on_mtia = any(counts.get(c) for c in _MTIA_CATS) or any(
            r in self._raw_cats for r in _MTIA_CATS
        )
        on_device = on_mtia or any(counts.get(c) for c in _DEVICE_CATS)
        if not on_device and not counts.get("cuda_runtime"):
            return "cpu"
        names: dict[int | None, str] = {}
        if isinstance(props, list):
            for p in props:
                if isinstance(p, dict) and isinstance(p.get("name"), str):
                    names.setdefault(_int_or_none(p.get("id")), p["name"])
        if self._gpu_devices:
            used = self._gpu_devices.most_common(1)[0][0]
            if used in names:
                return names[used]
        if names:
            return next(iter(names.values()))
        return "mtia" if on_mtia else None


# Work buffers of finished readings, for the next file read in this process: a fresh chunk
# buffer and span arrays cost their page faults and zeroing again on every file,
# which dominated the time of many small traces. At most _MAX_SPARE sets are kept.
_SPARE: list[tuple[bytearray, fused.Scanner]] = []
_SPARE_LOCK = threading.Lock()
_MAX_SPARE = 2


def _take_buffers(step: int) -> tuple[bytearray, fused.Scanner]:
    """A work buffer of at least step + 2 bytes and a reset scanner, reused if a finished
    reading left ones big enough (never shared by two readings at once)."""
    with _SPARE_LOCK:
        for k, (work, scanner) in enumerate(_SPARE):
            if len(work) >= step + 2 and scanner.capacity >= max(1024, step // 256):
                del _SPARE[k]
                scanner.reset()
                return work, scanner
    return bytearray(step + 2), fused.Scanner(step)


def _give_back(work: bytearray, scanner: fused.Scanner) -> None:
    with _SPARE_LOCK:
        _SPARE.append((work, scanner))
        # keep the biggest sets
        _SPARE.sort(key=lambda t: len(t[0]), reverse=True)
        del _SPARE[_MAX_SPARE:]


def _move(work: bytearray, start: int, end: int, to: int) -> None:
    """work[to : to + end - start] = work[start:end], overlap allowed (numpy copies safely)."""
    w = np.frombuffer(work, dtype=np.uint8)
    w[to : to + end - start] = w[start:end]


def _json_or_none(text: str) -> object:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None


def _int_or_none(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def _check_utf8(path: Path, data: bytes | bytearray, at: int) -> None:
    if data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise MalformedTrace(
            path,
            f"invalid UTF-8 at byte {at + err.start} of the (decompressed) text: {err.reason}",
        ) from None


def open_kineto(path: str | Path, chunk_bytes: int) -> KinetoTrace:
    p = Path(path)
    if not p.exists():
        raise NotKinetoTrace(p, "no such file")
    if p.is_dir():
        raise NotKinetoTrace(p, "a directory, not a trace file")
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    return KinetoTrace(p, chunk_bytes, array_form=_precheck(p))


def _precheck(path: Path) -> bool:
    """Refuse at open what the first 64 KiB already show (empty, binary, arrays that are not
    events, broken gzip); True for a bare array of events (`KinetoTrace.array_form`)."""
    size = path.stat().st_size
    head, gz, error = read_head(path)
    if size == 0:
        raise NotKinetoTrace(path, describe_head(head, gz, error, size))
    if error:
        raise MalformedTrace(path, describe_head(head, gz, error, size))
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if not text and len(head) < (1 << 16):
        raise NotKinetoTrace(path, describe_head(head, gz, error, size))
    if text[:1] == b"[" and is_event_array(text):
        return True
    if text and text[:1] != b"{":
        raise NotKinetoTrace(path, describe_head(head, gz, error, size))
    return False
