"""A fleet backfill through Dagster: in process vs a Dask cluster of 1, 2, 4 workers.

    PYTHONPATH=. python bench/dask_ingest.py [--workers 0,1,2,4] [--runs 2] [--jobs N]

Each configuration runs `pipelines.backfill.backfill` over the same small shared jobs (copied to
a temporary inbox, ../shared/traces): one `ingest_job` run per job (ingest, checks, replay and
explanation, report, catalog), each run in a fresh process. `0` is the in-process executor, one
run at a time; `N` > 0 is a `distributed.LocalCluster` of N worker processes (one thread each),
N runs at once, every step a task on the cluster. The cluster is started once per configuration
and its workers import lumos before the first timed run (a long-lived cluster's state); the
runs' own processes start cold each time, as a launcher's do. Each timed run writes a fresh
warehouse and DAGSTER_HOME. Prints per configuration the median wall of the backfill, input
MB/s and jobs/min, the ratio to the in-process median, and, from the runs' event logs, the mean
seconds per job inside its steps (STEP_START to STEP_SUCCESS) and inside its run (RUN_START to
RUN_SUCCESS): the rest of a backfill's wall is the runs' process starts and waits for a slot.
Not a test; not run in CI.
"""

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
# small real jobs of one or a few ranks (../shared/traces/README.md), in this order
JOBS = {
    "nccl": ["hta/nccl_parser_config/nccl_data.json.gz"],
    "linear": ["param/linear/linear_kineto.json.gz"],
    "control": ["hta/trace_diff/control/control.json.gz"],
    "test": ["hta/trace_diff/test/test.json.gz"],
    "ns": ["hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"],
    "dlrm": [f"param/dlrm_8rank/kineto/rank-{r}.json.gz" for r in range(8)],
}
WARM_MODULES = ["pipelines.definitions", "warehouse.ingest", "lumos.replay.fleet", "lumos.report"]


def make_inbox(root: Path, jobs: list[str]) -> int:
    """Copy the jobs' files into `root/<job>/`; returns the bytes copied."""
    total = 0
    for job in jobs:
        for name in JOBS[job]:
            src = SHARED / name
            if not src.is_file():
                sys.exit(f"{src}: missing (set LUMOS_SHARED to the folder holding traces/)")
            (root / job).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, root / job / src.name)
            total += src.stat().st_size
    return total


def _import(name: str) -> str:
    import importlib

    importlib.import_module(name)
    return name


def run_times(home: Path, run_ids: list[str]) -> tuple[float, float]:
    """Seconds inside the steps and inside the runs, summed over `run_ids`, from the event log."""
    import dagster as dg

    kinds = {
        dg.DagsterEventType.STEP_START,
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.RUN_START,
        dg.DagsterEventType.RUN_SUCCESS,
    }
    steps = runs = 0.0
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for run_id in run_ids:
            started: dict[str, float] = {}
            for entry in instance.all_logs(run_id, of_type=kinds):
                event = entry.dagster_event
                key = event.step_key or "run"
                if event.event_type in (
                    dg.DagsterEventType.STEP_START,
                    dg.DagsterEventType.RUN_START,
                ):
                    started[key] = entry.timestamp
                elif key == "run":
                    runs += entry.timestamp - started[key]
                else:
                    steps += entry.timestamp - started[key]
    return steps, runs


def measure(
    workers: int, jobs: list[str], inbox: Path, tmp: Path, runs: int
) -> list[tuple[float, float, float]]:
    """(wall, in steps, in runs) seconds of `runs` backfills of `jobs` on `workers` Dask workers
    (0: in process)."""
    from pipelines.backfill import backfill

    if workers:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    else:
        cluster = nullcontext(None)
    walls = []
    with cluster as c:
        if c is not None:
            with Client(c) as client:
                for name in WARM_MODULES:
                    client.run(_import, name)
        for r in range(runs):
            home = tmp / f"home_{workers}_{r}"
            home.mkdir()
            shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
            started = time.perf_counter()
            outcomes = backfill(
                jobs,
                dagster_home=home,
                warehouse=tmp / f"wh_{workers}_{r}",
                inbox=inbox,
                address=None if c is None else c.scheduler_address,
                parallel=max(1, workers),
            )
            wall = time.perf_counter() - started
            failed = [(o.job, o.error) for o in outcomes if not o.success]
            if failed:
                sys.exit(f"workers={workers}: runs failed: {failed}")
            walls.append((wall, *run_times(home, [o.run_id for o in outcomes])))
            print(f"  workers={workers} run {r + 1}: {wall:.1f} s", flush=True)
    return walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="0,1,2,4", help="comma-separated; 0 = in process")
    ap.add_argument("--runs", type=int, default=2, help="timed backfills per configuration")
    ap.add_argument("--jobs", type=int, default=4, help=f"the first N of {list(JOBS)}")
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    jobs = list(JOBS)[: args.jobs]
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} cores, load {load:.1f} at start; jobs {jobs}; {args.runs} run(s)")
    with tempfile.TemporaryDirectory(prefix="lumos_dask_bench_") as name:
        tmp = Path(name)
        mb = make_inbox(tmp / "inbox", jobs) / 1e6
        results = {w: measure(w, jobs, tmp / "inbox", tmp, args.runs) for w in counts}
    base = statistics.median(r[0] for r in results[0]) if 0 in results else None
    print(f"\n{mb:.1f} MB of gzip'd traces, {len(jobs)} jobs, load {os.getloadavg()[0]:.1f} at end")
    print(
        f"{'executor':<16}{'median s':>10}{'MB/s':>8}{'jobs/min':>10}{'vs in-process':>15}"
        f"{'steps s/job':>13}{'run s/job':>11}"
    )
    n = len(jobs)
    for w, rows in results.items():
        med = statistics.median(r[0] for r in rows)
        steps = statistics.mean(r[1] for r in rows) / n
        in_run = statistics.mean(r[2] for r in rows) / n
        label = "in process" if w == 0 else f"dask {w} worker" + ("s" if w > 1 else "")
        ratio = f"{base / med:.2f}x" if base else "-"
        print(
            f"{label:<16}{med:>10.1f}{mb / med:>8.2f}{60 * n / med:>10.1f}{ratio:>15}"
            f"{steps:>13.2f}{in_run:>11.2f}"
        )


if __name__ == "__main__":
    main()
