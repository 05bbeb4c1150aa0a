"""What a report shows, read from the warehouse's catalog views (SQL in `lumos_sql/report/`):
one job's steps, breakdowns, critical path, configuration and sweeps, or the fleet's replay
errors, estimates against measurements and ingest health. A section whose table the warehouse
does not hold yet (no replay, no sweep) is an empty frame and a note saying why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import lumos_sql

if TYPE_CHECKING:
    import pandas as pd

    from warehouse.handle import WarehouseHandle as Warehouse

MAX_SWEEPS = 4  # the newest sweeps of a job shown, one chart each
TOP_TASKS = 15


class ReportError(ValueError):
    """The report cannot be made (unknown job, empty warehouse); the message says why."""


@dataclass
class JobData:
    """Everything the job report shows, as frames (empty when the warehouse lacks the table)."""

    job: str
    steps: pd.DataFrame
    breakdown: pd.DataFrame
    waits: pd.DataFrame
    critical: pd.DataFrame
    top_kernels: pd.DataFrame
    top_cpu: pd.DataFrame
    step_list: pd.DataFrame
    sweeps: pd.DataFrame
    config: dict[str, Any] | None = None  # lumos.estimate.infer.Inference.to_dict()
    memory: dict[str, Any] | None = None  # lumos.estimate.memory.MemoryEstimate.to_dict()
    notes: list[str] = field(default_factory=list)


@dataclass
class FleetData:
    """Everything the fleet report shows."""

    errors: pd.DataFrame  # job, metric, median_error_pct, max_error_pct, n_ranks, n_steps
    estimates: pd.DataFrame  # created_at, measured_job, predicted_ms, measured_ms, error_pct
    ingest: pd.DataFrame  # status, reason, n_files, n_jobs, bytes
    runs: pd.DataFrame  # status, n_jobs, example_error
    notes: list[str] = field(default_factory=list)


def _views(wh: Warehouse) -> set[str]:
    return set(wh.sql(lumos_sql.load("report/views"))["view_name"])


def _query(
    wh: Warehouse, views: set[str], needs: tuple[str, ...], name: str, **params: object
) -> pd.DataFrame | None:
    """The rows of `lumos_sql/report/<name>.sql`, or None when a view it reads is absent."""
    if not set(needs) <= views:
        return None
    return wh.sql(lumos_sql.load(f"report/{name}"), params or None)


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame()


def gather_job(wh: Warehouse, job: str) -> JobData:
    """Read one job's report data; ReportError when the warehouse has no such job."""
    views = _views(wh)
    jobs = list(wh.sql("SELECT job FROM jobs ORDER BY job")["job"]) if "jobs" in views else []
    if job not in jobs:
        shown = ", ".join(jobs[:10]) + (", ..." if len(jobs) > 10 else "")
        raise ReportError(f"{wh.root}: no job {job!r} in this warehouse (jobs: {shown or 'none'})")
    p = {"job": job}

    def q(needs: tuple[str, ...], name: str, **extra: object) -> pd.DataFrame:
        df = _query(wh, views, needs, name, **p, **extra)
        return _empty() if df is None else df

    data = JobData(
        job=job,
        steps=q(("iteration_replay",), "job_steps"),
        breakdown=q(("breakdown",), "job_breakdown"),
        waits=q(("iterations", "collectives"), "job_waits"),
        critical=q(("critical_path_summary",), "job_critical"),
        top_kernels=q(("critical_path", "tasks"), "job_top_tasks", gpu=True, limit=TOP_TASKS),
        top_cpu=q(("critical_path", "tasks"), "job_top_tasks", gpu=False, limit=TOP_TASKS),
        step_list=q(("iteration_replay",), "job_step_list"),
        sweeps=q(("estimates", "job_configs"), "job_sweeps", max_sweeps=MAX_SWEEPS),
    )
    run = q(("replay_runs",), "job_replay_run")
    if not run.empty and run["status"].iloc[0] == "failed":
        data.notes.append(f"the latest replay of job {job!r} failed: {run['error'].iloc[0]}")
    elif data.steps.empty:
        data.notes.append(f"job {job!r} has no replay yet: run `lumos replay --job {job}`")
    elif data.breakdown.empty:
        data.notes.append(f"job {job!r} was replayed without explanations (`--no-explain`)")
    if data.sweeps.empty:
        data.notes.append(f"no sweep of job {job!r} yet: run `lumos sweep --job {job} ...`")
    data.config, data.memory, why = _configuration(wh, job)
    if why:
        data.notes.append(why)
    return data


def _configuration(wh: Warehouse, job: str) -> tuple[dict | None, dict | None, str | None]:
    """The job's inferred configuration with evidence and its memory per rank (as `lumos
    describe`), or why there is none."""
    from lumos.estimate.config import ConfigError
    from lumos.estimate.infer import JobNotFound, infer_base
    from lumos.estimate.memory import estimate_memory

    try:
        inference = infer_base(wh, job, {})
    except (JobNotFound, ConfigError, LookupError, ValueError) as exc:
        return None, None, f"configuration not inferred: {exc}"
    try:
        memory = estimate_memory(inference.config).to_dict()
    except ConfigError as exc:
        return inference.to_dict(), None, f"memory not estimated: {exc}"
    return inference.to_dict(), memory, None


def gather_fleet(wh: Warehouse) -> FleetData:
    """Read the fleet report's data: every job's replay error, estimates against measured
    runs, ingest health."""
    views = _views(wh)
    notes: list[str] = []
    errors = _query(wh, views, ("replay_quality",), "fleet_errors")
    if errors is None:
        notes.append("no job replayed yet: run `lumos replay`")
    estimates = _query(wh, views, ("estimate_vs_measured",), "fleet_estimates")
    if estimates is None or estimates.empty:
        notes.append(
            "no estimate of a configuration a real job ran (estimate_vs_measured is empty)"
        )
    ingest = _query(wh, views, ("traces",), "fleet_refused")
    runs = _query(wh, views, ("replay_runs",), "fleet_runs")
    return FleetData(
        errors=_empty() if errors is None else errors,
        estimates=_empty() if estimates is None else estimates,
        ingest=_empty() if ingest is None else ingest,
        runs=_empty() if runs is None else runs,
        notes=notes,
    )
