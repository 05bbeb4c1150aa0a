"""`lumos opmodel predict|eval`: operator duration models fitted on the `opbench` table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lumos.commands.options import add_warehouse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "opmodel",
        help="predict operator and collective durations from shapes",
        description="Duration models per device and operator (roofline with fitted rates, a "
        "log-space correction and boosted trees on the residual), fitted on the benchmarks "
        "imported with `lumos opbench import`.",
    )
    sub = parser.add_subparsers(dest="opmodel_command", metavar="SUBCOMMAND")
    pred = sub.add_parser(
        "predict",
        help="fill in forward/backward times for rows of a benchmark-format CSV",
        description="Read FILE.csv (a benchmark file's columns; the operator comes from its name "
        "<GPU>_<operator>_<precision>.csv or --operator), fill in blank duration cells, and "
        "write them with a 5-95% interval per target (<target>_low_us, <target>_high_us) and an "
        "out_of_range flag (shape outside what the model was fitted on).",
    )
    pred.add_argument("--device", required=True, help="device whose benchmarks to fit on")
    pred.add_argument("--in", dest="inp", type=Path, required=True, metavar="FILE.csv")
    pred.add_argument("--out", type=Path, required=True, metavar="FILE.csv")
    pred.add_argument("--operator", help="operator, when the input's file name does not say")
    pred.add_argument("--overwrite", action="store_true", help="replace durations already given")
    add_warehouse(pred, type=Path)
    pred.set_defaults(func=_predict)
    ev = sub.add_parser(
        "eval",
        help="per-operator accuracy on a random 80/20 split, against a fitted roofline",
        description="Fit every operator of DEVICE on a random 80% of its rows and report median "
        "and 90th-percentile relative error on the rest, for the model and for the roofline "
        "with fitted constant rates (the baseline).",
    )
    ev.add_argument("--device", required=True)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--operator", action="append", help="only these operators (repeatable)")
    add_warehouse(ev, type=Path)
    ev.set_defaults(func=_eval)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _predict(args: argparse.Namespace) -> int:
    from lumos.opmodel.fill import predict_file
    from lumos.opmodel.opbench import OpbenchError
    from warehouse.layout import Layout

    wh = Layout.at(args.warehouse).root
    try:
        n = predict_file(
            args.inp,
            args.out,
            device=args.device,
            warehouse=wh,
            operator=args.operator,
            overwrite=args.overwrite,
        )
    except (OpbenchError, FileNotFoundError, KeyError, ValueError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {msg}", file=sys.stderr)
        return 2
    print(f"opmodel: {n} rows predicted → {args.out}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from lumos.opmodel.evaluate import evaluate, format_table
    from lumos.opmodel.store import load_rows
    from warehouse.layout import Layout

    wh = Layout.at(args.warehouse).root
    try:
        rows = load_rows(wh, args.device)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.operator:
        rows = rows[rows["operator"].isin(args.operator)]
    print(format_table(evaluate(rows, args.device, seed=args.seed)))
    return 0
