"""The DuckDB catalog: a small `.duckdb` file of views over the warehouse's Parquet.

The views read globs, so files committed after the catalog was built show up without a rebuild;
the manifest decides what is visible (see `lumos_sql/catalog/events.sql`). The file is built in
a temporary file and renamed into place, so readers never see a half-built catalog and a writer
never needs DuckDB's single-writer lock on the live file. Paths in the views are absolute, so
`duckdb <wh>/lumos.duckdb` works from any directory; a moved warehouse needs a rebuild, which
`Warehouse.open` and `lumos status` do by themselves (see `catalog_is_current`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import lumos_sql
from lumos_sql import taxonomy
from warehouse import snapshot
from warehouse.layout import SCHEMA_FILE, Layout, keep_schema_file, sweep_stale_temps, temp_path
from warehouse.manifest import commit_lock
from warehouse.schema import TABLES
from warehouse.snapshot import SNAPSHOT_TABLES

__all__ = [
    "DERIVED_VIEWS",
    "VIEWS",
    "build_catalog",
    "catalog_is_current",
    "QueryRefused",
    "check_read_only",
    "connect",
    "connect_read_only",
    "job_events_view",
    "no_trace_message",
    "present_derived_views",
    "threads_for",
    "threads_for_rows",
]

# Creation order matters: later views read earlier ones.
VIEWS: tuple[str, ...] = (
    "traces",
    "events",
    "trace_meta",
    "devices",
    "threads",
    "distributed_info",
    "jobs",
    "refused",
)

# Tables derived by later stages, each written as `<wh>/<name>/**/*.parquet`. A view is created
# once the folder holds a Parquet file: `lumos_sql/<name>/view.sql` (slot `{{<name>_glob}}`) when
# the table has its own view, else the generic `lumos_sql/catalog/derived.sql`.
DERIVED_VIEWS: tuple[str, ...] = (
    "collectives",
    "iterations",
    "tasks",
    "deps",
    "kernels",
    "schedules",
    "iteration_replay",
    "replay_quality",
    "replay_runs",
    "breakdown",
    "sm_utilization",
    "critical_path",
    "critical_path_summary",
    "opbench",
    "estimates",
    "job_configs",  # with it, estimate_vs_measured (DERIVED_AFTER; written with estimates)
)
# the views made from a derived table's view and others, once it is there (local and S3 alike)
DERIVED_AFTER: dict[str, str] = {"job_configs": "job_configs/vs_measured"}


def present_derived_views(layout: Layout) -> list[str]:
    """The derived tables that have at least one Parquet file in this warehouse."""
    out = []
    for name in DERIVED_VIEWS:
        folder = layout.root / name
        if folder.is_dir() and next(folder.rglob("*.parquet"), None) is not None:
            out.append(name)
    return out


def _derived_view_sql(name: str, glob: str) -> str:
    if f"{name}/view" in lumos_sql.names():
        return lumos_sql.render(f"{name}/view", **{f"{name}_glob": glob})
    return lumos_sql.render("catalog/derived", view=name, glob=glob)


@cache
def views_fingerprint() -> str:
    """A hash of the SQL every view is built from: a catalog built by another version of these
    files (a view reading the Parquet differently) is rebuilt, not trusted."""
    import hashlib

    digest = hashlib.sha256()
    names = [f"catalog/{v}" for v in VIEWS] + ["catalog/derived", "catalog/info"]
    names += [f"{d}/view" for d in DERIVED_VIEWS if f"{d}/view" in lumos_sql.names()]
    names += list(DERIVED_AFTER.values())
    for name in names:
        digest.update(lumos_sql.load(name).encode())
    digest.update(taxonomy.macros_sql(temp=False).encode())
    # and the tables' schemas: a column added to one rebuilds the catalog, which writes the
    # table's new `_schema.parquet` (`keep_schema_file`)
    for name in sorted(TABLES):
        digest.update(f"{name}\0{TABLES[name]}\0".encode())
    return digest.hexdigest()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def build_catalog(warehouse: str | os.PathLike[str]) -> Path:
    """(Re)write `<wh>/lumos.duckdb` with the views; returns its path."""
    from importlib.metadata import version

    import duckdb

    layout = Layout.at(warehouse)
    with commit_lock(layout):  # ingest's cleanup of temporary files runs under this lock
        layout.ensure()
    # a killed build's or replay's temporary files, here and beside the derived tables' files
    sweep_stale_temps([layout.root, *layout.root.glob("*/job=*")])
    tmp = temp_path(layout.catalog_path)
    try:
        con = duckdb.connect(str(tmp))
        try:
            con.execute(taxonomy.macros_sql(temp=False))  # is_comm(name), kind_collective(), ...
            slots = {f"{t}_files": snapshot.files_expression(layout, t) for t in SNAPSHOT_TABLES}
            for view in VIEWS:
                con.execute(lumos_sql.render(f"catalog/{view}", **slots))
            for directory, schema in layout.table_dirs().values():
                keep_schema_file(directory, schema)
            derived = present_derived_views(layout)
            for name in derived:
                if name in TABLES:
                    keep_schema_file(layout.root / name, TABLES[name])
                glob = _literal(str(layout.root / name / "**" / "*.parquet"))
                con.execute(_derived_view_sql(name, glob))
                if name in DERIVED_AFTER:
                    con.execute(lumos_sql.load(DERIVED_AFTER[name]))
            con.execute(
                lumos_sql.render(
                    "catalog/info",
                    root=_literal(str(layout.root)),
                    version=_literal(version("lumos")),
                    views_sha=_literal(views_fingerprint()),
                )
            )
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp, layout.catalog_path)
    finally:
        tmp.unlink(missing_ok=True)
        Path(str(tmp) + ".wal").unlink(missing_ok=True)
    _write_stamp(layout, [*VIEWS, *derived])
    return layout.catalog_path


# What the catalog file was built with, beside it: opening the catalog with DuckDB to ask costs
# ~25 ms, paid by every ingest, `lumos sql` and Warehouse.open (10 % of a warm 54 MB ingest). The
# stamp names the catalog's size and mtime; a catalog written since (another build, an edit) no
# longer matches it, and the check falls back to asking DuckDB.
def _stamp_path(layout: Layout) -> Path:
    return layout.root / f".{layout.catalog_path.name}.stamp"


def _write_stamp(layout: Layout, views: list[str], st: os.stat_result | None = None) -> None:
    """Stamp the catalog file; `st`: its stat from before it was read, when the views were read
    from it (a catalog replaced meanwhile then does not match the stamp)."""
    try:
        st = st or layout.catalog_path.stat()
        stamp = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "root": str(layout.root),
            "views_sha": views_fingerprint(),
            "views": sorted(views),
        }
        tmp = layout.root / f".{layout.catalog_path.name}.stamp.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(stamp), encoding="utf-8")
        os.replace(tmp, _stamp_path(layout))
    except OSError:
        pass  # a read-only warehouse: the check asks DuckDB instead


def _stamped_views(layout: Layout) -> set[str] | None:
    """The views of the catalog as its stamp records them, or None when there is no stamp that
    matches the catalog file as it is now and this code's view SQL."""
    try:
        stamp = json.loads(_stamp_path(layout).read_text(encoding="utf-8"))
        st = layout.catalog_path.stat()
        fresh = (
            stamp["size"] == st.st_size
            and stamp["mtime_ns"] == st.st_mtime_ns
            and stamp["root"] == str(layout.root)
            and stamp["views_sha"] == views_fingerprint()
        )
        return set(stamp["views"]) if fresh else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def connect(
    catalog: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = True,
    config: dict[str, object] | None = None,
):  # noqa: ANN201 (duckdb is imported lazily)
    """A DuckDB connection to `catalog`, or in memory (None), with the operator taxonomy's macros
    (`lumos_sql.taxonomy`: `is_comm(name)`, `op_class(name)`, `kind_collective()`, ...): the
    catalog file holds them (`build_catalog`); an in-memory connection gets them here. A catalog
    connection reads one snapshot of the warehouse, taken now (`warehouse.snapshot`)."""
    import duckdb

    if catalog is None:
        return taxonomy.install(duckdb.connect(config=config or {}))
    con = duckdb.connect(str(catalog), read_only=read_only, config=config or {})
    try:
        snapshot.pin(con, Path(catalog).parent)
    except BaseException:
        con.close()
        raise
    return con


class QueryRefused(ValueError):
    """A query `lumos sql` does not run (says which statement and why)."""


# the statements a read-only query may be: a query, or EXPLAIN of one (not EXPLAIN ANALYZE,
# which runs the statement it explains)
_READ_ONLY_TYPES = ("SELECT", "EXPLAIN")


def check_read_only(query: str) -> None:
    """Raise `QueryRefused` unless `query` is one SELECT (DESCRIBE, SHOW, SUMMARIZE, VALUES and
    FROM-first queries are SELECTs) or EXPLAIN of one."""
    import re

    import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryRefused(str(exc)) from exc
    if len(statements) != 1:
        raise QueryRefused(
            f"one statement per query, got {len(statements)}: run them one at a time"
        )
    kind = statements[0].type.name
    if kind == "EXPLAIN" and re.match(r"\s*explain\s+analy[sz]e\b", query, re.IGNORECASE):
        raise QueryRefused("EXPLAIN ANALYZE runs the statement it explains: --unsafe runs it")
    if kind not in _READ_ONLY_TYPES:
        raise QueryRefused(
            f"{kind} statements are not run: lumos sql reads the warehouse and never writes it "
            "(queries, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN); --unsafe runs any statement"
        )


def connect_read_only(warehouse: str | os.PathLike[str]):  # noqa: ANN201
    """A catalog connection that can read the warehouse and nothing else: no file outside its
    directory, no extension installed or loaded, no ATTACH, and settings locked so that a query
    cannot lift these (DuckDB's `allowed_directories` and `enable_external_access`). It reads
    one snapshot of the warehouse, as `connect` does."""
    import duckdb

    layout = Layout.at(warehouse)
    con = duckdb.connect(
        str(layout.catalog_path),
        read_only=True,
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False},
    )
    try:
        snapshot.pin(con, layout.root)
        con.execute("SET allowed_directories = [$root]", {"root": str(layout.root) + os.sep})
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def job_events_view(con, job: str, ranks: Collection[int] | None = None) -> None:  # noqa: ANN001
    """Define the temp view `job_events` on a catalog connection: the events of `job` only (of
    its `ranks` only, when given), read from its own files (`lumos_sql/catalog/job_events.sql`).
    On a warehouse of 1,000 files it reads a job in 17 ms where `events WHERE job = ...` takes
    180 ms, and the gap grows with the fleet."""
    root = Path(con.execute("SELECT warehouse_root FROM lumos_catalog").fetchone()[0])
    layout = Layout(root)
    files = [
        layout.events_file(job, rank, sha)
        for rank, sha in con.execute(lumos_sql.load("catalog/job_files"), {"job": job}).fetchall()
        if ranks is None or rank in ranks
    ]
    files.append(layout.events_dir / SCHEMA_FILE)
    listed = "[" + ", ".join(_literal(str(f)) for f in files) + "]"
    con.execute(lumos_sql.render("catalog/job_events", files=listed))


def no_trace_message(con, job: str, known: list[str]) -> str:  # noqa: ANN001
    """Why `job` has no readable trace on the catalog `con`: every file of it was refused (the
    first one's error, which names the file), or the warehouse never saw it (naming the jobs it
    knows)."""
    refused = con.execute(lumos_sql.load("status/job_refusals"), {"job": job}).fetchall()
    if refused:
        more = (
            f" (and {len(refused) - 1} more: `lumos status` lists them)" if len(refused) > 1 else ""
        )
        return f"job {job!r} has no ingested trace: its files were refused: {refused[0][1]}{more}"
    more = f" and {len(known) - 20} more: `lumos status` lists them" if len(known) > 20 else ""
    return f"job {job!r} is not in the warehouse (known: {', '.join(known[:20]) or 'none'}{more})"


def catalog_is_current(warehouse: str | os.PathLike[str]) -> bool:
    """True when the catalog exists, its views point at this warehouse's current location and
    were built from the SQL files this code has (`views_fingerprint`)."""
    layout = Layout.at(warehouse)
    if not layout.catalog_path.exists():
        return False
    stamped = _stamped_views(layout)
    if stamped is not None:
        return set(VIEWS) | set(present_derived_views(layout)) <= stamped
    # imported only here: with a current stamp, an ingest never needs DuckDB (0.07 s of CPU)
    import duckdb

    try:
        st = layout.catalog_path.stat()
        con = duckdb.connect(str(layout.catalog_path), read_only=True)
    except (OSError, duckdb.Error):
        return False
    try:
        root, views_sha = con.execute(
            "SELECT warehouse_root, views_sha FROM lumos_catalog"
        ).fetchone()
        names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    except duckdb.Error:
        return False
    finally:
        con.close()
    # A derived table written since the catalog was built needs its view added.
    if root != str(layout.root) or views_sha != views_fingerprint():
        return False
    _write_stamp(layout, sorted(names), st)  # the next check need not open the catalog
    return set(VIEWS) | set(present_derived_views(layout)) <= names


# DuckDB splits a scan, a sort or a window's input by row groups of this many rows; a thread
# beyond the row groups a job's graph events fill has nothing to take and only adds
# synchronisation (df_index_resolver, 123k graph events: 2 threads cost 25 % more CPU than 1 for
# the same wall time; at 2x the events 2 threads save 13 % of the wall, at 33x they halve it).
DUCKDB_ROW_GROUP = 122_880


def threads_for_rows(n_rows: int, most: int | None = None) -> int:
    """DuckDB threads worth giving a query over `n_rows` rows: one per row group they fill, at
    least 1, at most `most` (default: the machine's cores)."""
    most = most or os.cpu_count() or 1
    return max(1, min(most, n_rows // DUCKDB_ROW_GROUP))


@contextmanager
def threads_for(con, n_rows: int) -> Iterator[int]:  # noqa: ANN001
    """Run the block with DuckDB's threads cut to the row groups `n_rows` fill (never more than
    the connection had); the connection's own setting is restored afterwards."""
    had = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
    want = threads_for_rows(n_rows, had)
    if want != had:
        con.execute(f"SET threads = {want}")
    try:
        yield want
    finally:
        if want != had:
            con.execute(f"SET threads = {had}")
