"""Replay a fleet: every job of the warehouse, one job in memory at a time, skipping current ones.

Each job is replayed, explained and written, then dropped (only its `replay_quality` rows are
kept, for the caller's table); a job is skipped when `replay_runs` says its stored replay read
the same files (`inputs_sha256`) with the same code (`code_sha256`: an upgrade of lumos replays
the fleet again by itself). A job's `replay_runs` row is written after its tables, so a run
killed mid-job replays that job next time; a failed job is recorded and not tried again until
its files or the code change. On an S3 warehouse the jobs are replayed in a local mirror
(`warehouse.lake_mirror`), committed back as one Delta commit at the end. With `workers > 1`
jobs run in a pool of spawned processes, each writing only its own `job=<enc>` files; the
caller rebuilds the catalog afterwards. The whole design: docs/replay.md, "Module notes".
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lumos_sql
from lumos.explain.inputs import job_file
from warehouse.catalog import connect as catalog_connect
from warehouse.layout import write_parquet_atomic
from warehouse.location import warehouse_location
from warehouse.schema import REPLAY_QUALITY, REPLAY_RUNS
from warehouse.windows import windows_of

__all__ = [
    "FleetReport",
    "JobInputs",
    "JobOutcome",
    "code_sha256",
    "replay_fleet",
    "replay_one",
    "replay_states",
]

# What a replay's result depends on besides the traces: the files whose change must replay again.
_CODE_GLOBS: tuple[tuple[str, str], ...] = (
    ("lumos_sql", "graph/*.sql"),
    ("lumos_sql", "replay/*.sql"),
    ("lumos_sql", "explain/*.sql"),
    ("lumos_sql", "collectives/*.sql"),
    # which files a job's replay reads (warehouse.catalog.job_events_view)
    ("lumos_sql", "catalog/job_*.sql"),
    ("kernels", "*.py"),
    ("lumos.replay", "*.py"),
    ("lumos.explain", "*.py"),
    ("warehouse", "schema.py"),
)


@cache
def code_sha256() -> str:
    """sha256 over the graph SQL and the replay, kernel and explanation code (as installed)."""
    import importlib

    h = hashlib.sha256()
    for package, pattern in _CODE_GLOBS:
        folder = Path(importlib.import_module(package).__file__).parent
        for path in sorted(folder.glob(pattern)):
            h.update(f"{package}/{path.relative_to(folder)}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class JobInputs:
    """What a job's replay reads: a hash over its ingested files, and its number of ranks."""

    job: str
    inputs_sha256: str
    n_ranks: int


@dataclass
class JobOutcome:
    """One job of a fleet replay.

    status: 'replayed', 'failed' (this run), 'current' (skipped: its replay is up to date) or
    'still failing' (skipped: it failed before on the same files and code)."""

    job: str
    status: str
    quality: pa.Table | None = None  # replay_quality rows ('replayed' only)
    error: str | None = None
    seconds: float = 0.0
    n_tasks: int | None = None
    n_iterations: int | None = None  # traced steps found ('replayed' only)
    # the trace has no ProfilerStep: its one iteration is the whole capture ('replayed' only)
    whole_capture: bool | None = None
    ranks: tuple[int, ...] | None = None  # the ranks with a task ('replayed' only)
    n_collectives: int = 0  # collective kernels of a multi-rank job, and those unmatched
    n_unmatched: int = 0

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "still failing")


@dataclass
class FleetReport:
    root: Path | str  # the warehouse replayed (a directory, or an s3:// URI)
    outcomes: list[JobOutcome]
    seconds: float

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def failed(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.failed]

    def summary(self) -> str:
        parts = [f"{self.count('replayed')} replayed"]
        if self.count("current"):
            parts.append(f"{self.count('current')} current (skipped; --force replays them)")
        parts.append(f"{self.count('failed')} failed")
        if self.count("still failing"):
            parts.append(f"{self.count('still failing')} still failing (same files and code)")
        return f"{len(self.outcomes)} job(s): {', '.join(parts)} in {self.seconds:.1f} s"


def job_inputs(con) -> dict[str, JobInputs]:  # noqa: ANN001
    rows = con.execute(lumos_sql.load("replay/job_inputs")).fetchall()
    return {job: JobInputs(job, sha, int(n)) for job, sha, n in rows}


def stored_runs(con, root: Path | str) -> dict[str, dict]:  # noqa: ANN001
    """The `replay_runs` row of every job replayed before (job -> row); `root` an `s3://` URI:
    from the connection's replay_runs view."""
    if isinstance(root, str):
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        if "replay_runs" not in views:
            return {}
        table = con.sql(lumos_sql.load("replay/runs_view")).to_arrow_table()
        return {r["job"]: r for r in table.to_pylist()}
    folder = root / "replay_runs"
    if not folder.is_dir() or next(folder.rglob("*.parquet"), None) is None:
        return {}
    glob = "'" + str(folder / "**" / "*.parquet").replace("'", "''") + "'"
    table = con.sql(lumos_sql.render("replay/runs_stored", glob=glob)).to_arrow_table()
    return {r["job"]: r for r in table.to_pylist()}


def replay_states(con, root: Path | str) -> dict[str, str]:  # noqa: ANN001
    """Per job with an ingested trace, where its replay stands: 'ok' or 'failed' (current),
    'stale: files changed', 'stale: lumos changed', or 'none' (never replayed)."""
    stored = stored_runs(con, root)
    return {job: _state(stored.get(job), inputs) for job, inputs in job_inputs(con).items()}


def _state(row: dict | None, inputs: JobInputs) -> str:
    """One job's `replay_states` entry from its stored `replay_runs` row."""
    if row is None:
        return "none"
    if row["inputs_sha256"] != inputs.inputs_sha256:
        return "stale: files changed"
    if row["code_sha256"] != code_sha256():
        return "stale: lumos changed"
    return "ok" if row["status"] == "ok" else "failed"


def _is_current(row: dict | None, inputs: JobInputs, explain: bool) -> bool:
    """Whether the stored replay stands (a failure too): explanations wanted must be there."""
    state = _state(row, inputs)
    return state == "failed" or (state == "ok" and (row["explained"] or not explain))


def replay_one(
    root: Path,
    con,  # noqa: ANN001
    inputs: JobInputs,
    *,
    explain: bool = True,
) -> JobOutcome:
    """Replay (and explain) one job, write its tables, then its `replay_runs` row. A failure is
    recorded in that row and returned, not raised: one odd trace must not stop the fleet."""
    from lumos.replay.run import replay_and_write

    started = time.perf_counter()
    job = inputs.job
    out = JobOutcome(job, "replayed")
    try:
        res = replay_and_write(root, con, job)
        if explain:
            from lumos.explain.inputs import from_replay
            from lumos.explain.run import explain as explain_tables
            from lumos.explain.run import write

            write(root, job, explain_tables(from_replay(con, job, res.tables)))
        out.quality = res.tables["replay_quality"]
        out.n_tasks = res.tables["tasks"].num_rows
        out.n_iterations = res.tables["iterations"].num_rows
        out.whole_capture = any(res.tables["iterations"].column("whole_capture").to_pylist())
        out.ranks = tuple(sorted(pc.unique(res.tables["tasks"].column("rank")).to_pylist()))
        out.n_collectives, out.n_unmatched = res.n_collectives, res.n_unmatched
    except Exception as exc:  # noqa: BLE001 - recorded in replay_runs and reported per job
        out.status, out.error = "failed", f"{type(exc).__name__}: {exc}"
    out.seconds = time.perf_counter() - started
    row = {
        "job": job,
        "inputs_sha256": inputs.inputs_sha256,
        "code_sha256": code_sha256(),
        "status": "failed" if out.status == "failed" else "ok",
        "error": out.error,
        "explained": explain and out.status != "failed",
        "n_ranks": inputs.n_ranks,
        "n_tasks": out.n_tasks,
        "seconds": out.seconds,
        "replayed_at": datetime.now(UTC),
    }
    try:
        write_parquet_atomic(
            pa.Table.from_pylist([row], schema=REPLAY_RUNS), job_file(root, "replay_runs", job)
        )
    except OSError as exc:  # the job is replayed again next time: nothing says it is current
        out.status = "failed"
        out.error = f"{out.error + '; ' if out.error else ''}its replay_runs row: {exc}"
    return out


def stored_quality(root: Path, job: str) -> pa.Table:
    """A job's stored `replay_quality` rows (empty when it has none)."""
    path = job_file(root, "replay_quality", job)
    return (
        pq.read_table(path, schema=REPLAY_QUALITY)
        if path.is_file()
        else REPLAY_QUALITY.empty_table()
    )


# A worker process's catalog connection, opened once by `_init_worker`.
_WORKER: dict[str, object] = {}


def _init_worker(catalog: str, threads: int) -> None:
    from warehouse.parent_death import die_with_parent

    die_with_parent()  # a killed `lumos replay` takes its workers with it
    con = catalog_connect(catalog)
    # the pool's processes already share the cores: DuckDB's own threads would oversubscribe
    # them. A setting, not a connect-time config: a multi-rank job's collectives open the same
    # catalog again, and DuckDB refuses a second connection with another configuration.
    con.execute(f"SET threads = {int(threads)}")
    _WORKER["con"] = con


def _replay_in_worker(root: str, inputs: JobInputs, explain: bool) -> JobOutcome:
    return replay_one(Path(root), _WORKER["con"], inputs, explain=explain)


def _run_pool(
    root: Path, catalog: Path, todo: list[JobInputs], explain: bool, workers: int
) -> Iterator[JobOutcome]:
    import multiprocessing

    # spawn, not fork: the parent holds DuckDB and numba threads, which fork does not carry over
    ctx = multiprocessing.get_context("spawn")
    n = min(workers, len(todo))
    threads = max(1, (os.cpu_count() or 1) // n)
    with ProcessPoolExecutor(
        max_workers=n,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(str(catalog), threads),
    ) as pool:
        futures = {pool.submit(_replay_in_worker, str(root), i, explain): i for i in todo}
        for fut in as_completed(futures):
            try:
                yield fut.result()
            except Exception as exc:  # noqa: BLE001 - a worker died (killed, out of memory)
                yield JobOutcome(futures[fut].job, "failed", error=f"{type(exc).__name__}: {exc}")


def replay_fleet(
    warehouse: str | os.PathLike[str] | None = None,
    jobs: Sequence[str] | None = None,
    *,
    force: bool = False,
    explain: bool = True,
    workers: int = 1,
    with_windows: bool = False,
    on_job: Callable[[JobOutcome, int, int], None] | None = None,
) -> FleetReport:
    """Replay `jobs` (default: every job with an ingested trace), skipping current ones unless
    `force`; `with_windows` adds each named job's later profiling windows (`<job>/steps-N`,
    warehouse/windows.py). `on_job(outcome, done, total)` is called as each job finishes
    (progress). Raises ValueError for a job the warehouse does not hold."""

    from lumos.replay.run import resolve_jobs
    from warehouse.handle import WarehouseHandle

    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    location = warehouse_location(warehouse)
    if isinstance(location, str):  # s3://bucket/prefix
        return _replay_lake(
            location,
            jobs,
            force=force,
            explain=explain,
            workers=workers,
            with_windows=with_windows,
            on_job=on_job,
        )
    started = time.perf_counter()
    wh = WarehouseHandle.open(warehouse)
    root = wh.root
    con = catalog_connect(str(wh.catalog))
    outcomes: list[JobOutcome] = []
    try:
        names = resolve_jobs(con, jobs, root)
        inputs = job_inputs(con)
        if with_windows and jobs:
            names = [w for job in names for w in (job, *windows_of(job, inputs))]
        stored = {} if force else stored_runs(con, root)
        todo = []
        for job in names:
            prev = stored.get(job)
            if _is_current(prev, inputs[job], explain):
                skipped = JobOutcome(
                    job,
                    "still failing" if prev["status"] == "failed" else "current",
                    error=prev["error"],
                )
                outcomes.append(skipped)
            else:
                todo.append(inputs[job])
        total = len(names)

        def done(o: JobOutcome) -> None:
            outcomes.append(o)
            if on_job is not None:
                on_job(o, len(outcomes), total)

        if workers == 1 or len(todo) < 2:
            for item in todo:
                done(replay_one(root, con, item, explain=explain))
        else:
            for o in _run_pool(root, wh.catalog, todo, explain, workers):
                done(o)
    finally:
        con.close()
    order = {job: i for i, job in enumerate(names)}
    outcomes.sort(key=lambda o: order[o.job])
    return FleetReport(root, outcomes, time.perf_counter() - started)


def _replay_lake(uri: str, jobs: Sequence[str] | None, **options: object) -> FleetReport:
    """`replay_fleet` on the S3 warehouse `uri`: in a local mirror of it (the jobs' files and
    stored results), then the files the replay wrote there committed back as one commit. The
    report's root is `uri`; every outcome carries its job's replay_quality rows."""
    from lumos.replay.run import resolve_jobs
    from warehouse.lake_catalog import connect
    from warehouse.lake_mirror import mirror

    if jobs:  # a job the warehouse lacks is named as on a local one, not as the mirror's
        con = connect(uri)
        try:
            resolve_jobs(con, jobs, uri)
        finally:
            con.close()
    # only the named jobs' files are copied (with their windows, `<job>/steps-N`, if asked for)
    with mirror(uri, jobs, with_windows=bool(options.get("with_windows"))) as local:
        report = replay_fleet(local.root, jobs, **options)  # type: ignore[arg-type]
        for o in report.outcomes:
            if o.quality is None and not o.failed:
                o.quality = stored_quality(local.root, o.job)
        local.publish()
    report.root = uri  # type: ignore[assignment]
    return report
