"""`lumos sweep --job JOB --grid FILE.yaml`: estimate every configuration of a grid (batched
through the numba replay), write them to the `estimates` table and print the best ones."""

from __future__ import annotations

import argparse
import sys

from lumos.commands.options import add_host_cores, add_warehouse, job_name, non_negative_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="estimate a grid of configurations of a traced job into the `estimates` table",
        description="Grid file: `base:` (optional overrides of the inferred base), `grid:` "
        "(key: [values], their product is swept; keys as for `lumos estimate --set`, including "
        "speedup.<class>), `constraints:` (optional expressions such as `dp * pp * tp == 8`). "
        "Exits 2 on a bad grid file, or when no point of the grid could be estimated.",
    )
    p.add_argument("--job", type=job_name, required=True, help="base job name in the warehouse")
    p.add_argument("--grid", required=True, help="grid file (YAML)")
    add_warehouse(p)
    p.add_argument("--base", nargs="+", action="extend", default=[], metavar="KEY=VALUE")
    add_host_cores(p)
    p.add_argument(
        "--top",
        type=non_negative_int,
        default=10,
        help="how many of the fastest to print (0: none)",
    )
    p.add_argument("--no-write", action="store_true", help="do not write the estimates table")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from lumos.api import Warehouse
    from lumos.estimate.config import ConfigError, parse_overrides
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.layers import TemplateError
    from lumos.estimate.store import write_estimates
    from lumos.estimate.sweep import GridError, load_grid, run_sweep
    from lumos.estimate.transforms import TransformError

    try:
        grid = load_grid(args.grid)
        est = Estimator.open(
            args.warehouse,
            args.job,
            parse_overrides(args.base, "--base"),
            on_build=_say,
            host_cores=args.host_cores or grid.host_cores,
            host_cores_from="--host-cores" if args.host_cores else "the grid file's host_cores",
        )
        res = run_sweep(est, grid, args.job)
    except (GridError, ConfigError, TemplateError, TransformError, LookupError) as exc:
        print(f"lumos sweep: {exc}", file=sys.stderr)
        return 2
    n = len(res.predictions)
    rate = n / res.replay_seconds if res.replay_seconds > 0 else float("inf")
    print(
        f"sweep {res.sweep_id}: {res.n_points} grid points, {res.n_constrained} removed by "
        f"constraints, {len(res.invalid)} invalid, {n} estimated in {res.seconds:.2f} s "
        f"({rate:,.0f} configs/s)"
    )
    for msg in res.invalid[:3]:
        print(f"  invalid: {msg}")
    if n and not args.no_write:
        write_estimates(Warehouse.open(args.warehouse), res.sweep_id, args.job, res.predictions)
        print(f"wrote {n} rows to estimates (sweep_id = '{res.sweep_id}')")
    keys = list(grid.axes)
    best = sorted(res.predictions, key=lambda p: p.predicted_ns)[: args.top]
    for p in best:
        cfg = p.config.to_dict()
        desc = " ".join(
            f"{k}={cfg[k] if k in cfg else p.speedups.get(k.split('.', 1)[1], 1)}" for k in keys
        )
        lo, hi = p.interval_ns
        fits = {None: "", True: " fits", False: " DOES NOT FIT"}[p.fits]
        print(
            f"  {p.predicted_ns / 1e6:10.3f} ms [{lo / 1e6:.3f}, {hi / 1e6:.3f}]  "
            f"{p.memory_bytes / 2**20:8.1f} MiB{fits}  {desc}"
        )
    if not n:
        why = "every point was removed by the constraints" if not res.invalid else "see above"
        print(f"lumos sweep: no configuration of the grid was estimated ({why})", file=sys.stderr)
        return 2
    return 0


def _say(what: str) -> None:
    print(f"lumos sweep: {what}...", file=sys.stderr, flush=True)
