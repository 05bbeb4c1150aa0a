"""A large grid swept through Dagster: `sweep_job` in process vs its chunks on 1, 2 Dask workers.

    PYTHONPATH=. python bench/dask_sweep.py [--workers 0,1,2] [--runs 2] [--points 9216]
                                            [--chunk 1536]

The grid (points of the real H100 run ../shared/traces/gpu_h100/llama_base, ingested once) is
swept by `pipelines.sweep_run.run_sweeps`: one `sweep_job` run (plan, a step per chunk, commit
with the job's report) in a fresh DAGSTER_HOME; `0` in process, `N` a `LocalCluster` of N worker
processes (one thread each), warmed before each run (kernels and modules loaded; graphs not kept).
`lumos sweep`'s own path (`sweep_grid_file`, no Dagster) is the floor. Prints the first run's wall
(cold: imports, the report's chart library), the median of the later runs, configs/s and ratio to
in process, and the mean seconds inside the plan, chunk (summed) and commit steps. Not a test."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LUMOS_SHARED", ROOT.parent / "shared")) / "traces"
JOB = "llama_base"
# 8 x 4 x 4 x 2 x 3 x 4 x 3 = 9,216 points; --points keeps the leading axes whole and cuts the
# next one short
AXES = {
    "layers": [4, 8, 12, 16, 20, 24, 28, 32],
    "micro_batch": [1, 2, 4, 8],
    "dp": [1, 2, 4, 8],
    "tp": [1, 2],
    "speedup.gemm": [1, 1.5, 2],
    "seq": [512, 1024, 2048, 4096],
    "num_micro_batches": [1, 2, 4],
}


def grid_text(points: int) -> str:
    """A grid file of at most `points` points (at least the first axis whole)."""
    lines, total = [], 1
    for key, values in AXES.items():
        keep = max(1, min(len(values), points // total))
        lines.append(f"  {key}: {values[:keep]}\n")
        total *= keep
    return "grid:\n" + "".join(lines)


def _warm(warehouse: str, grid: str) -> int:
    """Open the estimator and estimate a few configurations (numba's kernels loaded, modules
    imported), then forget the estimator: each timed sweep builds its structures' graphs."""
    from pipelines.sweep_grids import forget_estimators, plan_chunks, sweep_chunk

    (first, *_) = plan_chunks(Path(warehouse), [Path(grid)], 4)
    n = len(sweep_chunk(Path(warehouse), first).predictions)
    forget_estimators()
    return n


def step_seconds(home: Path, run_id: str) -> dict[str, float]:
    """Seconds inside the run's plan, chunk and commit steps (STEP_START to STEP_SUCCESS)."""
    import dagster as dg

    kinds = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS}
    started: dict[str, float] = {}
    out = {"plan": 0.0, "chunks": 0.0, "commit": 0.0}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for entry in instance.all_logs(run_id, of_type=kinds):
            key = entry.dagster_event.step_key
            if entry.dagster_event.event_type == dg.DagsterEventType.STEP_START:
                started[key] = entry.timestamp
                continue
            op = key.split(".")[-1]  # grid_sweeps.plan_sweeps, .sweep_chunk[...], .commit_sweeps
            kind = "chunks" if op.startswith("sweep_chunk") else op.split("_")[0]
            out[kind] += entry.timestamp - started[key]
    return out


def measure(
    workers: int, warehouse: Path, grid: Path, tmp: Path, runs: int, chunk: int
) -> list[tuple[float, dict[str, float]]]:
    """(wall seconds, seconds in each kind of step) of `runs` sweep_job runs on `workers` Dask
    workers (0: in process)."""
    from pipelines.sweep_run import run_sweeps

    if workers:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    else:
        cluster = nullcontext(None)
    out = []
    with cluster as c:
        for r in range(runs):
            _warm(str(warehouse), str(grid))  # in process, the run's steps run here
            if c is not None:
                with Client(c) as client:
                    client.run(_warm, str(warehouse), str(grid))
            home = tmp / f"home_{workers}_{r}"
            home.mkdir()
            shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
            run = run_sweeps(
                dagster_home=home,
                warehouse=warehouse,
                grids=grid.parent,
                address=None if c is None else c.scheduler_address,
                points_per_chunk=chunk,
            )
            if not run.success:
                sys.exit(f"workers={workers}: the run failed: {run.error}")
            out.append((run.seconds, step_seconds(home, run.run_id)))
            print(f"  workers={workers} run {r + 1}: {run.seconds:.1f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="0,1,2", help="comma-separated; 0 = in process")
    ap.add_argument("--runs", type=int, default=2, help="timed runs per configuration")
    ap.add_argument("--points", type=int, default=9216, help="grid points (at most 9,216)")
    ap.add_argument("--chunk", type=int, default=1536, help="grid points per chunk step")
    args = ap.parse_args()
    src = SHARED / "gpu_h100" / JOB
    if not src.is_dir():
        sys.exit(f"{src}: missing (set LUMOS_SHARED to the folder holding traces/)")
    from pipelines.sweep_grids import sweep_grid_file
    from warehouse.ingest import ingest

    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="lumos_dask_sweep_") as name:
        tmp = Path(name)
        warehouse = tmp / "wh"
        ingest([str(src)], warehouse=warehouse, job=JOB)
        grid = tmp / "grids" / f"{JOB}.yaml"
        grid.parent.mkdir()
        grid.write_text(grid_text(args.points))
        _warm(str(warehouse), str(grid))
        started = time.perf_counter()
        floor = sweep_grid_file(warehouse, grid)
        floor_s = time.perf_counter() - started
        configs = len(floor.rows)
        print(f"{floor.n_points} points, {configs} configurations, chunks of {args.chunk}")
        walls = {
            w: measure(w, warehouse, grid, tmp, args.runs, args.chunk)
            for w in (int(x) for x in args.workers.split(","))
        }

    def later(rows: list) -> float:  # the runs after the first (a warm cluster), else the first
        return statistics.median(r[0] for r in rows[1:] or rows)

    base = later(walls[0]) if 0 in walls else None
    print(f"\nload {os.getloadavg()[0]:.1f} at end; 'later': median of the runs after the first")
    print(
        f"{'path':<28}{'first s':>8}{'later s':>8}{'configs/s':>10}{'vs in process':>14}"
        f"{'plan s':>7}{'chunks s':>9}{'commit s':>9}"
    )
    ratio = f"{base / floor_s:.2f}x" if base else "-"
    print(
        f"{'lumos sweep (no Dagster)':<28}{floor_s:>8.1f}{floor_s:>8.1f}"
        f"{configs / floor_s:>10.1f}{ratio:>14}"
    )
    for w, rows in walls.items():
        med = later(rows)
        steps = {k: statistics.mean(r[1][k] for r in rows) for k in ("plan", "chunks", "commit")}
        label = "sweep_job in process" if w == 0 else f"sweep_job, {w} dask worker" + "s" * (w > 1)
        ratio = f"{base / med:.2f}x" if base else "-"
        print(
            f"{label:<28}{rows[0][0]:>8.1f}{med:>8.1f}{configs / med:>10.1f}{ratio:>14}"
            f"{steps['plan']:>7.1f}{steps['chunks']:>9.1f}{steps['commit']:>9.1f}"
        )


if __name__ == "__main__":
    main()
