"""`job_replay`: rebuild one job's execution graph, replay it (model and identity), explain it.

Per job partition, after its ingestion. Writes the `iterations`, `tasks`, `deps`, `kernels`,
`schedules`, `iteration_replay`, `replay_quality` and explanation tables as Parquet; the catalog
asset then gives them views. All the work is `lumos.replay.fleet.replay_one`, the
function `lumos replay` calls per job (which also records the run in `replay_runs`). Dagster
decides when a partition runs, so the asset replays even when the stored replay is current. A
partition is a job of the inbox: the later profiling windows its files made (`<job>/steps-N`,
warehouse/windows.py) are replayed in the same step. The job's HTML report (`lumos report
--job`, without Perfetto exports) is written to the resource's reports folder; its path and its
breakdown figure are the materialisation's `report` and `preview`. On an S3 warehouse the replay
commits its tables there (`lumos.replay.fleet`) and the report is written from a local mirror.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import dagster as dg

from pipelines.assets.ingest import trace_events
from pipelines.partitions import trace_jobs
from pipelines.resources import WarehouseResource


@dg.asset(
    partitions_def=trace_jobs,
    deps=[trace_events],
    group_name="replay",
    kinds={"parquet", "numba"},
    description="Replayed vs measured iterations of one job (tables iteration_replay, "
    "replay_quality, schedules, breakdown, critical_path, ...).",
)
def job_replay(context: dg.AssetExecutionContext, lumos: WarehouseResource) -> dg.MaterializeResult:
    from lumos.replay.fleet import replay_fleet
    from lumos.report.files import safe_name, write_job_report
    from pipelines.report_metadata import report_metadata
    from warehouse.handle import WarehouseHandle

    job = context.partition_key
    location = lumos.location
    # the partition's later profiling windows (`<job>/steps-N`) came with its files: replay them too
    report = replay_fleet(location, [job], force=True, with_windows=True)
    if report.failed:
        raise dg.Failure(
            "; ".join(f"job {o.job!r} could not be replayed: {o.error}" for o in report.failed)
        )
    quality = [q for o in report.outcomes for q in o.quality.to_pylist()]
    model = [q for q in quality if q["mode"] == "model" and q["median_rel_error"] is not None]
    worst = max((q["max_rel_error"] for q in model), default=None)
    target = lumos.reports_path / f"{safe_name(job)}.html"
    if isinstance(location, str):  # an S3 warehouse: the report is made in a local mirror
        from warehouse.lake_mirror import mirror

        with mirror(location, [job], with_windows=True) as local:
            files = write_job_report(
                WarehouseHandle.open(local.root),
                job,
                target,
                perfetto=False,
                preview=("breakdown", "steps"),
            )
    else:
        # the catalog gains the views of tables this replay wrote first (a warehouse's first
        # replay)
        files = write_job_report(
            WarehouseHandle.open(location),
            job,
            target,
            perfetto=False,
            preview=("breakdown", "steps"),
        )
    context.log.info(f"report written to {files.html}")
    return dg.MaterializeResult(
        metadata={
            **report_metadata(files),
            "jobs": dg.MetadataValue.text(", ".join(o.job for o in report.outcomes)),
            "ranks": len({(q["job"], q["rank"]) for q in quality}),
            "metrics": len(model),
            "tasks": sum(o.n_tasks or 0 for o in report.outcomes),
            "worst_max_rel_error_pct": None if worst is None else round(100 * worst, 3),
            "seconds": round(report.seconds, 3),
        }
    )
