"""Run grid files of sweeps against the warehouse: the work shared by the `grid_sweeps` asset and
the main job's `sweep` step (no Dagster here).

A grid file is exactly what `lumos sweep --grid` reads (`base:`, `grid:`, `constraints:`,
`host_cores:`, `order:`; the parser refuses any other top-level key), so the job it sweeps is its
file name: `<job>.yaml` sweeps the warehouse job `<job>`; its best are ranked as `lumos sweep`
ranks them (`order:`, tokens per second by default; those that do not fit last). Each file goes through the functions `lumos sweep` calls
(`load_grid`, `Estimator.open`, `run_sweep`, `write_estimates`); every failure raises
`SweepFileError` naming the file. A large grid fans out in chunks of its points: `plan_chunks`,
`sweep_chunk` per chunk (anywhere that sees the warehouse), `commit_sweeps` writes them once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRID_SUFFIXES = (".yaml", ".yml")
# Grid points per chunk of a sweep that fans out: ~2-6 s of estimates (GPU or CPU base), well
# above a Dask step's own cost (docs/dagster.md); most grids are one chunk.
DEFAULT_CHUNK_POINTS = 5000


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


def _job_errors() -> tuple[type[Exception], ...]:
    """What opening a job's estimator or estimating with it raises for a job it cannot model."""
    from lumos.estimate.config import ConfigError
    from lumos.estimate.template import TemplateError
    from lumos.estimate.transforms import TransformError

    return (ConfigError, TemplateError, TransformError, LookupError)


# The estimators this process opened, with the warehouse's manifest stamp then: the chunks of a
# grid that run in one process (a Dask worker's, or in process) reuse one, and with it the graphs
# it built for each structure. A few at most; any ingest since changes the stamp.
_ESTIMATORS: dict[tuple[str, str, int | None], tuple[str, Any]] = {}
_KEEP_ESTIMATORS = 4


def forget_estimators() -> None:
    """Drop the estimators this process keeps (a bench times a sweep's graph building too)."""
    _ESTIMATORS.clear()


def _open(warehouse: Path, path: Path, grid: Any) -> Any:
    """The estimator of the job a grid file names, with the grid's host cores; SweepFileError
    naming the file when the warehouse cannot give it."""
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.template import manifest_stamp
    from warehouse.location import local_warehouse

    job = job_of(path)
    key = (str(warehouse), job, grid.host_cores)
    stamp = manifest_stamp(local_warehouse(warehouse))
    if key in _ESTIMATORS and _ESTIMATORS[key][0] == stamp:
        return _ESTIMATORS[key][1]
    try:
        est = Estimator.open(
            warehouse, job, host_cores=grid.host_cores, host_cores_from="the grid file's host_cores"
        )
    except _job_errors() as exc:
        raise SweepFileError(f"{path}: job {job!r} (from the file name): {exc}") from None
    _ESTIMATORS.pop(key, None)
    while len(_ESTIMATORS) >= _KEEP_ESTIMATORS:
        _ESTIMATORS.pop(next(iter(_ESTIMATORS)))
    _ESTIMATORS[key] = (stamp, est)
    return est


def _run(est: Any, grid: Any, path: Path, start: int = 0, stop: int | None = None) -> Any:
    """`run_sweep` of the grid's points `start:stop`; failures raise SweepFileError naming the file."""
    from lumos.estimate.sweep import GridError, run_sweep

    job = job_of(path)
    try:
        return run_sweep(est, grid, job, start, stop)
    except GridError as exc:  # already names the file
        raise SweepFileError(str(exc)) from None
    except _job_errors() as exc:
        raise SweepFileError(f"{path}: job {job!r} (from the file name): {exc}") from None


def _load(path: Path) -> Any:
    from lumos.estimate.sweep import GridError, load_grid

    try:
        return load_grid(path)
    except GridError as exc:  # already names the file
        raise SweepFileError(str(exc)) from None


def _no_configuration(path: Path, n_points: int, n_constrained: int, n_invalid: int) -> str:
    return (
        f"{path}: no valid configuration to estimate ({n_points} grid points, "
        f"{n_constrained} removed by constraints, {n_invalid} invalid)"
    )


def _grid_sweep(
    warehouse: Path, path: Path, grid: Any, sweep_id: str, preds: list[Any], counts: tuple
) -> GridSweep:
    """Write one file's predictions to `estimates` (the one place a sweep is committed)."""
    from lumos.api import Warehouse
    from lumos.estimate.store import write_estimates
    from lumos.estimate.throughput import job_device

    job = job_of(path)
    try:
        device = job_device(warehouse, job)
    except _job_errors() as exc:
        raise SweepFileError(f"{path}: job {job!r} (from the file name): {exc}") from None
    table = write_estimates(Warehouse.open(warehouse), sweep_id, job, preds, device=device)
    n_points, n_constrained, n_invalid, seconds = counts
    return GridSweep(
        path=path,
        job=job,
        sweep_id=sweep_id,
        n_points=n_points,
        n_constrained=n_constrained,
        n_invalid=n_invalid,
        seconds=seconds,
        keys=list(grid.axes),
        rows=table.to_pandas(),
        order=grid.order,
    )


def sweep_grid_file(warehouse: Path, path: Path) -> GridSweep:
    """Estimate every configuration of one grid file for the job of its name in this process
    (`run_sweep`, as `lumos sweep`) and write them to the `estimates` table."""
    path = Path(path)
    grid = _load(path)
    res = _run(_open(warehouse, path, grid), grid, path)
    counts = (res.n_points, res.n_constrained, len(res.invalid), res.seconds)
    if not res.predictions:
        raise SweepFileError(_no_configuration(path, *counts[:3]))
    return _grid_sweep(warehouse, path, grid, res.sweep_id, res.predictions, counts)


@dataclass(frozen=True)
class SweepChunk:
    """The grid points `start:stop` of the run's `index`-th grid file, estimated as one step."""

    index: int
    path: str
    sweep_id: str  # the file's, shared by its chunks
    start: int
    stop: int

    @property
    def key(self) -> str:
        """A name for the chunk that Dagster accepts as a mapping key."""
        return f"grid{self.index}_{self.start}"


@dataclass
class ChunkResult:
    """One chunk's predictions (in grid order) and what it left out."""

    chunk: SweepChunk
    predictions: list[Any]  # lumos.estimate.estimator.Prediction
    n_constrained: int
    invalid: list[str]
    seconds: float


def plan_chunks(
    warehouse: Path, files: Sequence[Path], points_per_chunk: int = DEFAULT_CHUNK_POINTS
) -> list[SweepChunk]:
    """Check every grid file and its job (nothing written; the estimator's cache is built here,
    once, not by every chunk at once) and cut each grid's points into chunks."""
    if points_per_chunk < 1:
        raise ValueError(f"points_per_chunk must be at least 1, got {points_per_chunk}")
    grids = [(Path(path), _load(Path(path))) for path in files]  # every file before any estimate
    chunks = []
    for index, (path, grid) in enumerate(grids):
        _open(warehouse, path, grid)
        sweep_id = uuid.uuid4().hex[:12]
        for start in range(0, grid.size, points_per_chunk):
            stop = min(start + points_per_chunk, grid.size)
            chunks.append(SweepChunk(index, str(path), sweep_id, start, stop))
    return chunks


def sweep_chunk(warehouse: Path, chunk: SweepChunk) -> ChunkResult:
    """Estimate one chunk's configurations (what `lumos sweep` does for the whole grid)."""
    path = Path(chunk.path)
    grid = _load(path)
    res = _run(_open(warehouse, path, grid), grid, path, chunk.start, chunk.stop)
    return ChunkResult(chunk, res.predictions, res.n_constrained, res.invalid, res.seconds)


def commit_sweeps(warehouse: Path, results: Sequence[ChunkResult]) -> list[GridSweep]:
    """The chunks' predictions, file by file in grid order, written to `estimates` (one
    sweep_id per file). Every file is checked first (its chunks cover its grid, it has a
    valid configuration): a failure names the file and nothing is written."""
    by_file: dict[int, list[ChunkResult]] = {}
    for r in sorted(results, key=lambda r: (r.chunk.index, r.chunk.start)):
        by_file.setdefault(r.chunk.index, []).append(r)
    files = []
    for parts in by_file.values():
        path = Path(parts[0].chunk.path)
        grid = _load(path)
        spans = [(r.chunk.start, r.chunk.stop) for r in parts]
        bounds = [0] + [stop for _, stop in spans]
        if [start for start, _ in spans] != bounds[:-1] or bounds[-1] != grid.size:
            raise SweepFileError(
                f"{path}: the chunks cover grid points {spans}, not 0..{grid.size} "
                "(a chunk is missing, or the file changed during the sweep)"
            )
        preds = [p for r in parts for p in r.predictions]
        counts = (
            grid.size,
            sum(r.n_constrained for r in parts),
            sum(len(r.invalid) for r in parts),
            sum(r.seconds for r in parts),
        )
        if not preds:
            raise SweepFileError(_no_configuration(path, *counts[:3]))
        files.append((path, grid, parts[0].chunk.sweep_id, preds, counts))
    return [_grid_sweep(warehouse, *f) for f in files]
