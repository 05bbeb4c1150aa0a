"""`nightly_ingest`: at 02:00, ingest every registered job not yet materialised, then the catalog.

Jobs already ingested are left alone (the sensor re-requests a job whose files change), so the
nightly run costs one run per missing job plus one catalog rebuild, however large the fleet.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import dagster as dg

from pipelines.assets.catalog import warehouse_catalog
from pipelines.assets.ingest import trace_events
from pipelines.jobs import ingest_job
from pipelines.partitions import TRACE_JOBS


@dg.schedule(
    job=ingest_job,
    cron_schedule="0 2 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Ingests every registered trace job that has no materialisation yet and rebuilds "
    "the catalog.",
)
def nightly_ingest(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
    registered = context.instance.get_dynamic_partitions(TRACE_JOBS)
    done = context.instance.get_materialized_partitions(trace_events.key)
    date = context.scheduled_execution_time.strftime("%Y-%m-%d")
    requests = [
        dg.RunRequest(partition_key=job, run_key=f"nightly-{date}-{job}")
        for job in registered
        if job not in done
    ]
    # Each ingest run rebuilds the catalog too; without any, rebuild it alone.
    if not requests:
        requests.append(
            dg.RunRequest(
                run_key=f"nightly-{date}-catalog", asset_selection=[warehouse_catalog.key]
            )
        )
    return requests
