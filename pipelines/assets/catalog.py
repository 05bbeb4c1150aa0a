"""`warehouse_catalog`: the DuckDB file of views over the warehouse's Parquet tables.

DuckDB allows a single writer per database file across processes, so this is the only asset that
writes it and it runs in the `catalog` concurrency pool, limited to one slot (`dagster.yaml`).
It rebuilds views only, so it is cheap and reflects every job ingested so far. An S3 warehouse
has none (its connections make the views: warehouse/lake_catalog.py); the asset does nothing there.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import time

import dagster as dg

from pipelines.assets.ingest import trace_events
from pipelines.assets.replay import job_replay
from pipelines.resources import WarehouseResource

CATALOG_POOL = "catalog"


@dg.asset(
    deps=[trace_events, job_replay],
    pool=CATALOG_POOL,
    group_name="warehouse",
    kinds={"duckdb"},
    description="`<warehouse>/lumos.duckdb`: views over every job's Parquet tables, so that "
    '`duckdb lumos.duckdb -c "select ..."` works for a user.',
)
def warehouse_catalog(
    context: dg.AssetExecutionContext, lumos: WarehouseResource
) -> dg.MaterializeResult:
    from warehouse.catalog import build_catalog  # light definitions: see assets/ingest.py

    if lumos.remote:  # an S3 warehouse has no catalog file: each connection makes the views
        context.log.info(f"{lumos.location}: views are made by each connection, nothing to build")
        return dg.MaterializeResult(metadata={"path": dg.MetadataValue.text(str(lumos.location))})
    started = time.perf_counter()
    path = build_catalog(lumos.warehouse_path)
    seconds = time.perf_counter() - started
    context.log.info(f"catalog written to {path} in {seconds:.2f} s")
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(path)),
            "bytes": path.stat().st_size,
            "seconds": round(seconds, 3),
        }
    )
