"""The Chrome trace format's array form: a bare JSON array of trace events, no wrapping object and
so no metadata (PyTorch's autograd profiler wrote its traces so before Kineto; scripts that filter
a trace's events often do). Read like a Kineto trace whose metadata is all absent; an array of
anything else is still refused. Built from bundled real traces (runs without ../shared)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from warehouse.errors import MalformedTrace, NotKinetoTrace
from warehouse.ingest import ingest
from warehouse.layout import Layout
from warehouse.manifest import read_manifest
from warehouse.readers import open_trace, sniff

RANK0 = "dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz"
RANK1 = "dlrm_8rank/worker1_step_12.1694128201556.pt.trace.json.gz"


def _events(examples: Path, name: str = RANK0) -> list[dict]:
    return json.loads(gzip.decompress((examples / name).read_bytes()))["traceEvents"]


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 4096, 700])
def test_reads_as_the_object_form_does(examples: Path, tmp_path: Path, chunk_bytes: int) -> None:
    events = _events(examples)
    arr = tmp_path / "array.json"
    arr.write_text(json.dumps(events))
    obj = tmp_path / "object.json"
    obj.write_text(json.dumps({"traceEvents": events}))  # the same bytes per event
    a = open_trace(arr, chunk_bytes=chunk_bytes)
    o = open_trace(obj, chunk_bytes=chunk_bytes)
    table, ref = a.read_all(), o.read_all()
    assert table.num_rows == len(events)
    assert table.equals(ref)
    assert a.meta.trace_format == "chrome-array" and o.meta.trace_format == "kineto"
    assert (a.meta.first_ts_ns, a.meta.last_ts_ns) == (o.meta.first_ts_ns, o.meta.last_ts_ns)
    assert a.meta.top_level == {} and a.meta.rank is None and a.meta.world_size is None
    assert "array-form Chrome trace" in sniff(arr)


def test_a_job_of_array_form_ranks_ingests(examples: Path, tmp_path: Path) -> None:
    job = tmp_path / "legacy_job"
    job.mkdir()
    for rank, name in ((0, RANK0), (1, RANK1)):
        (job / f"rank{rank}.json").write_text(json.dumps(_events(examples, name), indent=1))
    report = ingest([job], warehouse=tmp_path / "wh")
    assert sorted((f.rank, f.status) for f in report.files) == [(0, "ok"), (1, "ok")]
    rows = read_manifest(Layout.at(tmp_path / "wh")).rows
    assert sorted(r["trace_format"] for r in rows) == ["chrome-array"] * 2
    assert sorted(r["n_events"] for r in rows) == sorted(
        len(_events(examples, n)) for n in (RANK0, RANK1)
    )


def test_an_array_of_other_objects_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "rows.json"
    p.write_text(json.dumps([{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.4}]))
    with pytest.raises(NotKinetoTrace) as info:
        open_trace(p)
    assert str(p) in str(info.value) and "not trace events" in str(info.value)


def test_an_empty_array_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "empty.json"
    p.write_text("[]")
    with pytest.raises(NotKinetoTrace):
        open_trace(p)


def test_data_after_the_array_is_refused(examples: Path, tmp_path: Path) -> None:
    p = tmp_path / "tail.json"
    p.write_text(json.dumps(_events(examples)) + "\n{}")
    with pytest.raises(MalformedTrace) as info:
        open_trace(p, chunk_bytes=4096).read_all()
    assert str(p) in str(info.value) and "after the closing bracket" in str(info.value)


def test_a_truncated_array_is_refused(examples: Path, tmp_path: Path) -> None:
    events = _events(examples)
    text = json.dumps(events)
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) * 2 // 3])
    with pytest.raises(MalformedTrace) as info:
        open_trace(p, chunk_bytes=4096).read_all()
    assert "truncated JSON" in str(info.value) and "inside traceEvents" in str(info.value)


def test_an_object_trace_may_not_close_as_an_array(examples: Path, tmp_path: Path) -> None:
    """The array form is decided by the file's first byte: an object trace whose events array
    closes the file is truncated, not an array."""
    text = json.dumps({"traceEvents": _events(examples)})
    p = tmp_path / "half.json"
    p.write_text(text[:-1])  # the closing brace missing
    with pytest.raises(MalformedTrace) as info:
        open_trace(p).read_all()
    assert "truncated JSON" in str(info.value)
