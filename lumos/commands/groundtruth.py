"""`lumos groundtruth run`: profile real GPT training runs on the CPU, one job directory per
configuration (issue 4). Needs the `train` extra (torch)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "groundtruth",
        help="run profiled GPT training on the CPU to produce ground-truth traces",
        description="Ground truth: real profiled training runs (needs torch: pip install -e .[train]).",
    )
    sub = parser.add_subparsers(dest="groundtruth_command", metavar="SUBCOMMAND")
    run = sub.add_parser(
        "run",
        help="run a grid of configurations",
        description="Run every configuration of a grid file (or the small default grid) as real "
        "rank processes over gloo on loopback, and write OUT/<name>/ with one Kineto trace per "
        "rank and measured.json.",
    )
    run.add_argument("--grid", type=Path, help="grid YAML file (default: a small built-in grid)")
    run.add_argument("--out", type=Path, required=True, help="output directory")
    run.add_argument("--repeat", type=int, help="traced steps: fresh profiler cycles per run")
    run.add_argument("--steps", type=int, help="unprofiled timed steps per run")
    run.add_argument("--warmup", type=int, help="untimed steps before anything is measured")
    run.add_argument("--threads", type=int, help="intra-op threads per rank process")
    run.add_argument(
        "--layout",
        choices=("merged", "cycles"),
        default="merged",
        help="merged: one trace per rank holding every traced step (default); cycles: the "
        "profiler's own files, one job directory per cycle",
    )
    run.add_argument("--only", nargs="+", metavar="NAME", help="run only these configurations")
    run.set_defaults(func=_run)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _run(args: argparse.Namespace) -> int:
    from lumos.groundtruth.config import ConfigError, default_grid, load_grid

    try:
        grid = load_grid(args.grid) if args.grid else default_grid()
        overrides = {
            k: getattr(args, k)
            for k in ("repeat", "steps", "warmup", "threads")
            if getattr(args, k) is not None
        }
        control = dataclasses.replace(grid.control, **overrides).validate("command line")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runs = list(grid.runs)
    if args.only:
        missing = sorted(set(args.only) - {r.name for r in runs})
        if missing:
            print(f"error: no configuration named {missing} in the grid", file=sys.stderr)
            return 2
        runs = [r for r in runs if r.name in args.only]
    try:
        import torch  # noqa: F401
    except ImportError:
        print("error: torch is not installed; pip install -e '.[train]'", file=sys.stderr)
        return 2
    from lumos.groundtruth.runner import RunFailed, run_grid

    print(f"{len(runs)} configuration(s) into {args.out} ({control})", file=sys.stderr)
    try:
        run_grid(runs, control, args.out, args.layout, log=lambda m: print(m, file=sys.stderr))
    except RunFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
