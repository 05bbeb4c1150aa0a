"""`inbox_sensor`: watch the inbox, register each new job as a partition and request its ingest.

The sensor only registers partitions and requests runs; the work is in the assets. Its cursor maps
each job to a fingerprint of its files (names, sizes, modification times), so a job is requested
once, and again only when its files change (a rank added, a copy finished). Ingest is idempotent,
so a repeated request costs little.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import json

import dagster as dg

from pipelines.jobs import ingest_job
from pipelines.partitions import TRACE_JOBS, trace_jobs
from pipelines.resources import WarehouseResource
from warehouse.inbox import discover_jobs, job_fingerprint


def _load_cursor(cursor: str | None) -> dict[str, str]:
    if not cursor:
        return {}
    try:
        seen = json.loads(cursor)
    except json.JSONDecodeError:
        return {}  # an old or hand-edited cursor: start over; re-ingesting is a no-op
    return {str(k): str(v) for k, v in seen.items()} if isinstance(seen, dict) else {}


def _usable_partition_key(job: str) -> bool:
    """Dagster refuses partition keys containing `...` or control characters."""
    return bool(job) and "..." not in job and all(ch.isprintable() for ch in job)


@dg.sensor(
    job=ingest_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers each sub-directory (or loose trace file) of the inbox as a `trace_jobs` "
    "partition and requests its ingest when it is new or its files changed.",
)
def inbox_sensor(context: dg.SensorEvaluationContext, lumos: WarehouseResource) -> dg.SensorResult:
    inbox = lumos.inbox_path
    if not inbox.is_dir():
        return dg.SensorResult(
            skip_reason=f"inbox {inbox} does not exist yet", cursor=context.cursor
        )
    seen = _load_cursor(context.cursor)
    jobs = {}
    skipped: list[str] = []
    found = discover_jobs(inbox, skipped)
    for line in skipped:  # one bad entry is reported and skipped; the others go on
        context.log.warning(line)
    for job, files in found.items():
        if _usable_partition_key(job):
            jobs[job] = files
        else:
            context.log.warning(f"{inbox / job}: {job!r} cannot be a partition key; rename it")
    fingerprints = {job: job_fingerprint(files) for job, files in jobs.items()}
    new_partitions = [
        job for job in jobs if not context.instance.has_dynamic_partition(TRACE_JOBS, job)
    ]
    changed = [job for job, fp in fingerprints.items() if seen.get(job) != fp]
    if not changed and not new_partitions:
        return dg.SensorResult(
            skip_reason=f"no new or changed jobs in {inbox}", cursor=context.cursor
        )
    for job in changed:
        context.log.info(f"job {job!r}: {len(jobs[job])} file(s), requesting ingest")
    # Jobs that left the inbox stay in the cursor: their partitions and data stay in the warehouse.
    seen.update(fingerprints)
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(partition_key=job, run_key=f"{job}@{fingerprints[job]}")
            for job in changed
        ],
        dynamic_partitions_requests=[trace_jobs.build_add_request(new_partitions)]
        if new_partitions
        else [],
        cursor=json.dumps(seen, sort_keys=True),
    )
