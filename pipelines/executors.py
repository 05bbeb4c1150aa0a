"""Which executor runs the jobs' steps: in process (the default), or a Dask cluster.

`LUMOS_DASK_SCHEDULER=tcp://host:8786` when the definitions are loaded selects Dagster's Dask
executor (`pipelines/dask_executor.py`, the `cluster` extra) pointed at that scheduler: each step
of each run is a task on a worker (`ingest_job`'s ingest, replay and catalog, so the runs of a
backfill spread over the workers; `sweep_job`'s chunks of grid points). Unset, steps run in the
run's own process, as before, and dask is not imported. docs/dagster.md: the deployment.
"""

from __future__ import annotations

import os

import dagster as dg

DASK_SCHEDULER_ENV = "LUMOS_DASK_SCHEDULER"


def dask_scheduler() -> str | None:
    """The scheduler address from `LUMOS_DASK_SCHEDULER`, or None (unset or blank)."""
    return os.environ.get(DASK_SCHEDULER_ENV, "").strip() or None


def job_executor(address: str | None = None) -> dg.ExecutorDefinition:
    """The Dask executor pointed at `address` (default: `LUMOS_DASK_SCHEDULER`), else the
    in-process executor. Raises ValueError for an address without a scheme and ImportError,
    naming the extra, if dagster-dask is missing."""
    address = address or dask_scheduler()
    if not address:
        return dg.in_process_executor
    if "://" not in address:
        raise ValueError(
            f"{DASK_SCHEDULER_ENV}={address!r}: expected a scheduler address such as "
            "tcp://host:8786"
        )
    try:
        from pipelines.dask_executor import dask_step_executor
    except ImportError as exc:
        raise ImportError(
            f"{DASK_SCHEDULER_ENV}={address} needs dagster-dask ({exc}): "
            "pip install -e '.[cluster]'"
        ) from exc
    return dask_step_executor.configured({"address": address}, name="dask_executor")
