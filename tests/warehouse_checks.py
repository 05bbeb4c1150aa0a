"""What a user can see of a warehouse, and the checks that it is whole: shared by the atomicity
tests and `bench/torture.py` (each raises AssertionError naming what is wrong)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from warehouse.catalog import build_catalog
from warehouse.schema import TRACES


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root with its size and mtime (ns)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.stat()
        out[p.relative_to(root).as_posix()] = (st.st_size if p.is_file() else -1, st.st_mtime_ns)
    return out


def manifest_rows(wh: Path) -> list[dict]:
    """The rows of the live manifest parts (a part merged away and kept for its grace period
    holds copies of rows of the merged one)."""
    from warehouse.layout import Layout

    return [
        r
        for p in Layout.at(wh).manifest_parts()
        for r in pq.read_table(p, schema=TRACES).to_pylist()
    ]


def query(wh: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    try:
        return con.sql(sql).fetchall()
    finally:
        con.close()


def assert_consistent(wh: Path) -> int:
    """What a user can see is whole: each committed trace has exactly its events, once.
    Returns the number of committed traces."""
    rows = manifest_rows(wh)
    ok = Counter((r["job"], r["sha256"]) for r in rows if r["status"] == "ok")
    assert all(n == 1 for n in ok.values()), ok  # exactly one copy of each trace
    build_catalog(wh)  # what `Warehouse.open` does when the catalog is missing
    expected = {(r["job"], r["sha256"]): r["n_events"] for r in rows if r["status"] == "ok"}
    seen = dict(
        ((job, sha), n)
        for job, sha, n in query(wh, "select job, trace_sha256, count(*) from events group by all")
    )
    assert seen == {k: n for k, n in expected.items() if n}
    for r in rows:
        if r["status"] == "ok":
            assert pq.ParquetFile(wh / r["events_file"]).metadata.num_rows == r["n_events"]
    return len(expected)


def assert_clean(wh: Path) -> None:
    """No staging leftovers, no temporary files, no data file without its manifest row."""
    assert not [p for p in (wh / "_staging").iterdir()], list((wh / "_staging").iterdir())
    assert not list(wh.rglob("*.tmp"))
    referenced = {r["events_file"] for r in manifest_rows(wh) if r["status"] == "ok"}
    data = {
        p.relative_to(wh).as_posix()
        for p in (wh / "events").rglob("*.parquet")
        if p.name != "_schema.parquet"
    }
    assert data == referenced
