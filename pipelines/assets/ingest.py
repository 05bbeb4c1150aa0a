"""`trace_events`: ingest all the trace files of one job (one dynamic partition) into the warehouse.

The ranks of a job are batched in one step: `warehouse.ingest.ingest` runs a process pool inside
it, so a job of hundreds of ranks costs one Dagster step, not hundreds of runs. Re-materialising a
partition is cheap: files already in the warehouse (same content hash) are skipped.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import multiprocessing as mp
import os
import time
from pathlib import Path

import dagster as dg

from pipelines.partitions import trace_jobs
from pipelines.resources import WarehouseResource
from warehouse.inbox import discover_jobs

# A pool worker is a spawned interpreter that imports the readers before its first file: on small
# jobs that start-up dominates (bundled dlrm_8rank, 8 files of 50 KB: 1 worker 3.0 s, 2 workers
# 10.0 s on 2 busy cores). So one worker per this many bytes of input, up to one per core.
MIN_BYTES_PER_WORKER = 32 * 2**20

# How many refusal messages go into the materialisation metadata (the manifest has all of them).
MAX_ERRORS_SHOWN = 20


class TraceEventsConfig(dg.Config):
    """Optional explicit files for the job; empty means "the job's files in the inbox"."""

    paths: list[str] = []


def job_files(job: str, resource: WarehouseResource, config: TraceEventsConfig) -> list[Path]:
    """The files to ingest for `job`: the configured list, else the job's entry in the inbox."""
    if config.paths:
        return [Path(p).expanduser().resolve() for p in config.paths]
    skipped: list[str] = []
    jobs = discover_jobs(resource.inbox_path, skipped)
    if job not in jobs:
        why = [line for line in skipped if repr(job) in line or f"/{job}" in line]
        raise dg.Failure(
            description=f"job {job!r} has no trace files in inbox {resource.inbox_path} "
            + (f"({'; '.join(why)})" if why else f"(jobs there: {sorted(jobs) or 'none'})")
            + "; pass `paths` in the asset config instead",
        )
    return jobs[job]


def pool_size(files: list[Path]) -> int:
    """Ingest workers for these files: one per core, but not more than the input can keep busy;
    one in a daemonic process (a Dask worker), which may not start a pool: there the cluster's
    workers are the parallelism."""
    if mp.current_process().daemon:
        return 1
    total = sum(p.stat().st_size for p in files if p.is_file())
    return max(1, min(os.cpu_count() or 1, len(files), total // MIN_BYTES_PER_WORKER))


@dg.asset(
    partitions_def=trace_jobs,
    # No backfill policy: Dagster's default, one partition per run, is what we want (the checks
    # are evaluated per partition, and a job is already a batch of all its ranks).
    group_name="warehouse",
    kinds={"parquet"},
    description="Every event of every rank of one training job, as Parquet (events, traces, "
    "trace_meta tables), with a manifest row per file: ingested, unchanged (already "
    "present, same content hash) or refused with its error.",
)
def trace_events(
    context: dg.AssetExecutionContext, config: TraceEventsConfig, lumos: WarehouseResource
) -> dg.MaterializeResult:
    # Imported here so that loading the definitions (webserver, sensor ticks) stays light.
    from warehouse.ingest import ingest

    job = context.partition_key
    files = job_files(job, lumos, config)
    workers = pool_size(files)
    context.log.info(
        f"ingesting {len(files)} file(s) of job {job!r} into {lumos.location} "
        f"with {workers} worker(s)"
    )
    started = time.perf_counter()
    # The catalog is written by `warehouse_catalog` alone (one DuckDB writer, pool of size 1).
    report = ingest(files, warehouse=lumos.location, job=job, workers=workers, build_catalog=False)
    seconds = time.perf_counter() - started

    # files of a later profiling window went to their own job (`<job>/steps-N`); the counts below
    # are the partition's job, the windows are listed apart
    windows = sorted(j for j in report.jobs if j != job)
    outcomes = [f for f in report.files if f.job not in windows]
    present = [f for f in outcomes if f.status == "ok"]
    errors = [f.error or "refused" for f in report.refused]
    for message in errors:
        context.log.warning(f"refused {message}")
    metadata: dict[str, dg.RawMetadataValue] = {
        "job": job,
        "files": len(outcomes),
        "files_ingested": len(report.ingested),
        "files_unchanged": len(report.unchanged),
        "files_refused": len(report.refused),
        "ranks": dg.MetadataValue.text(
            ",".join(str(r) for r in sorted({f.rank for f in present if f.rank is not None}))
            or "none"
        ),
        "events": sum(f.n_events for f in present),
        "events_new": report.n_events,
        "bytes": sum(f.size_bytes for f in outcomes),
        "bytes_read": report.bytes_read,
        "seconds": round(seconds, 3),
        "mb_per_s": round(report.bytes_read / 1e6 / seconds, 1) if seconds > 0 else 0.0,
        "warehouse": dg.MetadataValue.text(str(lumos.location)),
    }
    if windows:
        ranks = {w: sorted({f.rank for f in report.files if f.job == w}) for w in windows}
        metadata["window_jobs"] = dg.MetadataValue.text(
            "; ".join(f"{w} (ranks {','.join(map(str, r))})" for w, r in ranks.items())
        )
    if errors:
        metadata["refused"] = dg.MetadataValue.md(
            "\n".join(f"- `{e}`" for e in errors[:MAX_ERRORS_SHOWN])
        )
    return dg.MaterializeResult(metadata=metadata)
