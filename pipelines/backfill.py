"""A fleet backfill of `ingest_job`: one run per job partition, several at once.

Each run is `dagster.execute_job` in a process of its own, as Dagster's run launcher starts a
backfill's runs, recorded in a persistent instance (`DAGSTER_HOME`) and tagged with one backfill
id. With a Dask scheduler address the runs' steps (ingest, replay, catalog) are tasks on its
workers; without one they run in the run's process. The job is rebuilt on each worker from its
arguments here (`ingest_job_for`), so the workers need no LUMOS_* variables of their own.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from pipelines.executors import job_executor
from pipelines.partitions import TRACE_JOBS
from pipelines.resources import WarehouseResource

BACKFILL_TAG = "lumos/backfill"
# Dagster's own per-event log lines would drown a caller's output; warnings and errors still show.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass(frozen=True)
class BackfillRun:
    """One partition's run: its id, success, wall seconds and, when it failed, why."""

    job: str
    run_id: str
    success: bool
    seconds: float
    error: str = ""


def ingest_job_for(warehouse: str, inbox: str, address: str | None) -> dg.JobDefinition:
    """`ingest_job` on this warehouse and inbox, its steps on the Dask scheduler at `address`
    (None: in process). Module level: Dask workers rebuild the job by calling it."""
    from pipelines.definitions import build_definitions

    resource = WarehouseResource(warehouse=warehouse, inbox=inbox)
    return build_definitions(resource, job_executor(address)).resolve_job_def("ingest_job")


def _run_partition(
    dagster_home: str, job: str, warehouse: str, inbox: str, address: str | None, backfill_id: str
) -> BackfillRun:
    recon = dg.build_reconstructable_job(
        __name__,
        ingest_job_for.__name__,
        reconstructable_kwargs={"warehouse": warehouse, "inbox": inbox, "address": address},
    )
    started = time.perf_counter()
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = dg.execute_job(
            recon,
            instance,
            run_config=QUIET_RUN_CONFIG,
            tags={"dagster/partition": job, BACKFILL_TAG: backfill_id},
        )
        return BackfillRun(
            job, result.run_id, result.success, time.perf_counter() - started, run_errors(result)
        )


def run_errors(result: dg.ExecuteJobResult) -> str:
    """Why a run failed: each failed step's innermost message, else the run failure's."""
    errors = []
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error = event.step_failure_data.error
            while error.cause is not None:  # Dagster's wrapper first, our exception last
                error = error.cause
            errors.append(f"{event.step_key}: {error.message.strip()}")
        elif event.is_run_failure and not errors and event.event_specific_data:
            failure = event.event_specific_data.error
            errors.append(failure.message.strip() if failure else event.message or "")
    return "; ".join(errors)


def backfill(
    jobs: Sequence[str],
    *,
    dagster_home: Path,
    warehouse: Path,
    inbox: Path,
    address: str | None = None,
    parallel: int = 1,
) -> list[BackfillRun]:
    """Run `ingest_job` for each of `jobs` (registered as partitions first), `parallel` runs at
    once, in the instance at `dagster_home` (persistent: the Dask executor requires it); the
    outcomes in the order of `jobs`. A failed run is reported, the others go on."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    if not (dagster_home / "dagster.yaml").is_file():
        raise FileNotFoundError(f"{dagster_home}: no dagster.yaml (copy the project's file there)")
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.add_dynamic_partitions(TRACE_JOBS, list(jobs))
    backfill_id = uuid.uuid4().hex[:8]
    args = (str(warehouse), str(inbox), address, backfill_id)
    # spawn: a fresh interpreter per run process, as the run launcher's; no forked Arrow threads
    with ProcessPoolExecutor(parallel, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_run_partition, str(dagster_home), job, *args) for job in jobs]
        return [f.result() for f in futures]
