"""`lumos status [--warehouse DIR]`: what the warehouse holds."""

from __future__ import annotations

import argparse
import sys

from lumos.commands.options import add_warehouse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "status",
        help="show what the warehouse holds",
        description="Show the warehouse's jobs with their ranks, files ok / refused, events, "
        "bytes, devices and where their replay stands (ok, failed, stale: files or lumos "
        "changed, none), and list refused files with the reason.",
    )
    add_warehouse(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from lumos.api import Warehouse, WarehouseNotFound

    try:
        wh = Warehouse.open(args.warehouse, object_store=True)
    except WarehouseNotFound as exc:
        print(f"lumos status: {exc}", file=sys.stderr)
        return 2
    status = wh.status()
    print(f"warehouse {wh.root}")
    jobs = status["jobs"]
    if jobs.empty:
        print("no traces yet: lumos ingest PATH...")
        return 0
    with pd.option_context(
        "display.max_rows", 500, "display.max_columns", None, "display.width", 200
    ):
        print(jobs.to_string(index=False))
    t = status["totals"]
    print(
        f"\n{t['jobs']} job(s), {t['files_ok']} file(s) ok, {t['files_refused']} refused, "
        f"{t['events']:,} events from {t['bytes'] / 1e6:,.1f} MB of traces"
    )
    refused = status["refused"]
    if not refused.empty:
        print("\nrefused:")
        for row in refused.itertuples(index=False):
            print(f"  {row.error}")
    return 0
