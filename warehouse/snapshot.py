"""One snapshot per catalog connection: the files the `traces`, `events` and `trace_meta` views
read, listed once when the connection opens.

The views read `coalesce(getvariable('lumos_<table>_files'), [<glob>])`: a connection opened by
lumos sets the variables (`pin`), so every query on it sees the warehouse as it was then; a
plain `duckdb lumos.duckdb` shell sets none and reads the globs at each query. The data files
listed are those of the manifest's ok rows, read after its parts were listed: a commit renames
its data files in before it appends its row, so each of them is there, and a dead commit's
files are not listed at all.
"""

from __future__ import annotations

from pathlib import Path

from warehouse.layout import SCHEMA_FILE, Layout

__all__ = ["SNAPSHOT_TABLES", "files_expression", "pin", "variable"]

# The tables whose files a snapshot lists (the views that read files of the ingest).
SNAPSHOT_TABLES: tuple[str, ...] = ("traces", "events", "trace_meta")


def variable(table: str) -> str:
    """The DuckDB variable holding a snapshot's file list of `table`."""
    return f"lumos_{table}_files"


def files_expression(layout: Layout, table: str) -> str:
    """What a view's `read_parquet` reads: the pinned list, else the table's glob."""
    glob = layout.glob(table).replace("'", "''")
    return f"coalesce(getvariable('{variable(table)}'), ['{glob}'])"


def _listing(layout: Layout) -> dict[str, list[str]]:
    """Each table's files: the manifest's live parts, then the data files of its ok rows."""
    from warehouse.manifest import read_manifest

    parts = layout.manifest_parts()  # listed before the rows are read (module docstring)
    ok = [r for r in read_manifest(layout).rows if r["status"] == "ok"]
    found = {
        "traces": parts,
        "events": [layout.root / r["events_file"] for r in ok],
        "trace_meta": [layout.trace_meta_file(r["job"], r["rank"], r["sha256"]) for r in ok],
    }
    # each folder's `_schema.parquet`: every column, even before any file has them all
    return {
        table: sorted(str(p) for p in [*files, layout.table_dirs()[table][0] / SCHEMA_FILE])
        for table, files in found.items()
    }


def pin(con, root: str | Path) -> None:  # noqa: ANN001 (duckdb is imported lazily)
    """List the warehouse's files now and make `con`'s views read those (module docstring)."""
    layout = Layout.at(root)
    if not layout.exists():  # not a warehouse: the views' globs fail as they always did
        return
    for table, files in _listing(layout).items():
        con.execute(f"SET VARIABLE {variable(table)} = $files::VARCHAR[]", {"files": files})
