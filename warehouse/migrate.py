"""Move a local warehouse of today's layout to an S3 warehouse (issue 38, item 4), then check
that nothing was lost.

The data files are copied first, to the same relative keys (content-addressed: a file already
there is not copied again), then the manifest's latest rows go in as one Delta commit
(`warehouse.lake.import_manifest`, which appends only the rows the lake lacks): the commit
point comes last, as in an ingest, and a second run copies and commits nothing. The check
compares, table by table, the row counts and a sha256 over the rows (and over the data files'
bytes) of the two warehouses, each read through its own views.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.lake import LakeError, LakeManifest, import_manifest
from warehouse.lake_files import LakeFiles
from warehouse.layout import Layout, trace_meta_relative
from warehouse.manifest import read_manifest

__all__ = ["Comparison", "MigrationReport", "compare", "migrate"]

# what each compared table's rows are reduced to: a query over the catalog's views (the same
# SQL on both sides), sorted so that the hash does not depend on the order files were listed
_TABLE_QUERIES = {
    "traces": "SELECT job, sha256, rank, path, size_bytes, status, error, n_events, events_file "
    "FROM traces ORDER BY ALL",
    "events": "SELECT job, rank, trace_sha256, count(*), sum(ts_ns), sum(hash(name)) "
    "FROM events GROUP BY ALL ORDER BY ALL",
    "trace_meta": "SELECT job, rank, trace_sha256, key, value_json FROM trace_meta ORDER BY ALL",
}


@dataclass(frozen=True)
class Comparison:
    """One table (or the data files) on both sides: how many rows, and their hash."""

    table: str
    local_rows: int
    remote_rows: int
    local_sha256: str
    remote_sha256: str

    @property
    def equal(self) -> bool:
        return (self.local_rows, self.local_sha256) == (self.remote_rows, self.remote_sha256)


@dataclass
class MigrationReport:
    source: Path
    target: str
    files_copied: int = 0
    files_present: int = 0
    rows_committed: int = 0
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return bool(self.comparisons) and all(c.equal for c in self.comparisons)


def migrate(source: str | Path, target: str) -> MigrationReport:
    """Copy the warehouse at `source` to the S3 warehouse `target`, then `compare` them."""
    layout = Layout.at(source)
    if not layout.exists():
        raise LakeError(f"{layout.root}: no lumos warehouse here (nothing to migrate)")
    lake = LakeManifest.at(target)
    files = LakeFiles(lake.uri, lake.storage)
    report = MigrationReport(layout.root, lake.uri)
    for rel in _data_files(layout):
        local = layout.root / rel
        if not local.is_file():
            raise LakeError(f"{local}: a committed data file of {layout.root} is missing")
        if files.put(str(local), rel):
            report.files_copied += 1
        else:
            report.files_present += 1
    report.rows_committed = import_manifest(layout, lake)  # the commit point: last
    from warehouse.lake_tables import sync_tables

    sync_tables(lake, files)  # the data tables' Delta logs follow it
    report.comparisons = compare(layout.root, lake.uri)
    return report


def compare(source: str | Path, target: str) -> list[Comparison]:
    """Counts and hashes of each table of the local warehouse `source` and the S3 one `target`,
    and of their data files' bytes."""
    from warehouse import lake_catalog
    from warehouse.catalog import build_catalog, catalog_is_current, connect

    layout = Layout.at(source)
    if not catalog_is_current(layout.root):
        build_catalog(layout.root)
    local_con = connect(layout.catalog_path)
    remote_con = lake_catalog.connect(target)
    try:
        out = []
        for table, query in _TABLE_QUERIES.items():
            mine = local_con.execute(query).fetchall()
            theirs = remote_con.execute(query).fetchall()
            out.append(Comparison(table, len(mine), len(theirs), _hash(mine), _hash(theirs)))
    finally:
        local_con.close()
        remote_con.close()
    lake = LakeManifest.at(target)
    files = LakeFiles(lake.uri, lake.storage)
    local_files = sorted(_data_files(layout))
    remote_files = sorted(_data_files_of(lake.read().rows))
    mine = [(r, hashlib.sha256((layout.root / r).read_bytes()).hexdigest()) for r in local_files]
    theirs = [(r, hashlib.sha256(files.read_bytes(r)).hexdigest()) for r in remote_files]
    out.append(Comparison("data files", len(mine), len(theirs), _hash(mine), _hash(theirs)))
    return out


def _data_files(layout: Layout) -> list[str]:
    return _data_files_of(read_manifest(layout).rows)


def _data_files_of(rows: list[dict]) -> list[str]:
    """The events and trace_meta files the ok rows name, relative to the warehouse."""
    out = []
    for r in rows:
        if r["status"] == "ok" and r["events_file"]:
            out += [r["events_file"], trace_meta_relative(r["job"], r["rank"], r["sha256"])]
    return out


def _hash(rows: list) -> str:
    digest = hashlib.sha256()
    for row in rows:
        digest.update(repr(tuple(row)).encode())
        digest.update(b"\n")
    return digest.hexdigest()
