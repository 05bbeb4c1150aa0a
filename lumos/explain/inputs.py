"""The replay tables of one job, joined to steps and split by rank, as numpy arrays.

`load_job` reads `tasks`, `iterations`, `schedules`, `deps` of a job from the warehouse's Parquet
files (written by `lumos replay`); `from_tables` takes the same tables in memory (a
`lumos.replay.run.JobReplay`); `from_replay` reads them on the connection that just replayed the
job, where they are still temp tables. `lumos_sql/explain/task_steps.sql` gives every task its step and,
for GPU tasks, its class (compute or communication). `JobTables.ranks()` yields one `RankView`
per rank whose arrays are indexed by task id.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lumos_sql
from warehouse.catalog import connect as catalog_connect
from warehouse.catalog import threads_for, threads_for_rows
from warehouse.layout import Layout, encode_job

INPUT_TABLES = ("tasks", "iterations", "schedules", "deps")
NO_STEP = np.iinfo(np.int64).min  # a task outside every step
MEASURED = "measured"


class ExplainInputError(ValueError):
    """The replay tables of a job are missing or inconsistent (names the file or job)."""


def _np(t: pa.Table, name: str, fill: int) -> np.ndarray:
    return np.ascontiguousarray(t.column(name).fill_null(fill).to_numpy(), np.int64)


@dataclass
class RankView:
    """One rank's tasks (arrays indexed by task id) and its schedules by mode."""

    job: str
    rank: int
    tasks: pa.Table  # x_task rows of the rank, by task id
    steps: pa.Table  # iterations rows of the rank, by step
    schedules: dict[str, pa.Table]  # mode -> schedule rows of the rank, by task id

    def __post_init__(self) -> None:
        n = self.tasks.num_rows
        if not np.array_equal(_np(self.tasks, "task", -1), np.arange(n)):
            raise ExplainInputError(f"{self.job} rank {self.rank}: task ids are not 0..{n - 1}")
        self.is_gpu = self.tasks.column("is_gpu").to_numpy(zero_copy_only=False).astype(bool)
        self.kind = _np(self.tasks, "kind", -1)
        self.cls = _np(self.tasks, "cls", -1)
        self.step = _np(self.tasks, "step", NO_STEP)
        # measured external wait before each GPU task (none in tables written before it)
        self.ext_wait = (
            np.maximum(_np(self.tasks, "ext_wait_ns", 0), 0)
            if "ext_wait_ns" in self.tasks.column_names
            else np.zeros(n, np.int64)
        )
        for mode, s in self.schedules.items():
            if s.num_rows != n or not np.array_equal(_np(s, "task", -1), np.arange(n)):
                raise ExplainInputError(
                    f"{self.job} rank {self.rank}: the {mode} schedule has {s.num_rows} rows for "
                    f"{n} tasks (replay again: `lumos replay --job {self.job}`)"
                )

    @property
    def modes(self) -> list[str]:
        return [MEASURED, *sorted(self.schedules)]

    def times(self, mode: str) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (ns from the rank's origin) of every task: traced or replayed."""
        if mode == MEASURED:
            return _np(self.tasks, "ts_ns", 0), _np(self.tasks, "end_ns", 0)
        s = self.schedules[mode]
        return _np(s, "start_ns", 0), _np(s, "end_ns", 0)

    def crit(self, mode: str) -> tuple[np.ndarray, np.ndarray]:
        """crit_src and crit_kind of a replayed mode (`kernels.replay.Crit`)."""
        s = self.schedules[mode]
        return _np(s, "crit_src", -1), _np(s, "crit_kind", 0)


@dataclass
class JobTables:
    """A job's replay tables; `tasks` carries step and class (lumos_sql/explain/task_steps)."""

    job: str
    tasks: pa.Table
    iterations: pa.Table
    schedules: pa.Table
    deps: pa.Table

    def ranks(self) -> Iterator[RankView]:
        ranks = sorted(set(self.tasks.column("rank").to_pylist()))
        t_rank = self.tasks.column("rank").to_numpy()
        i_rank = self.iterations.column("rank").to_numpy()
        s_rank = self.schedules.column("rank").to_numpy()
        # modes compared as Arrow strings: a Python list of every row's mode costs more
        s_mode = self.schedules.column("mode")
        for r in ranks:
            scheds = {}
            in_rank = s_rank == r
            for mode in sorted(pc.unique(_rows(s_mode, in_rank)).to_pylist()):
                sel = _rows(self.schedules, in_rank & _equal(s_mode, mode))
                scheds[str(mode)] = _sorted(sel, "task")
            yield RankView(
                self.job,
                int(r),
                _sorted(_rows(self.tasks, t_rank == r), "task"),
                _sorted(_rows(self.iterations, i_rank == r), "step"),
                scheds,
            )


def _rows(t: pa.Table | pa.ChunkedArray, mask: np.ndarray) -> pa.Table | pa.ChunkedArray:
    """The rows of `t` where `mask` holds; `t` itself when it holds everywhere (one rank, one
    mode: the common case, where a filter would copy every column)."""
    return t if mask.all() else t.filter(pa.array(mask))


def _equal(col: pa.ChunkedArray, value: str) -> np.ndarray:
    return np.asarray(pc.equal(col, value).to_numpy(zero_copy_only=False), bool)


def _sorted(t: pa.Table, key: str) -> pa.Table:
    """`t` by `key`: as it is when already in order (the replay writes every table so), else
    sorted (a take of every column)."""
    k = t.column(key).to_numpy()
    if k.shape[0] < 2 or bool(np.all(k[1:] >= k[:-1])):
        return t
    return t.sort_by(key)


def _with_steps(
    con,  # noqa: ANN001
    job: str,
    schedules: pa.Table | None = None,
    tasks: pa.Table | None = None,
) -> JobTables:
    """`schedules` and `tasks` as given when the caller holds them in memory: `JobTables.ranks`
    selects and sorts each rank's and mode's rows itself, so a sorted copy through DuckDB is
    wasted work."""
    con.execute(lumos_sql.load("explain/task_steps"))
    if schedules is None:
        schedules = con.sql("SELECT * FROM schedules ORDER BY rank, mode, task").to_arrow_table()
    return JobTables(
        job,
        _task_steps(con, tasks),
        con.sql("SELECT * FROM iterations ORDER BY rank, step").to_arrow_table(),
        schedules,
        con.sql("SELECT * FROM deps ORDER BY rank, src, dst").to_arrow_table(),
    )


def _task_steps(con, tasks: pa.Table | None) -> pa.Table:  # noqa: ANN001
    """The job's tasks in (rank, task) order with their end, step and class (`x_task`)."""
    if tasks is None:
        tasks = con.sql("SELECT * FROM tasks").to_arrow_table()
    order = pc.sort_indices(tasks, [("rank", "ascending"), ("task", "ascending")])
    if not _is_identity(order):  # the replay writes them in this order
        tasks = tasks.take(order)
    steps = con.sql("SELECT step, cls FROM x_task").to_arrow_table()
    end = pc.add(tasks.column("ts_ns"), tasks.column("dur_ns"))
    return (
        tasks.append_column("end_ns", end)
        .append_column("step", steps.column("step"))
        .append_column("cls", steps.column("cls"))
    )


def _is_identity(order: pa.Array) -> bool:
    return bool(np.array_equal(order.to_numpy(), np.arange(len(order))))


def from_tables(job: str, tables: Mapping[str, pa.Table]) -> JobTables:
    """Explanation inputs from in-memory replay tables (e.g. `JobReplay.tables`)."""

    missing = [t for t in INPUT_TABLES if t not in tables]
    if missing:
        raise ExplainInputError(f"{job}: replay tables {missing} not given")
    con = catalog_connect(config={"threads": threads_for_rows(tables["tasks"].num_rows)})
    try:
        for name in INPUT_TABLES:
            con.register(name, tables[name])
        return _with_steps(con, job, schedules=tables["schedules"], tasks=tables["tasks"])
    finally:
        con.close()


def from_replay(con, job: str, tables: Mapping[str, pa.Table]) -> JobTables:  # noqa: ANN001
    """Explanation inputs of the job just replayed on `con` (`lumos.replay.run.replay_job`): its
    `tasks`, `iterations` and `deps` are still temp tables there, and DuckDB reads its own tables
    faster than registered Arrow ones, without a second connection (df_index_resolver: 78 -> 46
    ms). `tables` is the replay's result, for the schedules and tasks already in memory."""
    with threads_for(con, tables["tasks"].num_rows):
        return _with_steps(con, job, schedules=tables["schedules"], tasks=tables["tasks"])


def job_file(warehouse: str | os.PathLike[str], table: str, job: str) -> Path:
    """`<wh>/<table>/job=<enc>/part.parquet`, where the replay and the explanations write."""
    return Layout.at(warehouse).root / table / f"job={encode_job(job)}" / "part.parquet"


def load_job(warehouse: str | os.PathLike[str], job: str) -> JobTables:
    """Explanation inputs of `job` from the warehouse; a clear error when it was not replayed."""

    paths = {t: job_file(warehouse, t, job) for t in INPUT_TABLES}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise ExplainInputError(
            f"{Layout.at(warehouse).root}: job {job!r} has no replay tables ({missing[0]} is "
            f"missing): run `lumos replay --job {job}` first"
        )
    con = catalog_connect()
    try:
        slots = {t: "'" + str(p).replace("'", "''") + "'" for t, p in paths.items()}
        con.execute(lumos_sql.render("explain/job_files", **slots))
        return _with_steps(con, job)
    finally:
        con.close()


@dataclass
class StepWindows:
    """Per step of a rank: first start, last end and the last-ending task of a set of tasks."""

    step: np.ndarray  # the rank's steps that hold at least one task of the set
    start_ns: np.ndarray
    end_ns: np.ndarray
    last: np.ndarray  # task id of the latest end (lowest id on ties)
    n_tasks: np.ndarray
    warmup: np.ndarray
    truncated: np.ndarray


def step_windows(
    view: RankView, start: np.ndarray, end: np.ndarray, select: np.ndarray
) -> StepWindows:
    """Windows of the tasks with ``select`` true, grouped by their step."""
    steps = _np(view.steps, "step", NO_STEP)
    warm = view.steps.column("warmup").to_numpy(zero_copy_only=False).astype(bool)
    trunc = view.steps.column("truncated").to_numpy(zero_copy_only=False).astype(bool)
    ids = np.flatnonzero(select & (view.step != NO_STEP))
    pos = np.searchsorted(steps, view.step[ids])
    ok = (pos < steps.size) & (steps[np.minimum(pos, steps.size - 1)] == view.step[ids])
    ids, pos = ids[ok], pos[ok]
    k = steps.size
    big = np.iinfo(np.int64).max
    lo = np.full(k, big, np.int64)
    hi = np.full(k, -1, np.int64)
    cnt = np.bincount(pos, minlength=k).astype(np.int64)
    np.minimum.at(lo, pos, start[ids])
    np.maximum.at(hi, pos, end[ids])
    last = np.full(k, -1, np.int64)
    # the last-ending task: among the step's tasks ending at hi, the lowest id
    at_end = end[ids] == hi[pos]
    cand_pos, cand_ids = pos[at_end], ids[at_end]
    order = np.lexsort((cand_ids, cand_pos))
    first = np.unique(cand_pos[order], return_index=True)[1]
    last[cand_pos[order][first]] = cand_ids[order][first]
    has = cnt > 0
    return StepWindows(steps[has], lo[has], hi[has], last[has], cnt[has], warm[has], trunc[has])
