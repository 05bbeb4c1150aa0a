"""The data tables of an S3 warehouse (`events`, `trace_meta`) as Delta tables of their own, so
that Spark, Trino, Polars or delta-rs read them as tables, without lumos and without a glob.

The manifest's Delta log stays the commit point (`warehouse.lake`): a data table's log only
follows it, adding the files the manifest's ok rows name (where the ingest uploaded them, no
copy) and removing those no ok row names any more. It never holds a file the manifest has not
committed; after a killed ingest it lags until the next ingest's `sync_tables` brings it up to
date. A table's files are listed before the manifest is read, so a file another writer added
after its own manifest commit is in the manifest this writer reads, and is never removed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from urllib.parse import unquote

import pyarrow as pa

from warehouse.lake import LakeManifest
from warehouse.lake_files import LakeFiles
from warehouse.layout import events_relative, trace_meta_relative
from warehouse.schema import EVENT_FILE, TRACE_META

__all__ = ["DATA_TABLES", "sync_tables", "table_uri"]

# table -> (its files' schema, where an ok manifest row's file of it is, relative to the warehouse)
DATA_TABLES: Mapping[str, tuple[pa.Schema, Callable[[dict], str]]] = {
    "events": (EVENT_FILE, lambda r: events_relative(r["job"], r["rank"], r["sha256"])),
    "trace_meta": (TRACE_META, lambda r: trace_meta_relative(r["job"], r["rank"], r["sha256"])),
}


def table_uri(lake: LakeManifest, name: str) -> str:
    return f"{lake.uri}/{name}"


def sync_tables(lake: LakeManifest, files: LakeFiles) -> dict[str, tuple[int, int]]:
    """Bring every data table's log to the manifest's latest ok rows; (added, removed) files per
    table. A failure is said on stderr and left to the next ingest (the manifest is committed)."""
    from deltalake import DeltaTable

    current: dict[str, set[str]] = {}
    for name, (schema, _) in DATA_TABLES.items():
        uri = table_uri(lake, name)
        DeltaTable.create(uri, schema=schema, mode="ignore", storage_options=lake.storage)
        paths = DeltaTable(uri, storage_options=lake.storage).get_add_actions().column("path")
        current[name] = {unquote(p) for p in paths.to_pylist()}  # the log holds them encoded
    ok = [r for r in lake.read().rows if r["status"] == "ok" and r["events_file"]]
    out = {}
    for name, (schema, where) in DATA_TABLES.items():
        prefix = f"{name}/"
        want = {where(r)[len(prefix) :] for r in ok}
        try:
            out[name] = _commit(lake, files, name, schema, want, current[name])
        except Exception as exc:  # a concurrent remove, a network error: the next sync's
            print(f"lumos: {table_uri(lake, name)} lags the manifest: {exc}", file=sys.stderr)
            out[name] = (0, 0)
    return out


def _commit(
    lake: LakeManifest,
    files: LakeFiles,
    name: str,
    schema: pa.Schema,
    want: set[str],
    have: set[str],
) -> tuple[int, int]:
    """One Delta commit adding `want - have` and removing `have - want` (paths in the table)."""
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    add, remove = sorted(want - have), sorted(have - want)
    if not add and not remove:
        return 0, 0
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    for path in add:
        size = files.size(f"{name}/{path}")
        if size is None:  # an ok row's file always exists: uploaded before its row committed
            raise FileNotFoundError(f"{files.key(f'{name}/{path}')}: named by the manifest")
        actions.append(AddAction(path, size, {}, now, True, "{}"))
    actions += [RemoveAction(path, True, now) for path in remove]
    dt = DeltaTable(table_uri(lake, name), storage_options=lake.storage)
    dt.create_write_transaction(actions, mode="append", schema=schema)
    return len(add), len(remove)
