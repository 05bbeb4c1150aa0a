"""The views of an S3 warehouse, made by each connection (there is no catalog file to keep on
object storage): DuckDB reads the tables through Arrow datasets, with no DuckDB extension (none
can be installed at run time: docs/warehouse.md, 'Open table format'). The connection pins one
manifest version: `traces` reads the Delta table at that version
(`DeltaTable.to_pyarrow_dataset()`), `events` and `trace_meta` the data files its ok rows name
(`warehouse.lake_files`); the other catalog views (devices, threads, jobs, refused, ...) are the
local catalog's own SQL over these three.
"""

from __future__ import annotations

from importlib import metadata

import pyarrow.dataset as ds

import lumos_sql
from lumos_sql import taxonomy
from warehouse.catalog import DERIVED_AFTER, DERIVED_VIEWS, VIEWS
from warehouse.lake import LakeError, LakeManifest
from warehouse.lake_files import LakeFiles
from warehouse.lake_results import LakeResults
from warehouse.layout import trace_meta_relative
from warehouse.schema import EVENTS, TABLES, TRACE_META

__all__ = ["LAKE_VIEWS", "connect", "exists"]

# the views read from the lake's own relations (lumos_sql/lake/<view>.sql); every later one of
# `warehouse.catalog.VIEWS` is the local catalog's SQL
LAKE_VIEWS: tuple[str, ...] = ("traces", "events", "trace_meta")


def exists(uri: str) -> bool:
    """Whether `uri` holds a warehouse (its manifest table)."""
    try:
        LakeManifest.at(uri).version()
    except Exception:  # deltalake's TableNotFoundError, or no such bucket
        return False
    return True


def connect(uri: str, *, locked: bool = False):  # noqa: ANN201 (duckdb is imported lazily)
    """An in-memory DuckDB connection with the catalog's views over the S3 warehouse `uri`, as
    of its latest manifest version. `locked`: no file access, no extension, settings locked
    (what `warehouse.catalog.connect_read_only` is for a local warehouse)."""
    import duckdb
    from deltalake import DeltaTable

    lake = LakeManifest.at(uri)
    files = LakeFiles(lake.uri, lake.storage)
    try:
        version = lake.version()
        table = DeltaTable(lake.table_uri, version=version, storage_options=lake.storage)
    except Exception as exc:
        raise LakeError(f"{lake.table_uri}: cannot read the manifest table: {exc}") from exc
    ok = sorted(
        (r for r in lake.read(version).rows if r["status"] == "ok"),
        key=lambda r: (r["job"], r["rank"], r["sha256"]),
    )
    shas = [ds.field("trace_sha256") == r["sha256"] for r in ok]
    events = files.dataset([r["events_file"] for r in ok], EVENTS, shas)
    metas = [trace_meta_relative(r["job"], r["rank"], r["sha256"]) for r in ok]
    trace_meta = files.dataset(metas, TRACE_META, [ds.scalar(True)] * len(ok))

    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    try:
        taxonomy.install(con)
        con.register("lake_manifest", table.to_pyarrow_dataset())
        con.register("lake_events", events)
        con.register("lake_trace_meta", trace_meta)
        for view in VIEWS:
            name = f"lake/{view}" if view in LAKE_VIEWS else f"catalog/{view}"
            con.execute(lumos_sql.load(name))
        _result_views(con, files)
        con.execute(
            lumos_sql.render(
                "catalog/info",
                root=_literal(lake.uri),
                version=_literal(metadata.version("lumos")),
                views_sha="''",
            )
        )
        if locked:
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _result_views(con, files: LakeFiles) -> None:  # noqa: ANN001
    """The result tables present on the warehouse, each a view over an Arrow dataset of its
    latest files (in the order of their local paths, as a local warehouse lists them)."""
    latest = LakeResults(files.uri, dict(files.storage)).latest()
    by_table: dict[str, list[str]] = {}
    for relative in sorted(latest):
        by_table.setdefault(latest[relative]["table_name"], []).append(latest[relative]["key"])
    for view in DERIVED_VIEWS:
        keys = by_table.get(view)
        if not keys:
            continue
        relation = f"lake_result_{view}"
        con.register(relation, files.dataset(keys, TABLES[view], [ds.scalar(True)] * len(keys)))
        con.execute(lumos_sql.render("lake/derived", view=view, relation=relation))
        if view in DERIVED_AFTER:
            con.execute(lumos_sql.load(DERIVED_AFTER[view]))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
