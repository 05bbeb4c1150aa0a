"""Buffers reused from file to file (warehouse.readers.trace keeps the work buffer and span arrays
of a finished reading for the next one): a reading must not see anything of the
previous file, two readings interleaved in one thread must not share buffers, and the chunk size
must stay what the caller asked for even when the reused buffer is bigger.

Expected values come from the standard `json` module, never from the reader.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from warehouse.errors import MalformedTrace
from warehouse.ingest import _constant, sha256_file
from warehouse.readers import open_trace
from warehouse.readers.source import HASH_CHUNK

DLRM = "dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz"
GPT = "gpt_cpu/rank-0.pt.trace.json.gz"


def _expected(path: Path) -> tuple[list[str | None], list[int | None]]:
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    events = doc["traceEvents"]
    ts = [None if e.get("ts") is None else int(Decimal(e["ts"]) * 1000) for e in events]
    return [e.get("name") for e in events], ts


def _read(path: Path, chunk_bytes: int = 32 << 20) -> tuple[list, list]:
    table = open_trace(path, chunk_bytes=chunk_bytes).read_all()
    return table.column("name").to_pylist(), table.column("ts_ns").to_pylist()


def test_big_then_small_then_big(examples: Path) -> None:
    big, small = examples / GPT, examples / DLRM
    for path in (big, small, big, small):
        assert _read(path) == _expected(path)


def test_interleaved_readings_do_not_share_buffers(examples: Path) -> None:
    a, b = examples / GPT, examples / DLRM
    gen_a = open_trace(a, chunk_bytes=1 << 16).batches()
    gen_b = open_trace(b, chunk_bytes=1 << 16).batches()
    names_a: list = []
    names_b: list = []
    done_a = done_b = False
    while not (done_a and done_b):
        for gen, out, done in ((gen_a, names_a, done_a), (gen_b, names_b, done_b)):
            if done:
                continue
            batch = next(gen, None)
            if batch is None:
                if gen is gen_a:
                    done_a = True
                else:
                    done_b = True
                continue
            out.extend(batch.column("name").to_pylist())
    assert names_a == _expected(a)[0]
    assert names_b == _expected(b)[0]


def test_a_small_chunk_after_a_big_one_keeps_its_boundaries(examples: Path, tmp_path: Path) -> None:
    """A late error's byte offset is only right if chunks were refilled at the asked size."""
    _read(examples / GPT)  # leaves a 32 MiB buffer for reuse
    text = gzip.decompress((examples / DLRM).read_bytes())
    at = text.rindex(b'"name": "') + len(b'"name": "')
    p = tmp_path / "late.json"
    p.write_bytes(text[:at] + b"\xff" + text[at:])
    seen = []
    with pytest.raises(MalformedTrace) as info:
        for batch in open_trace(p, chunk_bytes=4096).batches():
            seen.append(batch.num_rows)
    assert f"invalid UTF-8 at byte {at} " in str(info.value)
    assert len(seen) > 10  # many 4 KiB chunks, not one read of the whole file


def test_sha256_file_matches_hashlib(examples: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    for path in (empty, examples / DLRM):
        assert sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    # a file longer than the reused buffer, its length not a multiple of it
    big = tmp_path / "big.json"
    big.write_bytes(os.urandom(HASH_CHUNK * 2 + 12345))
    assert sha256_file(big) == hashlib.sha256(big.read_bytes()).hexdigest()


@pytest.mark.parametrize("value", ["", "job/a", "é-ü", "0" * 64])
@pytest.mark.parametrize("n", [0, 1, 1000])
def test_constant_string_columns_are_valid(value: str, n: int) -> None:
    """The job and sha256 columns are laid out by hand (offsets and bytes): Arrow must accept them
    and read back the value on every row."""
    col = _constant(value, n, pa.string())
    col.validate(full=True)
    assert col.type == pa.string() and col.null_count == 0
    assert col.to_pylist() == [value] * n


def test_a_kept_table_survives_later_readings(examples: Path) -> None:
    """Batches own their memory: the buffers a finished reading hands back to the next one are
    never referenced by what it yielded."""
    a, b = examples / GPT, examples / DLRM
    kept = open_trace(a).read_all()
    before = kept.to_pylist()
    for path in (b, a, b):
        open_trace(path).read_all()
    assert kept.to_pylist() == before
    assert kept.column("name").to_pylist() == _expected(a)[0]


def test_the_reading_hashes_the_file(examples: Path, shared_traces: Path, tmp_path: Path) -> None:
    """The sha256 the reader reports (what names the events file) is the hash of the file's own
    bytes, compressed or not, read in chunks of any size; gzip'd bytes after the stream's end
    (which decompression never asks for) are hashed too."""
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress((examples / DLRM).read_bytes()))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    padded = tmp_path / "padded.json.gz"
    padded.write_bytes((examples / DLRM).read_bytes() + b"\0" * 8)  # gzip's zero padding
    big = shared_traces / "hta/df_index_resolver/df_index_resolver.json.gz"
    for path in (examples / DLRM, examples / GPT, plain, bom, padded, big):
        # 4 KiB chunks on the small files only: the 54 MB trace took 6 s in them
        for chunk in (1 << 20,) if path == big else (4096, 1 << 20):
            trace = open_trace(path, chunk_bytes=chunk)
            assert trace.sha256 is None  # not read yet
            n = sum(b.num_rows for b in trace.batches())
            assert n > 0
            assert trace.sha256 == hashlib.sha256(path.read_bytes()).hexdigest(), (path, chunk)


def test_a_refused_reading_reports_no_hash(tmp_path: Path) -> None:
    """A reading that stops at an error has not seen the whole file: no hash is claimed."""
    p = tmp_path / "truncated.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, ')
    trace = open_trace(p)
    with pytest.raises(MalformedTrace):
        list(trace.batches())
    assert trace.sha256 is None
