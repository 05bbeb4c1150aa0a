"""`job_replay`: rebuild one job's execution graph, replay it (model and identity), explain it.

Per job partition, after its ingestion. Writes the `iterations`, `tasks`, `deps`, `kernels`,
`schedules`, `iteration_replay`, `replay_quality` and explanation tables as Parquet; the catalog
asset then gives them views. All the work is `lumos.replay.run.run` and
`lumos.explain.run.explain_job`, the same functions `lumos replay` calls.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import time

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
    from lumos.explain.run import explain_job
    from lumos.replay.run import run

    job = context.partition_key
    started = time.perf_counter()
    (result,) = run(lumos.warehouse_path, [job])
    explain_job(lumos.warehouse_path, job)
    quality = result.tables["replay_quality"].to_pylist()
    model = [q for q in quality if q["mode"] == "model" and q["median_rel_error"] is not None]
    worst = max((q["max_rel_error"] for q in model), default=None)
    return dg.MaterializeResult(
        metadata={
            "ranks": len({q["rank"] for q in quality}),
            "metrics": len(model),
            "worst_max_rel_error_pct": None if worst is None else round(100 * worst, 3),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )
