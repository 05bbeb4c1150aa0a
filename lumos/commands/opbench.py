"""`lumos opbench import DIR --device NAME`: load operator/collective micro-benchmarks into the
warehouse table `opbench` (the format of `../shared/opbench`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lumos.commands.options import add_warehouse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "opbench",
        help="import operator and collective micro-benchmarks",
        description="Operator and collective micro-benchmarks (CSV files in the estimate-train-time "
        "format) stored in the warehouse table `opbench`, where `lumos opmodel` fits on them.",
    )
    sub = parser.add_subparsers(dest="opbench_command", metavar="SUBCOMMAND")
    imp = sub.add_parser(
        "import",
        help="import a folder of benchmark CSVs for one device",
        description="Read every <GPU>_<operator>_<precision>[_<N>_<G>].csv under DIR (operator/ "
        "and nccl/ sub-folders) and store it for DEVICE. Re-importing identical files writes "
        "nothing; a bad file stops the import before anything is written.",
    )
    imp.add_argument("dir", type=Path, metavar="DIR", help="folder of benchmark CSV files")
    imp.add_argument("--device", required=True, help="device name, e.g. a100-80gb or H100")
    add_warehouse(imp, type=Path)
    imp.set_defaults(func=_import)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _import(args: argparse.Namespace) -> int:
    from lumos.opmodel.opbench import OpbenchError
    from lumos.opmodel.store import import_dir
    from warehouse.layout import Layout

    wh = Layout.at(args.warehouse).root
    try:
        result = import_dir(args.dir, args.device, wh)
    except (OpbenchError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"opbench: {len(result.written)} file(s) written, {len(result.unchanged)} unchanged, "
        f"{result.rows} rows for device {args.device} in {wh}"
    )
    return 0
