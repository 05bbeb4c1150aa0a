"""The Dagster code location: merges the per-concern modules into one `Definitions`.

Loaded by `dagster dev` / `dg` through `[tool.dagster] module_name` in pyproject.toml, and by the
main job (`pipelines.main`) and the tests.
"""

from __future__ import annotations

import dagster as dg

from pipelines.assets.catalog import warehouse_catalog
from pipelines.assets.ingest import trace_events
from pipelines.assets.replay import job_replay
from pipelines.assets.sweeps import grid_sweeps
from pipelines.checks import trace_events_checks
from pipelines.checks_replay import replay_accuracy
from pipelines.executors import job_executor
from pipelines.jobs import ingest_job, sweep_job
from pipelines.resources import WarehouseResource
from pipelines.schedules import nightly_ingest
from pipelines.sensors import inbox_sensor

ASSETS = [trace_events, job_replay, warehouse_catalog, grid_sweeps]
ASSET_CHECKS = [trace_events_checks, replay_accuracy]


def build_definitions(
    resource: WarehouseResource | None = None, executor: dg.ExecutorDefinition | None = None
) -> dg.Definitions:
    """The definitions with a given warehouse/inbox and executor of `ingest_job` (default: both
    from the environment, `pipelines/resources.py` and `pipelines/executors.py`)."""
    return dg.Definitions(
        assets=ASSETS,
        asset_checks=ASSET_CHECKS,
        jobs=[ingest_job, sweep_job],
        sensors=[inbox_sensor],
        schedules=[nightly_ingest],
        resources={"lumos": resource or WarehouseResource.from_env()},
        executor=executor or job_executor(),
    )


defs = build_definitions()
