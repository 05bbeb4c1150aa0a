"""Non-finite numbers in a trace: `inf`, `nan` (C++'s spelling: Kineto of early 2021 wrote a
zero-length memcpy's bandwidth as `"memory bandwidth (GB/s)": inf`, pytorch/kineto#105) and NaN,
Infinity (Python's json module). Not JSON, but real: the reader keeps such values in `args_json`
as written, gives a promoted id column null, and refuses them, naming the file and the event,
where a column needs an integer. Built from a bundled real trace (runs without ../shared)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import duckdb
import pytest

from warehouse.errors import MalformedTrace
from warehouse.ingest import ingest
from warehouse.readers import open_trace

SMALL = "dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz"
SPELLINGS = ["inf", "-inf", "nan", "-nan", "NaN", "Infinity", "-Infinity", "-NaN"]


def _events(examples: Path) -> list[dict]:
    return json.loads(gzip.decompress((examples / SMALL).read_bytes()))["traceEvents"]


def _write(tmp_path: Path, events: list[dict], marks: dict[str, str], name: str) -> Path:
    """The trace with each JSON string "@MARK" replaced by its literal (written as is)."""
    text = json.dumps({"traceEvents": events})
    for mark, literal in marks.items():
        text = text.replace(json.dumps(mark), literal)
    p = tmp_path / name
    p.write_text(text)
    return p


def _memcpy(events: list[dict]) -> int:
    """The index of an event with args (a GPU memcpy where the trace has one)."""
    for k, e in enumerate(events):
        if e.get("cat") in ("gpu_memcpy", "Memcpy") and isinstance(e.get("args"), dict):
            return k
    return next(k for k, e in enumerate(events) if isinstance(e.get("args"), dict))


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_non_finite_arg_is_kept_as_written(examples: Path, tmp_path: Path, spelling: str) -> None:
    events = _events(examples)
    k = _memcpy(events)
    events[k]["args"]["memory bandwidth (GB/s)"] = "@BW"
    events[k]["args"]["samples"] = ["@BW", 1, {"x": "@BW"}]
    p = _write(tmp_path, events, {"@BW": spelling}, "bw.json")
    table = open_trace(p).read_all()
    assert table.num_rows == len(events)
    row = table.slice(k, 1).to_pylist()[0]
    assert row["event_idx"] == k and row["name"] == events[k]["name"]
    args = row["args_json"]
    assert f'"memory bandwidth (GB/s)": {spelling}, "samples": [{spelling}, 1' in args, args
    # DuckDB's JSON functions read every spelling
    got = (
        duckdb.connect()
        .execute("SELECT json_extract_string(?, '$.\"memory bandwidth (GB/s)\"')", [args])
        .fetchone()[0]
    )
    assert got.lower().lstrip("-") in ("inf", "infinity", "nan"), got
    # every other event reads as before
    plain = open_trace(examples / SMALL).read_all()
    for col in ("ts_ns", "dur_ns", "name", "cat", "correlation"):
        assert table.column(col).to_pylist() == plain.column(col).to_pylist(), col


@pytest.mark.parametrize("spelling", ["inf", "NaN", "-Infinity", "nan"])
def test_a_non_finite_promoted_id_is_null(examples: Path, tmp_path: Path, spelling: str) -> None:
    events = _events(examples)
    k = next(k for k, e in enumerate(events) if "correlation" in e.get("args", {}))
    events[k]["args"]["correlation"] = "@C"
    p = _write(tmp_path, events, {"@C": spelling}, "corr.json")
    table = open_trace(p).read_all()
    assert table.column("correlation")[k].as_py() is None
    assert table.num_rows == len(events)


@pytest.mark.parametrize(("key", "spelling"), [("ts", "inf"), ("dur", "nan"), ("pid", "NaN")])
def test_a_non_finite_time_or_id_is_refused(
    examples: Path, tmp_path: Path, key: str, spelling: str
) -> None:
    events = _events(examples)
    k = next(k for k, e in enumerate(events) if key in e and e.get("ph") == "X")
    events[k][key] = "@V"
    p = _write(tmp_path, events, {"@V": spelling}, "bad.json")
    with pytest.raises(MalformedTrace) as info:
        open_trace(p).read_all()
    msg = str(info.value)
    assert str(p) in msg and f"event {k}: {key} = {spelling} " in msg, msg
    assert "not a finite number" in msg, msg


def test_a_trace_with_inf_bandwidth_ingests(examples: Path, tmp_path: Path) -> None:
    """End to end: ingested, not refused; the value is queryable in the warehouse."""
    events = _events(examples)
    k = _memcpy(events)
    events[k]["args"]["memory bandwidth (GB/s)"] = "@BW"
    p = _write(tmp_path, events, {"@BW": "inf"}, "rank0.json")
    report = ingest([p], warehouse=tmp_path / "wh", job="nonfinite")
    assert [f.status for f in report.files] == ["ok"], report.files
    con = duckdb.connect(str(tmp_path / "wh" / "lumos.duckdb"), read_only=True)
    got = con.execute(
        "SELECT event_idx, json_extract_string(args_json, '$.\"memory bandwidth (GB/s)\"') "
        "FROM events WHERE job = 'nonfinite' AND event_idx = ?",
        [k],
    ).fetchall()
    assert got == [(k, "inf")], got


def test_spellings_inside_strings_are_text(examples: Path, tmp_path: Path) -> None:
    events = _events(examples)
    events[0]["name"] = "inf nan -Infinity NaN"
    p = _write(tmp_path, events, {}, "s.json")
    assert open_trace(p).read_all().column("name")[0].as_py() == "inf nan -Infinity NaN"
    assert re.search(r"\binf\b", p.read_text())  # the file does hold the words
