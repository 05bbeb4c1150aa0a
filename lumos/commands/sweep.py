"""`lumos sweep --job JOB --grid FILE.yaml`: estimate every configuration of a grid (batched
through the numba replay), write them to the `estimates` table and print the best ones (by
tokens per second unless the grid's `order:` or `--order` says otherwise; those that do not fit
the device last)."""

from __future__ import annotations

import argparse
import sys

from lumos.commands.local import on_local_warehouse
from lumos.commands.options import add_host_cores, add_warehouse, job_name, non_negative_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="estimate a grid of configurations of a traced job into the `estimates` table",
        description="Grid file: `base:` (optional overrides of the inferred base), `grid:` "
        "(key: [values], their product is swept; keys as for `lumos estimate --set`, including "
        "speedup.<class>), `constraints:` (optional expressions such as `dp * pp * tp == 8`), "
        "`order:` (optional, as --order). "
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
        help="how many of the best to print (0: none)",
    )
    p.add_argument(
        "--order",
        metavar="COL",
        help="rank the best by this column of `estimates` (tokens_per_s, mfu, predicted_ns, "
        "interval_low_ns, interval_high_ns, memory_bytes), ascending, or descending with a "
        "leading - (write --order=-COL) (default: the grid's order:, else -tokens_per_s); those "
        "that do not fit the device come last either way",
    )
    p.add_argument("--no-write", action="store_true", help="do not write the estimates table")
    p.set_defaults(func=on_local_warehouse("sweep", _run_local))


def _run_local(args: argparse.Namespace) -> int:
    """The command on a local warehouse (an S3 one's mirror)."""
    from lumos.api import Warehouse
    from lumos.estimate.config import ConfigError, parse_overrides
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.store import estimates_table, write_estimates_table
    from lumos.estimate.sweep import (
        DEFAULT_ORDER,
        ORDER_COLUMNS,
        GridError,
        load_grid,
        parse_order,
        rank_rows,
        run_sweep,
    )
    from lumos.estimate.template import TemplateError
    from lumos.estimate.throughput import job_device, mfu_note
    from lumos.estimate.transforms import TransformError

    try:
        order = parse_order(args.order, "--order") if args.order is not None else None
        grid = load_grid(args.grid)
        order = order or grid.order or DEFAULT_ORDER
        est = Estimator.open(
            args.warehouse,
            args.job,
            parse_overrides(args.base, "--base"),
            on_build=_say,
            host_cores=args.host_cores or grid.host_cores,
            host_cores_from="--host-cores" if args.host_cores else "the grid file's host_cores",
        )
        res = run_sweep(est, grid, args.job)
        device = job_device(args.warehouse, args.job)
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
    # the rows as `estimates` holds them, built once: written, then ranked and shown
    table = estimates_table(res.sweep_id, args.job, res.predictions, device=device)
    if n and not args.no_write:
        write_estimates_table(Warehouse.open(args.warehouse), res.sweep_id, args.job, table)
        print(f"wrote {n} rows to estimates (sweep_id = '{res.sweep_id}')")
    keys = list(grid.axes)
    rows = table.select(["fits", *ORDER_COLUMNS]).to_pylist()
    if n and args.top:
        print(
            f"best {min(args.top, n)} by {order.lstrip('-')} "
            f"({'highest' if order.startswith('-') else 'lowest'} first; those that do not fit "
            f"last); MFU {mfu_note(device, any(r['mfu'] is not None for r in rows))}:"
        )
    for i in rank_rows(rows, order)[: args.top]:
        p, row = res.predictions[i], rows[i]
        cfg = p.config.to_dict()
        desc = " ".join(
            f"{k}={cfg[k] if k in cfg else p.speedups.get(k.split('.', 1)[1], 1)}" for k in keys
        )
        lo, hi = p.interval_ns
        fits = {None: "", True: " fits", False: " DOES NOT FIT"}[p.fits]
        tps = f"{row['tokens_per_s']:12,.0f}" if row["tokens_per_s"] is not None else f"{'-':>12}"
        mfu = f"{row['mfu']:6.1%}" if row["mfu"] is not None else f"{'-':>6}"
        print(
            f"  {p.predicted_ns / 1e6:10.3f} ms [{lo / 1e6:.3f}, {hi / 1e6:.3f}]  {tps} tokens/s"
            f"  MFU {mfu}  {p.memory_bytes / 2**20:8.1f} MiB{fits}  {desc}"
        )
    if not n:
        why = "every point was removed by the constraints" if not res.invalid else "see above"
        print(f"lumos sweep: no configuration of the grid was estimated ({why})", file=sys.stderr)
        return 2
    return 0


def _say(what: str) -> None:
    print(f"lumos sweep: {what}...", file=sys.stderr, flush=True)
