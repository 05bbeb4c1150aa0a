"""The torture bench's own checks (bench/torture_checks.py, bench/torture_inputs.py): a change
of the warehouse is seen, a traceback or a silent success is not a refusal, and the large
inputs are what they say (checked by reading them back with the standard library)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from warehouse.ingest import ingest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from torture_checks import Ran, Verdict, changes, state  # noqa: E402
from torture_inputs import blanks_between_events, giant_string, load  # noqa: E402


def _ran(rc: int, err: str) -> Ran:
    return Ran(rc=rc, out="", err=err, wall_s=0.1, max_rss_mb=1, timed_out=False, out_bytes=0)


def test_a_commit_and_a_rewrite_are_changes(examples: Path, warehouse_dir: Path) -> None:
    ingest([examples / "nccl_a100"], warehouse=warehouse_dir)
    before = state(warehouse_dir)
    assert changes(before, state(warehouse_dir)) == []
    one = sorted((examples / "dlrm_8rank").glob("*.json.gz"))[0]
    ingest([one], warehouse=warehouse_dir, job="more")
    after = state(warehouse_dir)
    said = changes(before, after)
    assert "manifest rows changed (-0 +1)" in said
    assert any(s.startswith("added events/job=more/") for s in said), said
    # a file rewritten in place (same name, other bytes), as `COPY ... TO` an events file did
    [events] = [p for p in (warehouse_dir / "events").rglob("*.parquet") if "job=more" in str(p)]
    events.write_bytes(events.read_bytes()[:-1] + b"\0\0")
    assert any(
        s.startswith("rewrote events/job=more/") for s in changes(after, state(warehouse_dir))
    )


def test_a_refusal_is_clear_or_not_handled() -> None:
    clear = Verdict()
    clear.refused(_ran(2, "lumos sql: COPY statements are not run"), "COPY")
    assert clear.handled
    traceback = Verdict()
    traceback.refused(_ran(1, "Traceback (most recent call last):\nPermissionError: x"), "x")
    assert not traceback.handled and "a traceback" in traceback.summary()
    silent = Verdict()
    silent.refused(_ran(0, "1 ingested"), "vocab")
    assert silent.failed == ["not refused (exit 0: 1 ingested)"]
    unnamed = Verdict()
    unnamed.refused(_ran(1, "lumos ingest: something went wrong"), "vocab")
    assert unnamed.failed == ["does not say 'vocab' (exit 1: lumos ingest: something went wrong)"]


def test_large_inputs_are_streamed_as_said(tmp_path: Path, examples: Path) -> None:
    doc = load(examples / "dlrm_8rank" / "worker0_step_12.1694128201545.pt.trace.json.gz")
    n = (4 << 20) + 123  # more than one block, not a multiple of it
    blanks = json.loads(
        gzip.decompress(blanks_between_events(tmp_path / "b.gz", doc, n).read_bytes())
    )
    assert blanks == doc
    raw = gzip.decompress(giant_string(tmp_path / "g.gz", doc, n).read_bytes())
    giant = json.loads(raw)
    assert giant["traceEvents"][1]["name"] == "x" * n
    assert giant["traceEvents"][:1] + giant["traceEvents"][2:] == doc["traceEvents"]


@pytest.mark.parametrize("n", [0, 1])
def test_blanks_of_any_length_keep_the_document(tmp_path: Path, n: int) -> None:
    doc = {"traceEvents": [{"ph": "X", "name": "a"}, {"ph": "X", "name": "b"}], "k": 1}
    text = gzip.decompress(blanks_between_events(tmp_path / "b.gz", doc, n).read_bytes())
    assert json.loads(text) == doc
