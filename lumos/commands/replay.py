"""`lumos replay`: rebuild each job's execution graph, replay it, store and print the errors."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay every ingested job (or --job) and print replayed vs measured iterations",
    )
    p.add_argument("--job", action="append", help="job to replay (repeatable; default: all)")
    p.add_argument("--warehouse", default=None, help="warehouse directory ($LUMOS_WAREHOUSE)")
    p.add_argument(
        "--no-explain",
        action="store_true",
        help="skip the explanation tables (breakdown, SM utilisation, critical path)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from lumos.api import Warehouse, WarehouseNotFound
    from lumos.explain.run import explain_job
    from lumos.replay.run import run
    from warehouse.catalog import build_catalog

    failures: dict[str, str] = {}
    try:
        results = run(args.warehouse, args.job, failures=failures)
    except (WarehouseNotFound, ValueError) as exc:
        print(f"lumos replay: {exc}", file=sys.stderr)
        return 2
    root = Warehouse.open(args.warehouse).root
    if not args.no_explain:
        for res in results:
            explain_job(root, res.job)
    # The result tables are new folders: give them views in the catalog.
    build_catalog(root)
    print(
        f"{'job':<24} {'rank':>4} {'metric':<9} {'steps':>5} {'model med/max %':>16} "
        f"{'identity med/max %':>19} {'slack ms':>9}"
    )
    for res in results:
        q = res.tables["replay_quality"].to_pylist()
        by = {(r["rank"], r["metric"], r["mode"]): r for r in q}
        for rank, metric, mode in sorted(by):
            if mode != "model":
                continue
            m = by[(rank, metric, "model")]
            i = by.get((rank, metric, "identity"))
            ident = (
                f"{100 * i['median_rel_error']:.2f}/{100 * i['max_rel_error']:.2f}" if i else "-"
            )
            slack = (m["unexplained_slack_ns"] or 0) / 1e6
            print(
                f"{res.job:<24} {rank:>4} {metric:<9} {m['n_steps']:>5} "
                f"{100 * m['median_rel_error']:>7.2f}/{100 * m['max_rel_error']:<8.2f} "
                f"{ident:>19} {slack:>9.2f}"
            )
    for res in results:
        why = _nothing_scored(res)
        if why:
            print(f"lumos replay: job {res.job!r}: {why}", file=sys.stderr)
    for job, message in sorted(failures.items()):
        print(f"lumos replay: job {job!r} could not be replayed: {message}", file=sys.stderr)
    return 1 if failures else 0


def _nothing_scored(res) -> str | None:  # noqa: ANN001
    """Why a replayed job has no row in the table above (None when it has some)."""
    if res.tables["replay_quality"].num_rows:
        return None
    it = res.tables["iterations"]
    if it.num_rows == 0:
        return (
            "no ProfilerStep#N span in its trace, so there is no iteration to replay; "
            "profile with torch.profiler.schedule and call prof.step() every iteration"
        )
    return (
        f"all {it.num_rows} traced step(s) are warm-up or truncated, so none is scored "
        "(the first traced step is warm-up; profile a few more steps)"
    )
