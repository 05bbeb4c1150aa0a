"""The tables of an S3 warehouse (`events`, `trace_meta`, and the result tables `replay`, `explain`
and `estimate` write) as Delta tables of their own, so that Spark, Trino, Polars or delta-rs read
them as tables, without lumos and without a glob.

The manifest's Delta log (the results table's, for a result table) stays the commit point
(`warehouse.lake`, `warehouse.lake_results`): a table's log only follows it, adding the files the manifest's ok rows name (where the ingest uploaded them, no
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

__all__ = ["DATA_TABLES", "sync_result_tables", "sync_tables", "table_uri"]

# table -> (its files' schema, where an ok manifest row's file of it is, relative to the warehouse)
DATA_TABLES: Mapping[str, tuple[pa.Schema, Callable[[dict], str]]] = {
    "events": (EVENT_FILE, lambda r: events_relative(r["job"], r["rank"], r["sha256"])),
    "trace_meta": (TRACE_META, lambda r: trace_meta_relative(r["job"], r["rank"], r["sha256"])),
}


def table_uri(lake: LakeManifest, name: str) -> str:
    return f"{lake.uri}/{name}"


# where the result tables live: `<uri>/tables/<name>`, their files beside their log
RESULTS_PREFIX = "tables"


def sync_result_tables(lake: LakeManifest, latest: Callable[[], dict[str, dict]]) -> None:
    """Bring every result table's log to the results table's latest rows (`latest`: relative
    path -> row with `table_name` and `key`); a file whose schema is not its table's is left
    out, said on stderr (a table's files share one schema)."""
    from deltalake import DeltaTable

    files = LakeFiles(lake.uri, lake.storage)
    prefix = f"{RESULTS_PREFIX}/"
    current: dict[str, set[str]] = {}
    for name in _result_table_names(files):
        uri = f"{lake.uri}/{prefix}{name}"
        try:
            paths = DeltaTable(uri, storage_options=lake.storage).get_add_actions().column("path")
            current[name] = {unquote(p) for p in paths.to_pylist()}
        except Exception:  # no log yet: made below from its first file's schema
            current[name] = set()
    want: dict[str, set[str]] = {}
    for row in latest().values():
        key = row["key"]
        if key.startswith(f"{prefix}{row['table_name']}/"):
            want.setdefault(row["table_name"], set()).add(key.rsplit("/", 1)[1])
    for name, paths in want.items():
        uri, folder = f"{lake.uri}/{prefix}{name}", f"{prefix}{name}"
        try:
            schema = _table_schema(lake, files, uri, f"{folder}/{min(paths)}")
            fits = {
                p
                for p in paths - current.get(name, set())
                if _schema(files, f"{folder}/{p}") == schema
            }
            for p in sorted(paths - current.get(name, set()) - fits):
                print(f"lumos: {uri}: {p} has another schema, left out", file=sys.stderr)
            keep = fits | (paths & current.get(name, set()))
            _commit_at(lake, files, uri, folder, schema, keep, current.get(name, set()))
        except Exception as exc:  # a conflicting remove, the network: the next commit's sync
            print(f"lumos: {uri} lags the results table: {exc}", file=sys.stderr)


def _result_table_names(files: LakeFiles) -> list[str]:
    """The result tables that have a folder under `tables/`."""
    from pyarrow import fs

    selector = fs.FileSelector(files.key(RESULTS_PREFIX), allow_not_found=True)
    infos = files.filesystem.get_file_info(selector)
    return sorted(i.base_name for i in infos if i.type == fs.FileType.Directory)


def _schema(files: LakeFiles, relative: str) -> pa.Schema:
    import pyarrow.parquet as pq

    return pq.ParquetFile(files.open(relative)).schema_arrow.remove_metadata()


def _table_schema(lake: LakeManifest, files: LakeFiles, uri: str, first: str) -> pa.Schema:
    """The table's schema: its log's, else (made now) its first file's."""
    from deltalake import DeltaTable

    schema = _schema(files, first)
    DeltaTable.create(uri, schema=schema, mode="ignore", storage_options=lake.storage)
    return schema


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
    return _commit_at(lake, files, table_uri(lake, name), name, schema, want, have)


def _commit_at(
    lake: LakeManifest,
    files: LakeFiles,
    uri: str,
    folder: str,
    schema: pa.Schema,
    want: set[str],
    have: set[str],
) -> tuple[int, int]:
    """One Delta commit on the table at `uri` (its files under `folder` of the warehouse)
    adding `want - have` and removing `have - want` (paths in the table)."""
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    add, remove = sorted(want - have), sorted(have - want)
    if not add and not remove:
        return 0, 0
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    for path in add:
        size = files.size(f"{folder}/{path}")
        if size is None:  # a committed row's file always exists: uploaded before its row
            raise FileNotFoundError(f"{files.key(f'{folder}/{path}')}: named by a committed row")
        actions.append(AddAction(path, size, {}, now, True, "{}"))
    actions += [RemoveAction(path, True, now) for path in remove]
    dt = DeltaTable(uri, storage_options=lake.storage)
    dt.create_write_transaction(actions, mode="append", schema=schema)
    return len(add), len(remove)
