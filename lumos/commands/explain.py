"""`lumos explain`: where each iteration's time went and what bounded it (measured and replayed).

Computes the job's explanation tables (breakdown, sm_utilization, critical_path,
critical_path_summary; see lumos/explain/) from its replay tables, writes them to the warehouse
and prints them per rank and step.
"""

from __future__ import annotations

import argparse
import sys

from lumos.commands.local import on_local_warehouse
from lumos.commands.options import add_warehouse, job_name


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "explain",
        help="break a replayed job's iterations into compute/communication/idle and show what "
        "bounded them (writes the explanation tables)",
    )
    p.add_argument("--job", type=job_name, required=True, help="a job replayed with `lumos replay`")
    p.add_argument("--rank", type=int, default=None, help="only this rank (default: all)")
    p.add_argument("--step", type=int, default=None, help="only this step (default: all)")
    add_warehouse(p)
    p.set_defaults(func=on_local_warehouse("explain", _run_local))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f}"


def _run_local(args: argparse.Namespace) -> int:
    """The command on a local warehouse (an S3 one's mirror)."""
    from lumos.api import Warehouse, WarehouseNotFound
    from lumos.explain.inputs import ExplainInputError
    from lumos.explain.run import explain_job

    try:
        wh = Warehouse.open(args.warehouse)
        tables = explain_job(wh.root, args.job)
    except (WarehouseNotFound, ExplainInputError) as exc:
        print(f"lumos explain: {exc}", file=sys.stderr)
        return 2

    def keep(r: dict) -> bool:
        return (args.rank is None or r["rank"] == args.rank) and (
            args.step is None or r["step"] == args.step
        )

    bd = [r for r in tables["breakdown"].to_pylist() if keep(r)]
    util: dict[tuple, list[float]] = {}
    for r in tables["sm_utilization"].to_pylist():
        if keep(r):
            util.setdefault((r["rank"], r["step"], r["mode"]), []).append(r["busy_share"])
    crit: dict[tuple, list[dict]] = {}
    for r in tables["critical_path_summary"].to_pylist():
        if keep(r):
            crit.setdefault((r["rank"], r["step"], r["mode"]), []).append(r)
    if not bd and not crit:
        if args.rank is None and args.step is None:
            print(
                f"lumos explain: job {args.job!r} has no iteration to explain (no CPU "
                "operation in its trace)",
                file=sys.stderr,
            )
        else:
            print(
                f"lumos explain: job {args.job!r} has no step matching rank={args.rank} "
                f"step={args.step}",
                file=sys.stderr,
            )
        return 2
    if bd:
        _print_breakdown(args.job, bd, util)
    else:
        print(f"job {args.job}: no GPU work in its steps (CPU only): no GPU span breakdown")
    print()
    print("critical path of the replayed step (share of first start .. last end of its tasks)")
    for key in sorted(crit):
        rank, step, mode = key
        rows = sorted(crit[key], key=lambda r: -r["ns"])
        win = rows[0]["window_end_ns"] - rows[0]["window_start_ns"]
        parts = ", ".join(f"{r['category']} {100 * r['share']:.1f}%" for r in rows if r["ns"] > 0)
        print(
            f"{rank:>4} {step:>6} {mode:<9} {_ms(win):>9} ms, {rows[0]['n_nodes']} nodes: {parts}"
        )
    return 0


def _print_breakdown(job: str, bd: list[dict], util: dict[tuple, list[float]]) -> None:
    print(f"job {job}: GPU span breakdown (ms; % of span) and mean SM utilisation")
    print(
        f"{'rank':>4} {'step':>6} {'mode':<9} {'span':>9} {'exp.comp':>15} {'overlap':>15} "
        f"{'exp.comm':>15} {'idle':>15} {'of it ext.wait':>15} {'SM util':>8} flags"
    )
    for r in sorted(bd, key=lambda r: (r["rank"], r["step"], r["mode"])):
        span = max(r["span_ns"], 1)
        cells = [
            f"{_ms(r[k])} ({100 * r[k] / span:4.1f}%)".rjust(15)
            for k in ("exposed_compute_ns", "overlapped_ns", "exposed_comm_ns", "idle_ns")
        ]
        # the part of idle in measured external waits (none in tables written before it)
        wait = r.get("ext_wait_ns") or 0
        cells.append(f"{_ms(wait)} ({100 * wait / span:4.1f}%)".rjust(15))
        u = util.get((r["rank"], r["step"], r["mode"]), [])
        flags = ",".join(f for f in ("warmup", "truncated") if r[f])
        print(
            f"{r['rank']:>4} {r['step']:>6} {r['mode']:<9} {_ms(r['span_ns']):>9} "
            f"{' '.join(cells)} {100 * sum(u) / max(len(u), 1):7.1f}% {flags}"
        )
