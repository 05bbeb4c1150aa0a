"""One `sweep_job` run recorded in a persistent Dagster instance, without a daemon.

The grids folder's sweeps (`grid_sweeps`) cut into chunks of grid points; with a Dask scheduler
address each chunk is a step on a worker, without one every step runs in this process. The job
is rebuilt on each worker from the arguments here (`sweep_job_for`), so the workers need no
LUMOS_* variables of their own; they need the warehouse, the grids folder and `DAGSTER_HOME` at
the same paths (docs/dagster.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.backfill import QUIET_RUN_CONFIG, run_errors
from pipelines.executors import job_executor
from pipelines.resources import WarehouseResource
from pipelines.sweep_grids import DEFAULT_CHUNK_POINTS


@dataclass(frozen=True)
class SweepRun:
    """The run's id, success, wall seconds and, when it failed, why."""

    run_id: str
    success: bool
    seconds: float
    error: str = ""


def sweep_job_for(warehouse: str, grids: str, address: str | None) -> dg.JobDefinition:
    """`sweep_job` on this warehouse and grids folder, its steps on the Dask scheduler at
    `address` (None: in process). Module level: Dask workers rebuild the job by calling it."""
    from pipelines.definitions import build_definitions

    resource = WarehouseResource(warehouse=warehouse, grids=grids)
    return build_definitions(resource, job_executor(address)).resolve_job_def("sweep_job")


def chunking_config(points_per_chunk: int) -> dict[str, Any]:
    """The run config giving `grid_sweeps` chunks of `points_per_chunk` grid points."""
    plan = {"plan_sweeps": {"config": {"points_per_chunk": points_per_chunk}}}
    return {"ops": {"grid_sweeps": {"ops": plan}}}


def run_sweeps(
    *,
    dagster_home: Path,
    warehouse: Path,
    grids: Path,
    address: str | None = None,
    points_per_chunk: int = DEFAULT_CHUNK_POINTS,
) -> SweepRun:
    """Run `sweep_job` once in the instance at `dagster_home` (persistent: the Dask executor
    requires it; chunks pass between steps through its storage folder)."""
    if not (dagster_home / "dagster.yaml").is_file():
        raise FileNotFoundError(f"{dagster_home}: no dagster.yaml (copy the project's file there)")
    recon = dg.build_reconstructable_job(
        __name__,
        sweep_job_for.__name__,
        reconstructable_kwargs={
            "warehouse": str(warehouse),
            "grids": str(grids),
            "address": address,
        },
    )
    started = time.perf_counter()
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        result = dg.execute_job(
            recon, instance, run_config={**QUIET_RUN_CONFIG, **chunking_config(points_per_chunk)}
        )
        return SweepRun(
            result.run_id, result.success, time.perf_counter() - started, run_errors(result)
        )
