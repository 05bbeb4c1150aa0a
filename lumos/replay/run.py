"""Drive a job's replay: SQL graph tables -> numba replay -> result tables in the warehouse.

For each job: run `lumos_sql/graph/*.sql` on the catalog (read-only; temp tables only), estimate
the constants (`lumos.replay.constants`), replay every rank in `model` and `identity` mode in one
batched kernel call, compute `iteration_replay` with `lumos_sql/replay/iteration_replay.sql`, and
write `iterations`, `tasks`, `deps`, `kernels`, `schedules`, `iteration_replay`, `replay_quality`
as `<wh>/<table>/job=<enc>/part.parquet` (temp file + rename). Single-rank: each rank is its own
graph; a multi-rank mode can add collective participants to the per-job graph before `_replay`
(see `replay_job(..., graphs_hook=...)`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

import lumos_sql
from lumos.replay.build import build_graph
from lumos.replay.constants import DeviceConstants, estimate, to_arrow
from warehouse.layout import Layout, encode_job, write_parquet_atomic
from warehouse.schema import ITERATION_REPLAY, SCHEDULES

GRAPH_SCRIPTS = ("base", "constants")
GRAPH_SCRIPTS_AFTER_CONST = ("iterations", "tasks", "deps", "kernels", "slack")
RESULT_TABLES = ("iterations", "tasks", "deps", "kernels", "schedules", "iteration_replay")

SCHED_SCHEMA = SCHEDULES


@dataclass
class JobReplay:
    """What one job's replay produced (Arrow tables, as written)."""

    job: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    constants: list[DeviceConstants] = field(default_factory=list)
    queue_depth: int = 0


def _script(con, name: str) -> None:  # noqa: ANN001
    con.execute(lumos_sql.load(f"graph/{name}"))


def build_tables(con, job: str) -> list[DeviceConstants]:  # noqa: ANN001
    """Create the temp tables iterations/tasks/deps/kernels/g_slack of `job` on `con`."""
    con.execute(lumos_sql.load("graph/events"), {"job": job})
    for name in GRAPH_SCRIPTS:
        _script(con, name)
    raw = con.sql("SELECT * FROM g_const_raw").to_arrow_table().to_pylist()
    consts = estimate(raw)
    con.register("g_const_in", to_arrow(consts))
    _script(con, "const_table")
    con.unregister("g_const_in")
    for name in GRAPH_SCRIPTS_AFTER_CONST:
        _script(con, name)
    return consts


def rank_graphs(
    con,  # noqa: ANN001
    consts: list[DeviceConstants],
    *,
    modes: Sequence[str] = ("model", "identity"),
    drop: Collection[str] = (),
) -> tuple[list[tuple[int, str]], list]:
    """(rank, mode) keys and their graphs, from the temp tables on `con`."""
    tasks = con.sql("SELECT * FROM tasks ORDER BY rank, task").to_arrow_table()
    deps = con.sql("SELECT * FROM deps ORDER BY rank, dst, src").to_arrow_table()
    ranks = sorted(set(tasks.column("rank").to_pylist()))
    t_rank = tasks.column("rank").to_numpy()
    d_rank = deps.column("rank").to_numpy()
    job = tasks.column("job")[0].as_py() if tasks.num_rows else ""
    keys, graphs = [], []
    for r in ranks:
        t = tasks.filter(pa.array(t_rank == r))
        d = deps.filter(pa.array(d_rank == r))
        c = [x for x in consts if x.rank == r]
        for mode in modes:
            keys.append((r, mode))
            graphs.append(
                build_graph(t, d, c, mode=mode, drop=drop, source=f"{job} rank {r} ({mode})")
            )
    return keys, graphs


def replay_graphs(
    con,  # noqa: ANN001
    job: str,
    keys: list[tuple[int, str]],
    graphs: list,
    queue_depth: int,
) -> pa.Table:
    """Replay the graphs in one batch, register `g_sched` on `con` and return it."""
    from kernels.replay import replay_batch

    res = replay_batch(graphs, queue_depth=queue_depth, parallel=len(graphs) > 1)
    parts = []
    for i, ((rank, mode), g) in enumerate(zip(keys, graphs, strict=True)):
        s = res.instance(i)
        n = g.n_tasks - (1 if mode == "identity" else 0)
        parts.append(
            pa.table(
                {
                    "job": pa.array([job] * n, pa.string()),
                    "rank": pa.array(np.full(n, rank, np.int32)),
                    "mode": pa.array([mode] * n, pa.string()),
                    "task": pa.array(np.arange(n, dtype=np.int64)),
                    "start_ns": pa.array(s.start_ns[:n]),
                    "end_ns": pa.array(s.end_ns[:n]),
                    "crit_kind": pa.array(s.crit_kind[:n].astype(np.int8)),
                    "crit_src": pa.array(s.crit_src[:n].astype(np.int64)),
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
    modes: Sequence[str] = ("model", "identity"),
    drop: Collection[str] = (),
    graphs_hook: Callable[[list, list], None] | None = None,
) -> JobReplay:
    """Build, replay and score one job on an open catalog connection (nothing written)."""
    consts = build_tables(con, job)
    keys, graphs = rank_graphs(con, consts, modes=modes, drop=drop)
    if graphs_hook is not None:
        graphs_hook(keys, graphs)
    q = 0 if "queue" in drop else max([c.queue_depth for c in consts], default=1024)
    out = JobReplay(job, constants=consts, queue_depth=q)
    if graphs:
        out.tables["schedules"] = replay_graphs(con, job, keys, graphs, q)
        con.execute(lumos_sql.load("replay/iteration_replay"))
    else:
        out.tables["schedules"] = SCHED_SCHEMA.empty_table()
        con.register("g_sched", out.tables["schedules"])
        con.execute(lumos_sql.load("replay/iteration_replay"))
    for name in ("iterations", "tasks", "deps", "kernels", "iteration_replay"):
        out.tables[name] = con.sql(f"SELECT * FROM {name}").to_arrow_table()  # noqa: S608
    out.tables["iteration_replay"] = out.tables["iteration_replay"].cast(ITERATION_REPLAY)
    out.tables["replay_quality"] = con.sql(lumos_sql.load("replay/quality")).to_arrow_table()
    return out


def list_jobs(con) -> list[str]:  # noqa: ANN001
    return [r[0] for r in con.execute(lumos_sql.load("replay/jobs")).fetchall()]


def write_job(warehouse: str | os.PathLike[str], result: JobReplay) -> list[Path]:
    """Write a job's result tables (each atomically) and return their paths."""
    layout = Layout.at(warehouse)
    paths = []
    for name, table in result.tables.items():
        target = layout.root / name / f"job={encode_job(result.job)}" / "part.parquet"
        write_parquet_atomic(table, target)
        paths.append(target)
    return paths


def run(
    warehouse: str | os.PathLike[str] | None = None,
    jobs: Sequence[str] | None = None,
    *,
    write: bool = True,
) -> list[JobReplay]:
    """Replay `jobs` (default: every job with an ingested trace) of the warehouse."""
    import duckdb

    from lumos.api import Warehouse

    wh = Warehouse.open(warehouse)
    con = duckdb.connect(str(wh.catalog), read_only=True)
    try:
        todo = list(jobs) if jobs else list_jobs(con)
        known = set(list_jobs(con))
        missing = [j for j in todo if j not in known]
        if missing:
            raise ValueError(f"{wh.root}: no ingested trace for job(s) {missing}")
        results = []
        for job in todo:
            res = replay_job(con, job)
            if write:
                write_job(wh.root, res)
            results.append(res)
        return results
    finally:
        con.close()
