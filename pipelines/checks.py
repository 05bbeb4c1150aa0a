"""Asset checks on each job partition of `trace_events`, read from the warehouse's manifest.

- `ranks_complete` (WARN): ranks 0..world_size-1 are all ingested. A warning, not an error: a
  partial capture (one rank of a larger job) is still worth having, and it is still ingested.
- `no_refused_files` (ERROR): no file of the job was refused.
- `has_events` (ERROR): the job holds at least one event.

None of them blocks the catalog: refused files leave no rows, so the catalog stays correct, and a
user should be able to query what did arrive. The checks read the manifest (latest row per file),
so they judge the warehouse, not just the run that preceded them.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import dagster as dg

from pipelines.assets.ingest import trace_events
from pipelines.partitions import trace_jobs
from pipelines.resources import WarehouseResource
from warehouse.layout import Layout
from warehouse.manifest import read_manifest

# Partitioned asset checks are a "preview" feature in Dagster 1.13; they are what lets each job's
# checks be evaluated and shown per partition, which is the point here.
warnings.filterwarnings("ignore", category=dg.PreviewWarning, message=".*partitions_def.*")

MAX_ERRORS_SHOWN = 20


@dataclass
class JobHealth:
    """What the manifest says about one job."""

    job: str
    ranks: list[int] = field(default_factory=list)  # ranks with an ingested ('ok') file
    world_size: int | None = None  # the largest world size the job's traces declare
    n_events: int = 0
    refused: list[str] = field(default_factory=list)  # "path: error" per refused file

    @property
    def expected_ranks(self) -> list[int]:
        """0..world_size-1, or 0..max rank when no trace declares a world size."""
        if self.world_size:
            return list(range(self.world_size))
        return list(range(max(self.ranks) + 1)) if self.ranks else []

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(set(self.expected_ranks) - set(self.ranks))


def job_health(rows: list[dict], job: str) -> JobHealth:
    """Summarise the manifest rows (latest per file) of `job`."""
    health = JobHealth(job)
    sizes = []
    for row in rows:
        if row["job"] != job:
            continue
        if row["status"] == "ok":
            if row["rank"] is not None:
                health.ranks.append(int(row["rank"]))
            health.n_events += int(row["n_events"] or 0)
            if row["world_size"]:
                sizes.append(int(row["world_size"]))
        elif row["status"] == "refused":
            error = str(row["error"] or "refused")
            health.refused.append(error if row["path"] in error else f"{row['path']}: {error}")
    health.ranks = sorted(set(health.ranks))
    health.world_size = max(sizes) if sizes else None
    return health


def _ranks_text(ranks: list[int]) -> str:
    return ",".join(map(str, ranks)) or "none"


SPECS = [
    dg.AssetCheckSpec(
        name,
        asset=trace_events,
        partitions_def=trace_jobs,
        description=description,
    )
    for name, description in [
        ("ranks_complete", "Every rank 0..world_size-1 of the job is ingested (WARN if not)."),
        ("no_refused_files", "No file of the job was refused (ERROR if one was)."),
        ("has_events", "The job holds at least one event (ERROR if not)."),
    ]
]


def _manifest_rows(lumos: WarehouseResource) -> list[dict]:
    """The latest manifest row per (job, sha256): a local warehouse's, or an S3 one's table."""
    location = lumos.location
    if isinstance(location, str):
        from warehouse.lake import LakeManifest

        return LakeManifest.at(location).read().rows
    return read_manifest(Layout(location)).rows


@dg.multi_asset_check(specs=SPECS, name="trace_events_checks")
def trace_events_checks(
    context: dg.AssetCheckExecutionContext, lumos: WarehouseResource
) -> Iterator[dg.AssetCheckResult]:
    job = context.partition_key
    health = job_health(_manifest_rows(lumos), job)
    missing = health.missing_ranks
    yield from [
        dg.AssetCheckResult(
            check_name="ranks_complete",
            passed=bool(health.ranks) and not missing,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "world_size": health.world_size or 0,
                "ranks_present": _ranks_text(health.ranks),
                "ranks_missing": _ranks_text(missing),
            },
            description=f"missing ranks {_ranks_text(missing)} of world size {health.world_size}"
            if missing
            else None,
        ),
        dg.AssetCheckResult(
            check_name="no_refused_files",
            passed=not health.refused,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={
                "refused": len(health.refused),
                "errors": dg.MetadataValue.md(
                    "\n".join(f"- `{e}`" for e in health.refused[:MAX_ERRORS_SHOWN]) or "none"
                ),
            },
            description=f"{len(health.refused)} file(s) refused" if health.refused else None,
        ),
        dg.AssetCheckResult(
            check_name="has_events",
            passed=health.n_events > 0,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"events": health.n_events},
        ),
    ]
