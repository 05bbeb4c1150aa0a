"""The main job (README command 1): the bundled example traces through the real Dagster pipeline.

`STEPS`, in order: `instance` (a persistent local Dagster instance in `./.dagster_home`),
`register` (each job of `examples/traces/` as a `trace_jobs` partition), `ingest` (one
`ingest_job` run per job: ingest, check, replay, explain, rebuild the catalog), `show` (what the
warehouse holds), `replay` (replayed vs measured iteration times) and `sweep` (each bundled grid
file into the `estimates` table, with the best configurations). Re-running is cheap: every file
is already in the warehouse, so the ingest steps skip them. Details: docs/dagster.md,
"Module notes".
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent.parent
DAGSTER_YAML = ROOT / "dagster.yaml"
EXAMPLES = ROOT / "examples" / "traces"
GRIDS = ROOT / "examples" / "grids"
TOP = 5  # configurations printed per sweep

# Dagster's own per-event log lines would drown the summary; warnings and errors still show.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class JobOutcome:
    """One `ingest_job` run: its id, success, materialisation metadata and check results."""

    job: str
    run_id: str
    success: bool
    metadata: dict[str, object]
    checks: dict[str, tuple[bool, str]]  # check name -> (passed, severity)
    check_notes: dict[str, str] = field(default_factory=dict)  # failing check -> why
    errors: list[str] = field(default_factory=list)  # step failures, when the run failed


@dataclass
class MainContext:
    """Paths and state shared by the steps."""

    dagster_home: Path
    warehouse: Path
    inbox: Path
    out: TextIO
    grids: Path = GRIDS
    instance: object = None  # dagster.DagsterInstance, imported lazily
    jobs: dict[str, list[Path]] = field(default_factory=dict)
    outcomes: list[JobOutcome] = field(default_factory=list)
    tables: dict[str, object] = field(default_factory=dict)  # name -> pandas DataFrame
    timings: dict[str, float] = field(default_factory=dict)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)


def step_instance(ctx: MainContext) -> None:
    """A persistent local instance in DAGSTER_HOME, configured by the project's `dagster.yaml`."""
    import dagster as dg

    ctx.dagster_home.mkdir(parents=True, exist_ok=True)
    target = ctx.dagster_home / "dagster.yaml"
    # The project's file is the source of truth: edit that one, not the copy.
    if not target.exists() or target.read_bytes() != DAGSTER_YAML.read_bytes():
        shutil.copyfile(DAGSTER_YAML, target)
    ctx.instance = dg.DagsterInstance.from_config(str(ctx.dagster_home))
    ctx.say(f"dagster instance : {ctx.dagster_home}")
    ctx.say(f"warehouse        : {ctx.warehouse}")
    ctx.say(f"inbox            : {ctx.inbox}")


def step_register(ctx: MainContext) -> None:
    """Each job of the inbox becomes a `trace_jobs` partition (idempotent)."""
    from pipelines.partitions import TRACE_JOBS
    from warehouse.inbox import discover_jobs

    skipped: list[str] = []
    ctx.jobs = discover_jobs(ctx.inbox, skipped)
    for line in skipped:
        ctx.say(f"skipped: {line}")
    if not ctx.jobs:
        raise SystemExit(f"{ctx.inbox}: no trace files found: nothing to ingest")
    ctx.instance.add_dynamic_partitions(TRACE_JOBS, list(ctx.jobs))
    for job, files in ctx.jobs.items():
        ctx.say(f"job {job!r}: {len(files)} file(s)")


def step_ingest(ctx: MainContext) -> None:
    """One `ingest_job` run per job, in process, recorded in the instance."""
    from pipelines.definitions import build_definitions
    from pipelines.resources import WarehouseResource

    defs = build_definitions(WarehouseResource(warehouse=str(ctx.warehouse), inbox=str(ctx.inbox)))
    job_def = defs.resolve_job_def("ingest_job")
    for job in ctx.jobs:
        result = job_def.execute_in_process(
            instance=ctx.instance,
            partition_key=job,
            run_config=QUIET_RUN_CONFIG,
            raise_on_error=False,
        )
        metadata: dict[str, object] = {}
        for mat in result.asset_materializations_for_node("trace_events"):
            metadata = {k: v.value for k, v in mat.metadata.items()}
        outcome = JobOutcome(job, result.run_id, result.success, metadata, {})
        for event in result.all_events:
            if event.is_step_failure and event.step_failure_data.error is not None:
                error = event.step_failure_data.error
                while error.cause is not None:  # Dagster's wrapper first, our exception last
                    error = error.cause
                outcome.errors.append(f"{event.step_key}: {error.message.strip()}")
        for evaluation in result.get_asset_check_evaluations():
            name = evaluation.check_name
            outcome.checks[name] = (evaluation.passed, evaluation.severity.value)
            if not evaluation.passed:
                outcome.check_notes[name] = evaluation.description or ", ".join(
                    f"{k}={v.value}" for k, v in evaluation.metadata.items()
                )
        ctx.outcomes.append(outcome)
        _print_outcome(ctx, outcome)
    failed = [o.job for o in ctx.outcomes if not o.success]
    if failed:
        raise SystemExit(f"ingest_job failed for {failed}: see `dagster dev` or the logs above")


def _print_outcome(ctx: MainContext, o: JobOutcome) -> None:
    m = o.metadata
    ctx.say(
        f"  {o.job}: run {o.run_id[:8]} {'ok' if o.success else 'FAILED'}; "
        f"files ingested {m.get('files_ingested', '?')}, unchanged {m.get('files_unchanged', '?')}, "
        f"refused {m.get('files_refused', '?')}; {m.get('events', '?')} events "
        f"({m.get('events_new', '?')} new) in {m.get('seconds', '?')} s"
    )
    for error in o.errors:
        ctx.say(f"    failed step {error.strip()}")
    for name, (passed, severity) in sorted(o.checks.items()):
        if not passed:
            ctx.say(f"    check {name} failed ({severity}): {o.check_notes.get(name, '')}")
    passed = sum(p for p, _ in o.checks.values())
    ctx.say(f"    checks passed: {passed}/{len(o.checks)}")


def step_show(ctx: MainContext) -> None:
    """What the warehouse holds: per job, and events per category."""
    import pandas as pd

    import lumos_sql
    from lumos.api import Warehouse

    wh = Warehouse.open(ctx.warehouse)
    ctx.tables["jobs"] = wh.sql(lumos_sql.load("main/jobs"))
    ctx.tables["categories"] = wh.sql(lumos_sql.load("main/events_by_category"))
    with pd.option_context("display.width", 120, "display.max_columns", 20):
        ctx.say("\nwhat the warehouse holds, per job:")
        ctx.say(ctx.tables["jobs"].to_string(index=False))
        ctx.say("\nevents per category:")
        ctx.say(ctx.tables["categories"].to_string(index=False))


def step_replay(ctx: MainContext) -> None:
    """Replayed vs measured iterations (model replay; identity replay as a graph check)."""
    import pandas as pd

    import lumos_sql
    from lumos.api import Warehouse

    wh = Warehouse.open(ctx.warehouse)
    ctx.tables["replay"] = wh.sql(lumos_sql.load("main/replay"))
    with pd.option_context("display.width", 140, "display.max_columns", 20):
        ctx.say(ctx.tables["replay"].to_string(index=False))


def step_sweep(ctx: MainContext) -> None:
    """Sweeps of the bundled grid files into the `estimates` table, the best first (as `lumos
    sweep` ranks them: tokens per second unless the grid says `order:`; unfit last)."""
    import pandas as pd

    from pipelines.sweep_grids import grid_files, job_of, sweep_grid_file

    files = [p for p in grid_files(ctx.grids) if job_of(p) in ctx.jobs]
    if not files:
        ctx.say(f"no grid file of {ctx.grids} names an ingested job: nothing to sweep")
        return
    rows = []
    for path in files:
        sweep = sweep_grid_file(ctx.warehouse, path)
        rows.append(sweep.rows)
        ctx.say(
            f"{path.name}: job {sweep.job!r}, sweep {sweep.sweep_id}: {sweep.n_points} grid points, "
            f"{sweep.n_constrained} removed by constraints, {sweep.n_invalid} invalid, "
            f"{len(sweep.rows)} estimated in {sweep.seconds:.2f} s; the {TOP} best by "
            f"{sweep.ranking}:"
        )
        with pd.option_context("display.width", 140, "display.max_columns", 20):
            ctx.say(sweep.best(TOP).to_string(index=False))
    ctx.tables["sweep"] = pd.concat(rows, ignore_index=True)


STEPS: list[tuple[str, Callable[[MainContext], None]]] = [
    ("instance", step_instance),
    ("register", step_register),
    ("ingest", step_ingest),
    ("show", step_show),
    ("replay", step_replay),
    ("sweep", step_sweep),
]


def run_main(
    *,
    dagster_home: Path,
    warehouse: Path,
    inbox: Path = EXAMPLES,
    grids: Path = GRIDS,
    out: TextIO = sys.stdout,
) -> MainContext:
    """Run every step in order; returns the context (outcomes, tables, timings) for callers."""
    ctx = MainContext(
        dagster_home=Path(dagster_home).resolve(),
        warehouse=Path(warehouse).resolve(),
        inbox=Path(inbox).resolve(),
        out=out,
        grids=Path(grids).resolve(),
    )
    started = time.perf_counter()
    try:
        for name, step in STEPS:
            t0 = time.perf_counter()
            ctx.say(f"\n== {name}: {(step.__doc__ or '').strip().splitlines()[0]}")
            step(ctx)
            ctx.timings[name] = time.perf_counter() - t0
    finally:
        if ctx.instance is not None:
            ctx.instance.dispose()
    ctx.timings["total"] = time.perf_counter() - started
    ctx.say("\ntimings: " + ", ".join(f"{k} {v:.1f} s" for k, v in ctx.timings.items()))
    return ctx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.main",
        description="Ingest the bundled example traces through the Dagster pipeline, show "
        "what the warehouse holds, replay it and sweep the bundled grids.",
    )
    parser.add_argument("--dagster-home", type=Path, default=Path(".dagster_home"))
    parser.add_argument("--warehouse", type=Path, default=Path("lumos_warehouse"))
    parser.add_argument("--inbox", type=Path, default=EXAMPLES, help="default: examples/traces")
    parser.add_argument(
        "--grids", type=Path, default=GRIDS, help="sweep grid files <job>.yaml (examples/grids)"
    )
    args = parser.parse_args(argv)
    run_main(
        dagster_home=args.dagster_home,
        warehouse=args.warehouse,
        inbox=args.inbox,
        grids=args.grids,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
