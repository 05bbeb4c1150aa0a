"""A process's manifest reads are incremental (`warehouse.manifest.read_manifest`): after a first
read, only parts added since are parsed. Whatever other processes do in between (append a part,
merge the parts, rewrite one), a read gives what a fresh process reads. Real Parquet parts, real
subprocesses."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.cli_run import ROOT
from warehouse.layout import Layout
from warehouse.manifest import append_rows, commit_lock, compact, read_manifest
from warehouse.schema import TRACES

_FRESH = """
import json, sys
from warehouse.layout import Layout
from warehouse.manifest import read_manifest
m = read_manifest(Layout.at(sys.argv[1]))
print(json.dumps(sorted([r["job"], r["sha256"], r["status"], r["n_events"]] for r in m.rows)))
"""
_APPEND = """
import datetime as dt, json, sys
from warehouse.layout import Layout
from warehouse.manifest import append_rows, commit_lock, compact
layout = Layout.at(sys.argv[1])
rows = json.loads(sys.argv[2])
for r in rows:
    r["ingested_at"] = dt.datetime.fromisoformat(r["ingested_at"])
with commit_lock(layout):
    append_rows(layout, rows)
    if sys.argv[3] == "merge":
        compact(layout, min_parts=1)
"""


def _row(job: str, k: int, status: str = "ok", n: int = 10) -> dict:
    r = dict.fromkeys(TRACES.names)
    now = dt.datetime.now(dt.UTC)
    r.update(job=job, rank=k, path=f"/t/{job}/rank{k}.json", sha256=f"{k:064x}", size_bytes=100)
    r.update(status=status, n_events=n, ingested_at=now)
    return r


def _in_other_process(root: Path, rows: list[dict], merge: bool = False) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _APPEND,
            str(root),
            json.dumps(rows, default=str),
            "merge" if merge else "-",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def _fresh(root: Path) -> list[list]:
    out = subprocess.run(
        [sys.executable, "-c", _FRESH, str(root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _here(layout: Layout) -> list[list]:
    rows = read_manifest(layout).rows
    return sorted([r["job"], r["sha256"], r["status"], r["n_events"]] for r in rows)


def test_reads_follow_other_processes(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path / "wh")
    layout.ensure()
    with commit_lock(layout):
        append_rows(layout, [_row("a", 0), _row("a", 1)])
    assert len(_here(layout)) == 2  # this process has read the manifest once

    _in_other_process(layout.root, [_row("b", 0), _row("a", 1, "refused", 0)])
    assert _here(layout) == _fresh(layout.root)
    assert ["a", f"{1:064x}", "refused", 0] in _here(layout)  # the later row wins

    _in_other_process(layout.root, [_row("c", 2)], merge=True)  # the parts merged elsewhere
    assert len(layout.manifest_parts()) == 1
    assert _here(layout) == _fresh(layout.root)
    assert len(_here(layout)) == 4

    # a part rewritten in place under the same name (nothing of ours does it; a user might)
    part = layout.manifest_parts()[0]
    table = pq.read_table(part)
    changed = table.set_column(
        table.schema.get_field_index("n_events"),
        "n_events",
        pa.array([99] * table.num_rows, pa.int64()),
    )
    pq.write_table(changed, part)
    assert _here(layout) == _fresh(layout.root)
    assert {r[3] for r in _here(layout)} == {99}


def test_a_merge_here_reads_as_a_fresh_process_does(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path / "wh")
    layout.ensure()
    for k in range(5):
        with commit_lock(layout):
            append_rows(layout, [_row("j", k), _row("j", 100 + k, "refused", 0)])
    with commit_lock(layout):
        append_rows(layout, [_row("j", 3, "refused", 0)])
        assert compact(layout, min_parts=2)
    assert _here(layout) == _fresh(layout.root)
    with commit_lock(layout):
        append_rows(layout, [_row("k", 7)])
    assert _here(layout) == _fresh(layout.root)
    assert len(_here(layout)) == 11
