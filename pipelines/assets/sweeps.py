"""`grid_sweeps`: run every sweep declared in the grids folder into the `estimates` table.

Each `<job>.yaml` of the resource's `grids` folder (`LUMOS_GRIDS`) is a `lumos sweep` grid file
for the warehouse job `<job>` (the parser has no `job:` key). A graph-backed asset: `plan_sweeps`
checks every file and its job and cuts each grid into chunks of points (one dynamic output per
chunk), `sweep_chunk` estimates a chunk (a step each: on a Dask worker when the job's executor is
Dask), `commit_sweeps` writes each file's rows once, ranks them as `lumos sweep` does, writes the
swept jobs' HTML reports and the metadata. A bad file, or one naming a job the warehouse does not
hold, fails the run naming the file, with nothing written. Why chunks are dynamic outputs, not
partitions: docs/dagster.md. On an S3 warehouse each step works in a local mirror of it
(`warehouse.lake_local`); `commit_sweeps` commits the estimates when it ends.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from pipelines.assets.catalog import warehouse_catalog
from pipelines.resources import WarehouseResource
from pipelines.sweep_grids import DEFAULT_CHUNK_POINTS, ChunkResult, SweepChunk


class SweepChunking(dg.Config):
    """How many grid points one `sweep_chunk` step estimates."""

    points_per_chunk: int = DEFAULT_CHUNK_POINTS


@dg.op(ins={"catalog": dg.In(dg.Nothing)}, out=dg.DynamicOut(SweepChunk))
def plan_sweeps(
    config: SweepChunking, lumos: WarehouseResource
) -> Iterator[dg.DynamicOutput[SweepChunk]]:
    """Every grid file checked (its job's estimator cache built once), its points in chunks."""
    from pipelines.sweep_grids import SweepFileError, grid_files, plan_chunks
    from warehouse.lake_local import local_warehouse_for

    try:
        with local_warehouse_for(lumos.warehouse) as local:
            chunks = plan_chunks(Path(local), grid_files(lumos.grids_path), config.points_per_chunk)
    except (SweepFileError, ValueError) as exc:
        raise dg.Failure(description=str(exc)) from None
    for chunk in chunks:
        yield dg.DynamicOutput(chunk, mapping_key=chunk.key)


@dg.op
def sweep_chunk(chunk: SweepChunk, lumos: WarehouseResource) -> ChunkResult:
    """One chunk's configurations estimated (the numba sweep in bulk)."""
    from pipelines.sweep_grids import SweepFileError
    from pipelines.sweep_grids import sweep_chunk as estimate_chunk
    from warehouse.lake_local import local_warehouse_for

    try:
        with local_warehouse_for(lumos.warehouse) as local:
            return estimate_chunk(Path(local), chunk)
    except SweepFileError as exc:
        raise dg.Failure(description=str(exc)) from None


@dg.op(out=dg.Out(dg.Nothing))
def commit_sweeps(
    context: dg.OpExecutionContext, results: list[ChunkResult], lumos: WarehouseResource
) -> None:
    """The chunks' rows written to `estimates` (one sweep_id per file), the best of each file
    and of all as `lumos sweep` ranks them, the swept jobs' reports, the asset's metadata."""
    from warehouse.lake_local import local_warehouse_for

    # an S3 warehouse: written in its local mirror, committed when the block ends (nothing of a
    # failing run)
    with local_warehouse_for(lumos.warehouse) as local:
        _commit_all(context, results, lumos, Path(local))


def _commit_all(
    context: dg.OpExecutionContext, results: list[ChunkResult], lumos: WarehouseResource,
    warehouse: Path,
) -> None:  # fmt: skip
    from lumos.estimate.sweep import DEFAULT_ORDER, rank_rows
    from lumos.report.files import safe_name, write_job_report
    from pipelines.report_metadata import report_metadata
    from pipelines.sweep_grids import SweepFileError
    from pipelines.sweep_grids import commit_sweeps as commit
    from warehouse.handle import WarehouseHandle

    try:
        sweeps = commit(warehouse, results)
    except SweepFileError as exc:
        raise dg.Failure(description=str(exc)) from None

    orders = {s.ranking for s in sweeps}
    order = orders.pop() if len(orders) == 1 else DEFAULT_ORDER
    top = sweeps[rank_rows([s.best_row() for s in sweeps], order)[0]]
    best = (top, top.best(1).to_dict("records")[0])
    summary = "\n".join(
        f"- `{s.path.name}` → job `{s.job}`, sweep `{s.sweep_id}`: {len(s.rows)} configs "
        f"({s.n_points} points, {s.n_constrained} constrained, {s.n_invalid} invalid) in "
        f"{s.seconds:.2f} s; best {_describe(s.best(1).to_dict('records')[0], s.keys)}"
        for s in sweeps
    )
    for s in sweeps:
        context.log.info(f"{s.path}: {len(s.rows)} configurations, sweep_id {s.sweep_id}")
    seconds = round(sum(s.seconds for s in sweeps), 3)  # the estimates, not their reports
    wh = WarehouseHandle.open(warehouse)
    reports = {
        job: write_job_report(
            wh, job, lumos.reports_path / f"{safe_name(job)}.html", perfetto=False,
            preview=("sweep_0",),
        )
        for job in dict.fromkeys(s.job for s in sweeps)
    }  # fmt: skip
    listed = "\n".join(f"- `{job}`: `{r.html}`" for job, r in reports.items())
    context.add_output_metadata(
        {
            **report_metadata(reports[best[0].job]),
            "reports": dg.MetadataValue.md(listed),
            "grids": len(sweeps),
            "configs": sum(len(s.rows) for s in sweeps),
            "seconds": seconds,
            "best_job": best[0].job,
            "best_predicted_ms": best[1]["predicted_ms"],
            "best_tokens_per_s": best[1]["tokens_per_s"],
            **({"best_mfu": best[1]["mfu"]} if best[1]["mfu"] == best[1]["mfu"] else {}),
            "order": order,
            "best": _describe(best[1], best[0].keys),
            "sweep_ids": ",".join(s.sweep_id for s in sweeps),
            "sweeps": dg.MetadataValue.md(summary),
            "chunks": len(results),
        }
    )


@dg.graph_asset(
    name="grid_sweeps",
    ins={"warehouse_catalog": dg.AssetIn(key=warehouse_catalog.key, dagster_type=dg.Nothing)},
    group_name="estimate",
    kinds={"parquet", "numba"},
    description="Every grid file `<job>.yaml` of the grids folder swept for its job into the "
    "`estimates` table (one sweep_id per file), in chunks of grid points.",
)
def grid_sweeps(warehouse_catalog):  # noqa: ANN001, ANN201 (a graph's composition function)
    return commit_sweeps(plan_sweeps(warehouse_catalog).map(sweep_chunk).collect())


def _describe(row: dict, keys: list[str]) -> str:
    fits = row["fits"]
    fits = "fits unknown" if fits is None or fits != fits else ("fits" if fits else "does NOT fit")
    cfg = " ".join(f"{k}={row[k]}" for k in keys if k in row)
    mfu = row["mfu"]
    mfu = "MFU unknown" if mfu is None or mfu != mfu else f"MFU {mfu:.1%}"
    return (
        f"{row['predicted_ms']:.3f} ms [{row['low_ms']:.3f}, {row['high_ms']:.3f}], "
        f"{row['tokens_per_s']:,.0f} tokens/s, {mfu}, {row['memory_mib']} MiB {fits} ({cfg})"
    )
