"""Bad input to the readers: each case raises the right TraceError, naming the file.

Inputs are built in tmp_path from the bundled real traces (so these run without ../shared), except
the real non-Kineto files, which come from ../shared/traces.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from warehouse.errors import MalformedTrace, NotKinetoTrace, TraceError
from warehouse.readers import open_trace, sniff

SMALL = "dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz"
LARGER = "nccl_a100/nccl_data.json.gz"


def read(path: Path, chunk_bytes: int = 32 << 20) -> int:
    trace = open_trace(path, chunk_bytes=chunk_bytes)
    return sum(b.num_rows for b in trace.batches())


def expect(err_type: type[TraceError], path: Path, *words: str, chunk_bytes: int = 32 << 20):
    with pytest.raises(err_type) as info:
        read(path, chunk_bytes)
    msg = str(info.value)
    assert str(path) in msg
    for w in words:
        assert w in msg, msg
    return msg


@pytest.fixture()
def real_text(examples: Path) -> str:
    return gzip.decompress((examples / SMALL).read_bytes()).decode()


def _with_event(tmp_path: Path, text: str, change, name: str = "bad.json") -> Path:
    doc = json.loads(text)
    change(doc["traceEvents"])
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.json"
    p.write_bytes(b"")
    expect(NotKinetoTrace, p, "empty")
    assert "empty" in sniff(p)


def test_empty_gzip(tmp_path: Path) -> None:
    p = tmp_path / "empty.json.gz"
    p.write_bytes(gzip.compress(b""))
    expect(NotKinetoTrace, p, "empty")


def test_truncated_gzip(examples: Path, tmp_path: Path) -> None:
    data = (examples / LARGER).read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    msg = expect(MalformedTrace, p, "truncated gzip")
    assert "zero" not in msg.split(": ", 1)[1]
    # cut short and zero-filled to its length, as a crash or a full disk leaves it
    p.write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
    expect(MalformedTrace, p, "truncated gzip", "zero-filled")
    expect(MalformedTrace, p, "truncated gzip", "zero-filled", chunk_bytes=4096)


def test_corrupt_gzip(examples: Path, tmp_path: Path) -> None:
    data = bytearray((examples / SMALL).read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    p = tmp_path / "corrupt.json.gz"
    p.write_bytes(bytes(data))
    expect(MalformedTrace, p)


def test_gzip_of_several_members_reads_whole(real_text: str, tmp_path: Path) -> None:
    """A gzip file may be several members end to end (`cat a.gz b.gz`, pigz): all are read, with
    a chunk that ends inside each member and one that spans their joint."""
    cut = len(real_text) // 3
    p = tmp_path / "members.json.gz"
    p.write_bytes(gzip.compress(real_text[:cut].encode()) + gzip.compress(real_text[cut:].encode()))
    n = len(json.loads(real_text)["traceEvents"])
    assert read(p) == n
    assert read(p, chunk_bytes=4096) == n


def test_garbage_after_the_gzip_stream(examples: Path, tmp_path: Path) -> None:
    p = tmp_path / "tail.json.gz"
    p.write_bytes((examples / SMALL).read_bytes() + b"not gzip at all")
    expect(MalformedTrace, p, "gzip")


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.999])
def test_truncated_json(real_text: str, tmp_path: Path, fraction: float) -> None:
    p = tmp_path / "cut.json"
    p.write_text(real_text[: int(len(real_text) * fraction)])
    expect(MalformedTrace, p, "truncated")
    expect(MalformedTrace, p, "truncated", chunk_bytes=4096)


def test_binary_garbage(tmp_path: Path) -> None:
    p = tmp_path / "garbage.bin"
    p.write_bytes(random.Random(7).randbytes(5000))
    expect(NotKinetoTrace, p, "binary")
    assert "binary" in sniff(p)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-16-le", "utf-16-be"])
def test_utf16_or_32_text_is_named(tmp_path: Path, real_text: str, encoding: str) -> None:
    p = tmp_path / "wide.json"
    p.write_bytes(real_text[:20000].encode(encoding))  # -le, -be: without a byte order mark
    expect(NotKinetoTrace, p, encoding[:6].upper(), "UTF-8")
    assert encoding[:6].upper() in sniff(p)


def test_non_utf8_bytes(real_text: str, tmp_path: Path) -> None:
    i = real_text.index('"name": "') + len('"name": "')
    data = real_text[:i].encode() + b"\xff\xfe" + real_text[i:].encode()
    p = tmp_path / "latin.json"
    p.write_bytes(data)
    expect(MalformedTrace, p, "UTF-8")


# event strings of every length around the 8-byte words the scan reads, a bad byte at each place
_EVENT_STRINGS = [("name", "x" * k) for k in (0, 3, 7, 8, 9, 15, 17)] + [("args", "y" * 11)]


@pytest.mark.parametrize("chunk_bytes", [64, 32 << 20])
@pytest.mark.parametrize("where", range(len(_EVENT_STRINGS)))
def test_non_utf8_inside_an_event_string(tmp_path: Path, where: int, chunk_bytes: int) -> None:
    field, text = _EVENT_STRINGS[where]
    events = [{"ph": "X", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 1} for _ in range(5)]
    events[3][field] = {"k": "@"} if field == "args" else "@"
    raw = json.dumps({"traceEvents": events}).encode()
    for cut in sorted({0, len(text) // 2, len(text)}):
        bad = text[:cut].encode() + b"\xe9" + text[cut:].encode()  # latin-1 'é'
        p = tmp_path / f"bad-{cut}.json"
        p.write_bytes(raw.replace(b"@", bad))
        expect(MalformedTrace, p, "UTF-8", chunk_bytes=chunk_bytes)
        p.write_bytes(raw.replace(b"@", bad.replace(b"\xe9", "é".encode())))
        rows = open_trace(p, chunk_bytes=chunk_bytes).read_all().to_pylist()
        got = rows[3]["args_json"] if field == "args" else rows[3]["name"]
        assert (json.loads(got)["k"] if field == "args" else got) == bad.decode("latin-1")


@pytest.mark.parametrize("text", ["", "x", "xxxx"])
def test_non_utf8_in_the_last_bytes(tmp_path: Path, text: str) -> None:
    """The scan reads the last < 8 bytes of its buffer one by one: a bad byte there too."""
    p = tmp_path / "end.json"
    p.write_bytes(
        b'{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "name": "'
        + text.encode()
        + b'\xe9"}]}'
    )
    expect(MalformedTrace, p, "UTF-8")


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("ts", "1694128201426556", ["event 5", "ts", "string"]),
        ("ts", True, ["event 5", "ts", "boolean"]),
        ("ts", {"us": 1}, ["event 5", "ts", "object"]),
        ("dur", "12", ["event 5", "dur", "string"]),
        ("ts", 2**64 + 1, ["event 5", "ts", "64-bit"]),
        ("pid", 2**64 + 1, ["event 5", "pid", "64-bit"]),
        ("pid", 1.5, ["event 5", "pid", "not an integer"]),
        ("name", 17, ["event 5", "name", "not a string"]),
    ],
)
def test_wrong_types(real_text: str, tmp_path: Path, field: str, value, words: list[str]) -> None:
    def change(events: list) -> None:
        events[5][field] = value

    p = _with_event(tmp_path, real_text, change)
    expect(MalformedTrace, p, *words)


def test_integer_above_2_64_in_a_promoted_arg(real_text: str, tmp_path: Path) -> None:
    def change(events: list) -> None:
        k = next(i for i, e in enumerate(events) if "correlation" in e.get("args", {}))
        events[k]["args"]["correlation"] = 2**64 + 7

    p = _with_event(tmp_path, real_text, change)
    expect(MalformedTrace, p, "correlation", "64-bit")


def test_uint64_in_other_args_is_kept(real_text: str, tmp_path: Path) -> None:
    def change(events: list) -> None:
        events[3].setdefault("args", {})["Comms Id"] = 2**64 - 5

    p = _with_event(tmp_path, real_text, change)
    table = open_trace(p).read_all()
    assert str(2**64 - 5) in table.column("args_json")[3].as_py()


def test_missing_trace_events(real_text: str, tmp_path: Path) -> None:
    doc = json.loads(real_text)
    doc["events"] = doc.pop("traceEvents")
    p = tmp_path / "no_events.json"
    p.write_text(json.dumps(doc))
    expect(NotKinetoTrace, p, "without traceEvents")


def test_trace_events_key_written_with_escapes(tmp_path: Path) -> None:
    p = tmp_path / "escaped.json"
    p.write_text('{"schemaVersion": 1, "trace\\u0045vents": []}')
    expect(NotKinetoTrace, p, "traceEvents key is written with escape sequences")


def test_json_array_of_other_objects(tmp_path: Path, real_text: str) -> None:
    """An array of trace events is read (tests/test_reader_array_form.py); the same objects
    without their "ph" are not trace events."""
    events = [
        {k: v for k, v in e.items() if k != "ph"} for e in json.loads(real_text)["traceEvents"]
    ]
    p = tmp_path / "array.json"
    p.write_text(json.dumps(events))
    expect(NotKinetoTrace, p, "array", "not trace events")


def test_event_that_is_not_an_object(real_text: str, tmp_path: Path) -> None:
    def change(events: list) -> None:
        events[2] = [1, 2]

    p = _with_event(tmp_path, real_text, change)
    expect(MalformedTrace, p, "element 2", "not an object")


def test_trailing_garbage(real_text: str, tmp_path: Path) -> None:
    p = tmp_path / "tail.json"
    p.write_text(real_text + "\n]junk")
    expect(MalformedTrace, p, "after the closing brace")


def test_invalid_json_inside_an_event(real_text: str, tmp_path: Path) -> None:
    i = real_text.index('"ph": "X"')
    p = tmp_path / "syntax.json"
    p.write_text(real_text[:i] + '"ph": "X",,' + real_text[i + len('"ph": "X",') :])
    expect(MalformedTrace, p, "invalid JSON")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(NotKinetoTrace, match="no such file"):
        open_trace(tmp_path / "nope.json")
    with pytest.raises(NotKinetoTrace, match="directory"):
        open_trace(tmp_path)


@pytest.mark.parametrize(
    ("rel", "words"),
    [
        ("hta/execution_trace/benchmark_simple_add_et.json.gz", ["host execution trace", "1.0.1"]),
        ("chakra/1.0.2-chakra.0.0.4.json.gz", ["host execution trace", "chakra"]),
        ("hta/memory_analysis/memory_timeline.raw.gz", ["memory timeline"]),
    ],
)
def test_real_files_that_are_not_kineto(shared_traces: Path, rel: str, words: list[str]) -> None:
    path = shared_traces / rel
    msg = expect(NotKinetoTrace, path, *words)
    assert words[0] in sniff(path), msg


@pytest.mark.parametrize("chunk_bytes", [32 << 20, 4096])
def test_trailing_comma_after_the_last_member(real_text: str, tmp_path: Path, chunk_bytes) -> None:
    """`{..., "traceEvents": [...],}` is not JSON (found by fuzzing: it was accepted)."""
    p = tmp_path / "comma.json"
    p.write_text(real_text.rstrip().removesuffix("}") + ",}")
    expect(MalformedTrace, p, "invalid JSON", chunk_bytes=chunk_bytes)


def test_deep_nesting_in_a_top_level_member(real_text: str, tmp_path: Path) -> None:
    """Nesting deeper than the JSON parser's recursion limit in a metadata member is a clean
    refusal, not an internal error (which ingest retries on every run)."""
    p = tmp_path / "deep.json"
    p.write_text('{"deep": ' + "[" * 100_000 + "]" * 100_000 + ", " + real_text.lstrip()[1:])
    expect(MalformedTrace, p, "nesting too deep")


def test_decimal_digits_below_the_nanosecond(real_text: str, tmp_path: Path) -> None:
    """Trailing zeros and digits far below the nanosecond are legal JSON: the value is the
    exact one rounded half to even (they used to overflow the 19-digit mantissa)."""
    doc = json.loads(real_text)
    ev = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    k = doc["traceEvents"].index(ev)
    base = int(ev["ts"])
    cases = {"0000000000000000000000": 0, "0004999999999999999999": 0, "0005000000000000000001": 1}
    for frac, up in cases.items():
        text = json.dumps(doc).replace(f'"ts": {json.dumps(ev["ts"])}', f'"ts": {base}.{frac}', 1)
        p = tmp_path / f"ts_{frac}.json"
        p.write_text(text)
        table = open_trace(p).read_all()
        assert table.column("ts_ns")[k].as_py() == base * 1000 + up, frac


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"null", ["a JSON null", "traceEvents"]),
        (b"12345", ["a JSON number"]),
        (b'"a string"', ["a JSON string"]),
        (b"hello world", ["not JSON: text starting with 'hello world'"]),
        (b'{"traceEvents": null}', ["traceEvents is not an array"]),
        (b'{"schemaVersion": 1, "traceEvents": {"ph": "X"}}', ["traceEvents is not an array"]),
    ],
)
def test_what_a_non_trace_is_is_named(tmp_path: Path, content: bytes, words: list[str]) -> None:
    """Found by fuzzing: JSON scalars and plain text were all called 'binary data', and a
    traceEvents that is not an array 'invalid JSON'."""
    p = tmp_path / "x.json"
    p.write_bytes(content)
    expect(TraceError, p, *words)


def test_an_escaped_label_is_not_read_as_its_escape_digits(tmp_path: Path) -> None:
    """Found by fuzzing: `"pid": "\\u0037"` (the label "7", escaped) was stored as pid 37, read
    from the escape's digits. The label keeps its decoded text; no integer is made up."""
    p = tmp_path / "esc.json"
    p.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "pid": "\\u0037", '
        '"tid": "stream 3", "ts": 1000, "dur": 5}]}'
    )
    row = open_trace(p).read_all().to_pylist()[0]
    assert (row["pid"], row["pid_label"]) == (None, "7")
    assert (row["tid"], row["tid_label"]) == (3, "stream 3")


def test_a_zero_filled_tail_is_named(real_text: str, tmp_path: Path) -> None:
    # a crash or a full disk while the profiler wrote: the file's length, zeros for the rest
    data = real_text.encode()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
    padded = tmp_path / "padded.json"
    padded.write_bytes(data + bytes(4096))
    for chunk_bytes in (32 << 20, 4096):
        expect(MalformedTrace, cut, "cut short and zero-filled", chunk_bytes=chunk_bytes)
        expect(MalformedTrace, padded, "zero bytes after the trace's end", chunk_bytes=chunk_bytes)
    # other garbage keeps its own message
    other = tmp_path / "other.json"
    other.write_bytes(data[: len(data) // 2] + b"x" * 100)
    with pytest.raises(MalformedTrace) as info:
        read(other)
    assert "zero" not in info.value.problem


def test_blanks_between_events_do_not_pile_up(real_text: str, tmp_path: Path) -> None:
    """Issue 34, item 6: megabytes of whitespace between two events are consumed as they are
    read: the reader allocates nothing near the run's size (its buffer grew with the run, and
    5 GB of it took minutes)."""
    doc = json.loads(real_text)
    events = doc.pop("traceEvents")
    head = json.dumps(doc)[:-1]
    blanks = " \n\t" * (3 << 20)  # 9 MiB
    text = f'{head}, "traceEvents": [{json.dumps(events[0])},{blanks}{json.dumps(events[1])}]}}'
    p = tmp_path / "blanks.json"
    p.write_text(text)
    chunk = 1 << 16
    small = tmp_path / "small.json"
    small.write_text(real_text)
    read(small, chunk)  # compiled and warm: what follows allocates only for the reading
    import tracemalloc

    tracemalloc.start()
    try:
        assert read(p, chunk) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the 9 MiB run held as an unfinished tail would need buffers at least that large
    assert peak < 4 << 20, peak


def test_a_giant_string_is_refused_not_held(
    real_text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, item 6: an event longer than the reader's bound (64 MiB; 1 MiB here) is
    refused by name instead of being held in memory whole (a 300 MB one took 1.4 GB)."""
    import warehouse.readers.trace as trace_module

    monkeypatch.setattr(trace_module, "_MAX_EVENT_BYTES", 1 << 20)
    doc = json.loads(real_text)
    doc["traceEvents"][1]["name"] = "x" * (3 << 20)
    p = tmp_path / "giant.json"
    p.write_text(json.dumps(doc))
    expect(MalformedTrace, p, "runs past 1 MiB without ending", chunk_bytes=1 << 16)
