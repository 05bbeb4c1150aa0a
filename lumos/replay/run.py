"""Drive a job's replay: SQL graph tables -> numba replay -> result tables in the warehouse.

For each job: run `lumos_sql/graph/*.sql` on the catalog (read-only; temp tables only), estimate
the constants (`lumos.replay.constants`), replay every rank in `model` and `identity` mode in one
batched kernel call, compute `iteration_replay` with `lumos_sql/replay/iteration_replay.sql`, and
write `iterations`, `tasks`, `deps`, `kernels`, `schedules`, `iteration_replay`, `replay_quality`
as `<wh>/<table>/job=<enc>/part.parquet` (temp file + rename). Single-rank: each rank is its own
graph; the `multirank` mode (jobs with several ranks) stacks every rank's model graph into one
instance joined by the matched collectives (`lumos.replay.multirank`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lumos_sql
from lumos.replay.build import TaskColumns, build_graph
from lumos.replay.constants import DeviceConstants, estimate, step_gaps, to_arrow
from lumos.replay.multirank import MODE as MULTIRANK
from lumos.replay.multirank import build_multirank
from warehouse.catalog import connect as catalog_connect
from warehouse.catalog import job_events_view, no_trace_message, threads_for
from warehouse.layout import Layout, encode_job, write_parquet_atomic
from warehouse.schema import SCHEDULES, TABLES

GRAPH_SCRIPTS = ("base", "iterations", "constants")
GRAPH_SCRIPTS_AFTER_CONST = ("tasks", "deps", "waits", "kernels", "slack")
MODES = ("model", "identity", MULTIRANK)
RESULT_TABLES = ("iterations", "tasks", "deps", "kernels", "schedules", "iteration_replay")

SCHED_SCHEMA = SCHEDULES


@dataclass
class JobReplay:
    """What one job's replay produced (Arrow tables, as written)."""

    job: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    constants: list[DeviceConstants] = field(default_factory=list)
    queue_depth: int = 0
    # of a multi-rank job: its collective kernels, and those not matched across ranks (the
    # multirank replay runs them with their traced durations, not joined to their peers)
    n_collectives: int = 0
    n_unmatched: int = 0


# what the graph scripts leave for the replay, the scoring and the callers of build_tables
GRAPH_RESULTS = ("iterations", "tasks", "deps", "kernels", "g_slack")
# the scripts after graph/events, in order (const_table reads what Python made of g_const_raw)
_STEPS = (*GRAPH_SCRIPTS, "const_table", *GRAPH_SCRIPTS_AFTER_CONST)


@functools.cache
def _last_uses() -> dict[str, tuple[str, ...]]:
    """Per script, the temp tables no later script reads or writes (the results excepted), from
    the scripts' declarations (`lumos_sql.declared`): the job's events are held several times
    over by the intermediate tables, and each is dropped as soon as nothing reads it any more.
    g_const_raw and g_step_gap_raw are read by Python before const_table."""
    order = ("events", *_STEPS)
    decl = {name: lumos_sql.declared(f"graph/{name}") for name in order}
    created = {t for d in decl.values() for t in d.writes}
    last: dict[str, int] = {}
    for i, name in enumerate(order):
        for table in {*decl[name].reads, *decl[name].writes} & created:
            last[table] = i
    for raw in ("g_const_raw", "g_step_gap_raw"):
        last[raw] = max(last.get(raw, 0), order.index("const_table"))
    out: dict[str, list[str]] = {name: [] for name in _STEPS}
    for table, i in last.items():
        if table not in GRAPH_RESULTS:
            out[order[max(i, 1)]].append(table)
    return {name: tuple(sorted(tables)) for name, tables in out.items()}


# From this many graph events on, a job's build drops each intermediate table once nothing reads
# it and hands the memory back (a 4.1M-event job: peak RSS of the whole replay 2.68 -> 1.77 GB).
# Below it the job is small and the drops only cost time (df_index_resolver, 123k events: +10%).
LEAN_EVENTS = 1_000_000


def _script(con, name: str, lean: bool) -> None:  # noqa: ANN001
    con.execute(lumos_sql.load(f"graph/{name}"))
    if lean and _last_uses()[name]:
        for table in _last_uses()[name]:
            con.execute(f"DROP TABLE IF EXISTS {table}")
        _release_memory(con)


def build_tables(con, job: str, ranks: Collection[int] | None = None) -> list[DeviceConstants]:  # noqa: ANN001
    """Create the temp tables iterations/tasks/deps/kernels/g_slack of `job` (of its `ranks`
    only, when given) on `con`."""
    job_events_view(con, job, ranks)
    con.execute(lumos_sql.load("graph/events"), {"job": job})
    n_events = con.execute("SELECT count(*) FROM g_ev").fetchone()[0]
    with threads_for(con, n_events):
        return _build_graph_tables(con, lean=n_events >= LEAN_EVENTS)


def _release_memory(con) -> None:  # noqa: ANN001
    """Hand DuckDB's freed buffers back: it keeps them cached up to its memory limit, so a
    dropped table's memory stays in the process. Lowering the limit to what the live tables use
    (with room) frees the cache; the limit is then restored."""
    used, limit = con.execute(lumos_sql.load("replay/memory_in_use")).fetchone()
    con.execute(f"SET memory_limit = '{max(2 * int(used or 0), 256 << 20)}B'")
    con.execute(f"SET memory_limit = '{limit}'")


def _build_graph_tables(con, lean: bool) -> list[DeviceConstants]:  # noqa: ANN001
    for name in GRAPH_SCRIPTS:
        _script(con, name, lean)
    raw = con.sql("SELECT * FROM g_const_raw").to_arrow_table().to_pylist()
    consts = estimate(raw)
    con.register("g_const_in", to_arrow(consts))
    con.register(
        "g_step_gap_in", step_gaps(con.sql("FROM g_step_gap_raw").to_arrow_table().to_pylist())
    )
    _script(con, "const_table", lean)
    con.unregister("g_const_in")
    con.unregister("g_step_gap_in")
    for name in GRAPH_SCRIPTS_AFTER_CONST:
        _script(con, name, lean)
    return consts


@dataclass
class Instance:
    """One replay instance: its mode, graph, and each task's rank and id within that rank."""

    mode: str
    graph: object
    rank: np.ndarray
    local_task: np.ndarray


def rank_graphs(
    con,  # noqa: ANN001
    consts: list[DeviceConstants],
    *,
    modes: Sequence[str] = ("model", "identity"),
    drop: Collection[str] = (),
    collectives: pa.Table | None = None,
) -> list[Instance]:
    """The replay instances of the job whose temp tables are on `con`: one per rank and
    single-rank mode, plus one `multirank` instance over all ranks when asked for, the job has
    several ranks and `collectives` (from `build_collectives`) is given."""
    tasks = _in_task_order(con.sql(lumos_sql.load("replay/graph_tasks")).to_arrow_table())
    deps = con.sql(lumos_sql.load("replay/graph_deps")).to_arrow_table()
    t_rank = tasks.column("rank").to_numpy()
    ranks = [int(r) for r in np.unique(t_rank)]
    d_rank = deps.column("rank").to_numpy()
    job = con.execute(lumos_sql.load("replay/graph_job")).fetchall()[0][0] or ""
    out = []
    for r in ranks:
        one = len(ranks) == 1  # the common case: no copy
        t = tasks if one else tasks.filter(pa.array(t_rank == r))
        d = deps if one else deps.filter(pa.array(d_rank == r))
        c = [x for x in consts if x.rank == r]
        cols = TaskColumns(t)  # both modes' graphs from one conversion of the columns
        for mode in modes:
            if mode == MULTIRANK:
                continue
            g = build_graph(cols, d, c, mode=mode, drop=drop, source=f"{job} rank {r} ({mode})")
            n = t.num_rows
            out.append(Instance(mode, g, np.full(n, r, np.int64), np.arange(n, dtype=np.int64)))
    if MULTIRANK in modes and len(ranks) > 1 and collectives is not None:
        m = build_multirank(tasks, deps, consts, collectives, drop=drop, source=job)
        out.append(Instance(MULTIRANK, m.graph, m.rank, m.local_task))
    return out


def _in_task_order(tasks: pa.Table) -> pa.Table:
    """`tasks` sorted by (rank, task): as read, normally (graph_tasks.sql relies on the stored
    order); sorted here should a scan ever return it otherwise."""
    rank = tasks.column("rank").to_numpy()
    task = tasks.column("task").to_numpy()
    if len(rank) < 2:
        return tasks
    same = rank[1:] == rank[:-1]
    if np.all((rank[1:] > rank[:-1]) | (same & (task[1:] > task[:-1]))):
        return tasks
    return tasks.take(pc.sort_indices(tasks, [("rank", "ascending"), ("task", "ascending")]))


def replay_graphs(
    con,  # noqa: ANN001
    job: str,
    instances: list[Instance],
    queue_depth: int,
) -> pa.Table:
    """Replay the instances in one batch, register `g_sched` on `con` and return it.

    A multirank instance's critical predecessor on *another* rank (a collective's last arrival)
    is stored as crit_src -1 with crit_kind COLLECTIVE: the per-rank tables have no cross-rank
    ids, and an explanation's critical-path walk stops there, at the communication wait.
    """
    from kernels.replay import replay_batch

    graphs = [i.graph for i in instances]
    res = replay_batch(graphs, queue_depth=queue_depth, parallel=len(graphs) > 1)
    parts = []
    for k, inst in enumerate(instances):
        s = res.instance(k)
        n = inst.rank.shape[0]  # the identity replay's anchor task is left out
        crit = s.crit_src[:n].astype(np.int64)
        # ids past n (the identity replay's anchor) stay as they are
        inside = (crit >= 0) & (crit < n)
        src = np.clip(crit, 0, n - 1)
        crit = np.where(inside, inst.local_task[src], crit)
        crit = np.where(inside & (inst.rank[src] != inst.rank), -1, crit)
        parts.append(
            pa.table(
                {
                    "job": pa.repeat(pa.scalar(job, pa.string()), n),
                    "rank": pa.array(inst.rank.astype(np.int32)),
                    "mode": pa.repeat(pa.scalar(inst.mode, pa.string()), n),
                    "task": pa.array(inst.local_task),
                    "start_ns": pa.array(s.start_ns[:n]),
                    "end_ns": pa.array(s.end_ns[:n]),
                    "crit_kind": pa.array(s.crit_kind[:n].astype(np.int8)),
                    "crit_src": pa.array(crit),
                },
                schema=SCHED_SCHEMA,
            )
        )
    sched = pa.concat_tables(parts) if parts else SCHED_SCHEMA.empty_table()
    con.register("g_sched", sched)
    return sched


def replay_job(
    con,  # noqa: ANN001
    job: str,
    *,
    modes: Sequence[str] = MODES,
    drop: Collection[str] = (),
    collectives: pa.Table | None = None,
    ranks: Collection[int] | None = None,
) -> JobReplay:
    """Build, replay and score one job on an open catalog connection (nothing written).

    `collectives` (the job's `build_collectives` table) enables the `multirank` mode; `ranks`
    limits it to those ranks' files."""
    consts = build_tables(con, job, ranks)
    instances = rank_graphs(con, consts, modes=modes, drop=drop, collectives=collectives)
    # one depth per batch: off for the whole job if any device's trace contradicts the rule
    depths = [c.queue_depth for c in consts]
    q = 0 if "queue" in drop or 0 in depths else max(depths, default=1024)
    out = JobReplay(job, constants=consts, queue_depth=q)
    if instances:
        sched = replay_graphs(con, job, instances, q)
        out.tables["schedules"] = sched
        con.execute(lumos_sql.load("replay/iteration_replay"))
    else:
        out.tables["schedules"] = SCHED_SCHEMA.empty_table()
        con.register("g_sched", out.tables["schedules"])
        con.execute(lumos_sql.load("replay/iteration_replay"))
    for name in SQL_TABLES:
        sql = lumos_sql.load("replay/quality") if name == "replay_quality" else f"FROM {name}"
        out.tables[name] = _conform(con.sql(sql).to_arrow_table(), TABLES[name], name)
    return out


# the tables the SQL derives, each cast to its schema in warehouse.schema.TABLES
SQL_TABLES = ("iterations", "tasks", "deps", "kernels", "iteration_replay", "replay_quality")


def _conform(table: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """The SQL's result as the registered schema: the columns it names, in its order and types
    (a column the SQL stopped producing is an error here, not a silent change of the table)."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise RuntimeError(f"lumos_sql for table {name!r} no longer yields {missing}")
    return table.select(schema.names).cast(schema)


def job_collectives(warehouse: str | os.PathLike[str], con, job: str) -> pa.Table | None:  # noqa: ANN001
    """The matched collectives of a job with several ranks (None for a single-rank job)."""
    n = con.execute(lumos_sql.load("replay/n_ranks"), {"job": job}).fetchall()[0][0]
    if n < 2:
        return None
    from lumos.replay.collectives import build_collectives

    return build_collectives(warehouse, job, write=False)


def list_jobs(con) -> list[str]:  # noqa: ANN001
    return [r[0] for r in con.execute(lumos_sql.load("replay/jobs")).fetchall()]


def resolve_jobs(con, jobs: Sequence[str] | None, root: Path | str) -> list[str]:  # noqa: ANN001
    """`jobs` (default: every job with an ingested trace); ValueError naming any unknown one."""
    known = list_jobs(con)
    todo = list(jobs) if jobs else known
    have = set(known)
    missing = [j for j in todo if j not in have]
    if missing:
        why = "; ".join(no_trace_message(con, j, sorted(known)) for j in missing)
        raise ValueError(f"{root}: {why}")
    return todo


def write_job(warehouse: str | os.PathLike[str], result: JobReplay) -> list[Path]:
    """Write a job's result tables (each atomically) and return their paths."""
    layout = Layout.at(warehouse)
    paths = []
    for name, table in result.tables.items():
        target = layout.root / name / f"job={encode_job(result.job)}" / "part.parquet"
        write_parquet_atomic(table, target)
        paths.append(target)
    return paths


def replay_and_write(
    warehouse: str | os.PathLike[str],
    con,  # noqa: ANN001
    job: str,
    *,
    write: bool = True,
) -> JobReplay:
    """Replay one job on an open catalog connection and (by default) write its result tables and,
    for a multi-rank job, its matched collectives. The caller rebuilds the catalog: `con` still
    reads it."""
    coll = job_collectives(warehouse, con, job)
    res = replay_job(con, job, collectives=coll)
    if coll is not None:
        res.n_collectives = coll.num_rows
        res.n_unmatched = coll.column("status").to_pylist().count("unmatched")
    if write:
        write_job(warehouse, res)
        if coll is not None:
            from lumos.replay.collectives import write_collectives

            write_collectives(warehouse, job, coll, catalog=False)
    return res


def run(
    warehouse: str | os.PathLike[str] | None = None,
    jobs: Sequence[str] | None = None,
    *,
    write: bool = True,
) -> list[JobReplay]:
    """Replay `jobs` (default: every job with an ingested trace) of the warehouse; the first
    failure raises. Every job's tables stay in memory: this is for a few jobs (tests, notebooks);
    `lumos.replay.fleet` replays a fleet one job at a time and records failures per job."""

    from warehouse.handle import WarehouseHandle

    wh = WarehouseHandle.open(warehouse)
    con = catalog_connect(str(wh.catalog))
    try:
        todo = resolve_jobs(con, jobs, wh.root)
        return [replay_and_write(wh.root, con, job, write=write) for job in todo]
    finally:
        con.close()
