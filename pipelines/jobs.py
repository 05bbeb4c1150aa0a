"""`ingest_job`: ingest one job partition and rebuild the catalog, in one run; `sweep_job`: run the
sweeps of the grids folder into the `estimates` table.

Both take the definitions' executor (`pipelines/executors.py`): in process unless
`LUMOS_DASK_SCHEDULER` names a Dask scheduler. In process, `ingest_job`'s steps are small and
sequential (the catalog waits for the ingest), so a subprocess per step would only add start-up
cost; the parallelism is the process pool inside the ingest step, or, on Dask, the runs of a
backfill on different workers. On Dask, `sweep_job`'s chunks of grid points are its parallel steps.
"""

from __future__ import annotations

import dagster as dg

from pipelines.assets.catalog import warehouse_catalog
from pipelines.assets.ingest import trace_events
from pipelines.assets.replay import job_replay
from pipelines.assets.sweeps import grid_sweeps

ingest_job = dg.define_asset_job(
    name="ingest_job",
    selection=dg.AssetSelection.assets(trace_events, job_replay, warehouse_catalog),
    description="Ingest one training job's traces (a `trace_jobs` partition), check them, replay "
    "and explain its iterations, and rebuild the DuckDB catalog.",
)

sweep_job = dg.define_asset_job(
    name="sweep_job",
    selection=dg.AssetSelection.assets(grid_sweeps),
    description="Sweep every grid file `<job>.yaml` of the grids folder (`LUMOS_GRIDS`) for its "
    "job into the `estimates` table.",
)
