"""`grid_sweeps`: run every sweep declared in the grids folder into the `estimates` table.

The folder is the resource's `grids` (`LUMOS_GRIDS`, default `./lumos_grids`); each `<job>.yaml`
in it is a `lumos sweep` grid file for the warehouse job `<job>` (the grid parser has no `job:`
key, so the job is the file name). The work is `pipelines.sweep_grids.sweep_grid_file`, i.e. the
functions `lumos sweep` calls; each file's best is ranked as `lumos sweep` ranks it (its
`order:`, tokens per second by default, those that do not fit last), and the best of all files
the same way (by tokens per second unless every file asks for one other order). A bad grid file,
or one naming a job the warehouse does not hold, fails the run with a message naming the file;
nothing of a failing run's later files is written. Each swept job's HTML report (`lumos report
--job`, without Perfetto exports) is written to the resource's reports folder; the best job's is
the materialisation's `report`, its newest sweep's figure the `preview`. On an S3 warehouse the
asset works in a local mirror of it and commits the estimates at the end (`warehouse.lake_local`).
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import time
from pathlib import Path

import dagster as dg

from pipelines.assets.catalog import warehouse_catalog
from pipelines.resources import WarehouseResource


@dg.asset(
    deps=[warehouse_catalog],
    group_name="estimate",
    kinds={"parquet", "numba"},
    description="Every grid file `<job>.yaml` of the grids folder swept for its job into the "
    "`estimates` table (one sweep_id per file).",
)
def grid_sweeps(
    context: dg.AssetExecutionContext, lumos: WarehouseResource
) -> dg.MaterializeResult:
    from warehouse.lake_local import local_warehouse_for

    # an S3 warehouse: the sweeps and reports in a local mirror, the estimates committed at the
    # end of the block (nothing of a failing run)
    with local_warehouse_for(lumos.warehouse) as local:
        return _sweep_all(context, lumos, Path(local))


def _sweep_all(
    context: dg.AssetExecutionContext, lumos: WarehouseResource, warehouse: Path
) -> dg.MaterializeResult:
    from lumos.estimate.sweep import DEFAULT_ORDER, GridError, load_grid, rank_rows
    from lumos.report.files import safe_name, write_job_report
    from pipelines.report_metadata import report_metadata
    from pipelines.sweep_grids import SweepFileError, grid_files, sweep_grid_file
    from warehouse.handle import WarehouseHandle

    started = time.perf_counter()
    try:
        files = grid_files(lumos.grids_path)
        # all files are checked before anything is written: one bad file fails the run cleanly
        for path in files:
            load_grid(path)
        sweeps = [sweep_grid_file(warehouse, path) for path in files]
    except (SweepFileError, GridError) as exc:
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
    seconds = round(time.perf_counter() - started, 3)  # the sweeps, not their reports
    wh = WarehouseHandle.open(warehouse)
    reports = {
        job: write_job_report(
            wh, job, lumos.reports_path / f"{safe_name(job)}.html", perfetto=False,
            preview=("sweep_0",),
        )
        for job in dict.fromkeys(s.job for s in sweeps)
    }  # fmt: skip
    listed = "\n".join(f"- `{job}`: `{r.html}`" for job, r in reports.items())
    return dg.MaterializeResult(
        metadata={
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
        }
    )


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
