"""Run a sub-command on a local warehouse: the directory itself, or an S3 warehouse's local
mirror of its latest version (`warehouse.lake_local`), whose new result files are committed back
as one Delta commit when the command ends. The commands whose code reads a warehouse by its
paths (estimate, sweep, describe, explain, export, report) take an `s3://` one this way."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = ["on_local_warehouse"]

Run = Callable[[argparse.Namespace], int]


def on_local_warehouse(command: str, run: Run) -> Run:
    """`run` with `args.warehouse` a local directory; a missing warehouse or a bad URI is one
    line naming `lumos <command>`, exit 2."""

    def wrapped(args: argparse.Namespace) -> int:
        from warehouse.lake_local import local_warehouse_for
        from warehouse.location import WarehouseLocationError

        try:
            with local_warehouse_for(args.warehouse) as local:
                args.warehouse = local
                return run(args)
        except (FileNotFoundError, WarehouseLocationError) as exc:  # no warehouse, bad URI
            print(f"lumos {command}: {exc}", file=sys.stderr)
            return 2

    return wrapped
