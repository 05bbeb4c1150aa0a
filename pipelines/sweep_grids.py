"""Run grid files of sweeps against the warehouse: the work shared by the `grid_sweeps` asset and
the main job's `sweep` step (no Dagster here).

A grid file is exactly what `lumos sweep --grid` reads (`base:`, `grid:`, `constraints:`,
`host_cores:`, `order:`; the parser refuses any other top-level key), so the job it sweeps is its
file name: `<job>.yaml` sweeps the warehouse job `<job>`; its best are ranked as `lumos sweep`
ranks them (`order:`, tokens per second by default; those that do not fit last). Each file goes through the functions `lumos sweep` calls
(`load_grid`, `Estimator.open`, `run_sweep`, `write_estimates`); every failure raises
`SweepFileError` naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRID_SUFFIXES = (".yaml", ".yml")


class SweepFileError(ValueError):
    """A grid file could not be swept; the message names the file and the problem."""


@dataclass
class GridSweep:
    """One grid file's sweep: where it came from, what it estimated, the rows it wrote."""

    path: Path
    job: str
    sweep_id: str
    n_points: int
    n_constrained: int
    n_invalid: int
    seconds: float
    keys: list[str]  # the grid's axes, in file order
    rows: Any  # pandas DataFrame: the `estimates` rows written (schema ESTIMATES)
    order: str | None = None  # the grid's `order:`; None: lumos sweep's default

    @property
    def ranking(self) -> str:
        """The order the best are ranked by (parse_order's form)."""
        from lumos.estimate.sweep import DEFAULT_ORDER

        return self.order or DEFAULT_ORDER

    def best_row(self) -> dict[str, Any]:
        """The best configuration's `estimates` row."""
        from lumos.estimate.sweep import rank_rows

        records = self.rows.to_dict("records")
        return records[rank_rows(records, self.ranking)[0]]

    def best(self, top: int = 5) -> Any:
        """The `top` best configurations as `lumos sweep` ranks them (`rank_rows`: those that fit
        first, by the grid's order, tokens per second by default): the swept keys, predicted ms,
        interval, tokens per second, MFU, memory, fits."""
        from lumos.estimate.sweep import rank_rows

        df = self.rows.iloc[rank_rows(self.rows.to_dict("records"), self.ranking)[:top]]
        keys = [k for k in self.keys if k in df.columns]
        out = df[keys].copy()
        out["predicted_ms"] = (df["predicted_ns"] / 1e6).round(3)
        out["low_ms"] = (df["interval_low_ns"] / 1e6).round(3)
        out["high_ms"] = (df["interval_high_ns"] / 1e6).round(3)
        out["tokens_per_s"] = df["tokens_per_s"].round(1)
        out["mfu"] = df["mfu"].round(4)
        out["memory_mib"] = (df["memory_bytes"] / 2**20).round(1)
        out["fits"] = df["fits"]
        return out.reset_index(drop=True)


def grid_files(folder: Path) -> list[Path]:
    """The grid files of `folder` (not recursive), sorted; raises naming the folder if none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SweepFileError(f"{folder}: grids folder does not exist or is not a directory")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in GRID_SUFFIXES)
    if not files:
        raise SweepFileError(f"{folder}: no grid files (*.yaml, *.yml) to sweep")
    return files


def job_of(path: Path) -> str:
    """The job a grid file sweeps: its file name without the suffix."""
    return Path(path).stem


def sweep_grid_file(warehouse: Path, path: Path, write: bool = True) -> GridSweep:
    """Estimate every configuration of one grid file for the job of its name, and (by default)
    write them to the `estimates` table."""
    from lumos.api import Warehouse
    from lumos.estimate.config import ConfigError
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.store import estimates_table, write_estimates
    from lumos.estimate.sweep import GridError, load_grid, run_sweep
    from lumos.estimate.template import TemplateError
    from lumos.estimate.throughput import job_device
    from lumos.estimate.transforms import TransformError

    path = Path(path)
    job = job_of(path)
    try:
        grid = load_grid(path)
        est = Estimator.open(
            warehouse, job, host_cores=grid.host_cores, host_cores_from="the grid file's host_cores"
        )
        res = run_sweep(est, grid, job)
        device = job_device(warehouse, job)
    except GridError as exc:  # already names the file
        raise SweepFileError(str(exc)) from None
    except (ConfigError, TemplateError, TransformError, LookupError) as exc:
        raise SweepFileError(f"{path}: job {job!r} (from the file name): {exc}") from None
    if not res.predictions:
        raise SweepFileError(
            f"{path}: no valid configuration to estimate ({res.n_points} grid points, "
            f"{res.n_constrained} removed by constraints, {len(res.invalid)} invalid)"
        )
    if write:
        write_estimates(
            Warehouse.open(warehouse), res.sweep_id, job, res.predictions, device=device
        )
    rows = estimates_table(res.sweep_id, job, res.predictions, device=device).to_pandas()
    return GridSweep(
        path=path,
        job=job,
        sweep_id=res.sweep_id,
        n_points=res.n_points,
        n_constrained=res.n_constrained,
        n_invalid=len(res.invalid),
        seconds=res.seconds,
        keys=list(grid.axes),
        rows=rows,
        order=grid.order,
    )
