"""The reader's reused chunk buffer: byte order marks, non-ASCII text and error offsets must not
depend on where chunk boundaries fall (the buffer is refilled in place, after the unfinished tail).

Expected values come from the standard `json` module, never from the reader.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from warehouse.errors import MalformedTrace
from warehouse.readers import open_trace

SMALL = "dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz"


@pytest.fixture()
def doc(examples: Path) -> dict:
    return json.loads(gzip.decompress((examples / SMALL).read_bytes()))


def _names(path: Path, chunk_bytes: int) -> list[str | None]:
    return open_trace(path, chunk_bytes=chunk_bytes).read_all().column("name").to_pylist()


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 4096, 1500])
def test_byte_order_mark_is_skipped(doc: dict, tmp_path: Path, chunk_bytes: int) -> None:
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    assert _names(p, chunk_bytes) == [e.get("name") for e in doc["traceEvents"]]


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 4096, 1000])
def test_non_ascii_names_across_chunk_boundaries(
    doc: dict, tmp_path: Path, chunk_bytes: int
) -> None:
    for k, event in enumerate(doc["traceEvents"]):
        if k % 3 == 0 and isinstance(event.get("name"), str):
            event["name"] += " µs→ß 𝛑"  # 2, 3 and 4-byte UTF-8 sequences
    p = tmp_path / "utf8.json"
    p.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    assert _names(p, chunk_bytes) == [e.get("name") for e in doc["traceEvents"]]


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 4096])
def test_invalid_utf8_late_in_the_file_gives_its_offset(
    doc: dict, tmp_path: Path, chunk_bytes: int
) -> None:
    text = json.dumps(doc).encode()
    at = text.rindex(b'"name": "') + len(b'"name": "')  # in the last events, after many chunks
    p = tmp_path / "late.json"
    p.write_bytes(text[:at] + b"\xff" + text[at:])
    with pytest.raises(MalformedTrace) as info:
        sum(b.num_rows for b in open_trace(p, chunk_bytes=chunk_bytes).batches())
    assert str(p) in str(info.value)
    assert f"invalid UTF-8 at byte {at} " in str(info.value)


def test_a_huge_chunk_size_on_a_small_file(doc: dict, tmp_path: Path) -> None:
    p = tmp_path / "small.json"
    p.write_text(json.dumps(doc))
    assert _names(p, 1 << 40) == [e.get("name") for e in doc["traceEvents"]]
