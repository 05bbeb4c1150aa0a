"""End-to-end benchmark: lumos graph build + replay + critical path vs HTA's critical path (issue 3
item 7, second half). Not run in CI.

Run: ``NUMBA_CACHE_DIR=.numba_cache .venv/bin/python bench/replay_e2e.py [--trace F] [--runs K]``
(needs the `bench` extra: ``pip install -e '.[bench]'``, holistictraceanalysis 0.5.0).

On the largest shared trace (df_index_resolver: 216k events, 5 steps, rank 1), in one run:

* lumos: the trace is ingested once into a temporary warehouse (not timed in the ratio; printed).
  Timed: `lumos.replay.run.replay_job` (SQL graph build, constants, array build, numba replay of
  the model and identity modes, iteration_replay) + `lumos.explain` (breakdown, SM utilisation and
  the critical path of every step, as tables).
* HTA: `TraceAnalysis(trace_dir)` parses the trace once (not timed in the ratio; printed). Timed:
  `critical_path_analysis(rank, "ProfilerStep", (first, last))` over all steps, the same scope.

Each side: median of ``--runs`` runs of wall time and of CPU time (the process's, all threads)
after one warm-up run (numba compiled and cached, Python imports done). Both are single-process;
the ratios are HTA / lumos. On a shared, loaded machine read the CPU ratio: lumos's DuckDB and
numba use both cores and lose more wall time to other jobs than single-threaded HTA does.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2]
    / "shared/traces/hta/df_index_resolver/df_index_resolver.json.gz"
)


def _median(
    fn: Callable[[], object], runs: int
) -> tuple[float, list[float], object, float, list[float]]:
    """Median wall time, the wall times, the last result, median CPU time, the CPU times.

    CPU time (this process, all threads) is the fair figure when other jobs share the cores:
    wall time then measures the machine's load as much as the code."""
    fn()  # warm-up
    times, cpus, out = [], [], None
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(times), times, out, statistics.median(cpus), cpus


def lumos_side(trace: Path, work: Path, runs: int) -> dict:
    import duckdb

    from lumos.explain.inputs import from_tables
    from lumos.explain.run import explain
    from lumos.replay.run import replay_job
    from warehouse.ingest import ingest

    wh = work / "wh"
    t0 = time.perf_counter()
    ingest([trace], warehouse=wh, job="bench")
    t_ingest = time.perf_counter() - t0
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)

    def once() -> dict:
        res = replay_job(con, "bench")
        tables = explain(from_tables("bench", res.tables))
        return {"tasks": res.tables["tasks"].num_rows, "tables": tables, "res": res}

    try:
        med, times, out, cpu, cpus = _median(once, runs)
    finally:
        con.close()
    return {
        "ingest_s": t_ingest,
        "median_s": med,
        "times": times,
        "cpu_s": cpu,
        "cpus": cpus,
        **out,
    }


def hta_side(trace: Path, work: Path, runs: int, rank: int) -> dict:
    logging.disable(logging.WARNING)  # HTA logs every step at INFO/WARNING
    from hta.trace_analysis import TraceAnalysis

    d = work / "hta"
    d.mkdir()
    shutil.copy(trace, d / trace.name)
    t0 = time.perf_counter()
    ta = TraceAnalysis(trace_dir=str(d))
    t_parse = time.perf_counter() - t0
    n_steps = _n_profiler_steps(ta, rank)

    def once() -> tuple:
        return ta.critical_path_analysis(rank, "ProfilerStep", (0, n_steps - 1))

    med, times, (cp_graph, ok), cpu, cpus = _median(once, runs)
    return {
        "parse_s": t_parse,
        "median_s": med,
        "times": times,
        "cpu_s": cpu,
        "cpus": cpus,
        "ok": ok,
        "nodes": cp_graph.number_of_nodes(),
        "edges": cp_graph.number_of_edges(),
        "n_steps": n_steps,
    }


def _n_profiler_steps(ta, rank: int) -> int:  # noqa: ANN001
    df = ta.t.get_trace(rank)
    sym = ta.t.symbol_table.get_sym_table()
    names = df["name"].map(lambda i: sym[i] if 0 <= i < len(sym) else "")
    return int(names.str.startswith("ProfilerStep#").sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--rank", type=int, default=1, help="the trace's rank (df_index_resolver: 1)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not args.trace.is_file():
        raise SystemExit(f"{args.trace}: no such trace (pass --trace)")
    with tempfile.TemporaryDirectory(prefix="lumos-e2e-") as tmp:
        work = Path(tmp)
        lum = lumos_side(args.trace, work, args.runs)
        hta = hta_side(args.trace, work, args.runs, args.rank)
    model = [
        r
        for r in lum["res"].tables["replay_quality"].to_pylist()
        if r["mode"] == "model" and r["metric"] == "cpu_step"
    ]
    cp = lum["tables"]["critical_path"]
    print(
        f"trace {args.trace.name}: {lum['tasks']:,} tasks in lumos's graph, {hta['n_steps']} steps"
    )
    print(
        f"lumos  ingest {lum['ingest_s']:.2f} s (once); build + replay (2 modes) + explain: "
        f"median {lum['median_s']:.3f} s of {[round(t, 3) for t in lum['times']]}; "
        f"{cp.num_rows:,} critical-path nodes"
        + (f"; model cpu_step error med {100 * model[0]['median_rel_error']:.2f}%" if model else "")
    )
    print(
        f"HTA    parse {hta['parse_s']:.2f} s (once); critical_path_analysis over steps "
        f"0..{hta['n_steps'] - 1}: median {hta['median_s']:.3f} s of "
        f"{[round(t, 3) for t in hta['times']]}; graph {hta['nodes']:,} nodes, "
        f"{hta['edges']:,} edges, success={hta['ok']}"
    )
    print(
        f"CPU time (both sides, medians): lumos {lum['cpu_s']:.3f} s of "
        f"{[round(t, 3) for t in lum['cpus']]}; HTA {hta['cpu_s']:.3f} s of "
        f"{[round(t, 3) for t in hta['cpus']]}"
    )
    print(
        f"ratio HTA critical path / lumos build+replay+explain: wall "
        f"{hta['median_s'] / lum['median_s']:.1f}x, CPU {hta['cpu_s'] / lum['cpu_s']:.1f}x  "
        f"(target >= 20x)"
    )
    print(
        f"ratio incl. parsing (HTA parse + CP) / (lumos ingest + build+replay+explain): "
        f"{(hta['parse_s'] + hta['median_s']) / (lum['ingest_s'] + lum['median_s']):.1f}x"
    )


if __name__ == "__main__":
    main()
