"""`lumos groundtruth run`: profile real GPT training runs on the CPU, one job directory per
configuration (needs the `train` extra, torch). `lumos groundtruth spread DIR`: the
noise floor of each configuration. `lumos groundtruth accuracy DIR --base NAME`: predict every
configuration of a corpus from one base job and compare with its median traced step."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from lumos.commands.options import add_warehouse


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
    spread = sub.add_parser(
        "spread",
        help="the noise floor: spread of each configuration's steps",
        description="For every job folder of DIR (with a measured.json): n, min, median, max and "
        "coefficient of variation of its traced steps (the ProfilerStep wall time, slowest rank) "
        "and of its unprofiled steps.",
    )
    spread.add_argument("dir", type=Path, metavar="DIR", help="output of `groundtruth run`")
    spread.set_defaults(func=_spread)
    acc = sub.add_parser(
        "accuracy",
        help="predict every configuration of a corpus from one base and compare",
        description="Ingest DIR's jobs into the warehouse (if not there yet), predict every "
        "configuration from the base job's trace, and print predicted vs the median traced "
        "step with the run's own spread. Collective costs and contention are learned from the "
        "warehouse without the job being predicted; with --no-calibration, from nothing but the base's "
        "trace and the host prior (what a user with a single trace gets).",
    )
    acc.add_argument("dir", type=Path, metavar="DIR", help="output of `groundtruth run`")
    acc.add_argument("--base", default="base", help="the base job's folder name (default base)")
    add_warehouse(acc, type=Path)
    acc.add_argument(
        "--no-calibration",
        "--no-fleet",  # its former name
        dest="calibration",
        action="store_false",
        help="learn from the base job alone (no calibration jobs: every other job of the "
        "warehouse left out)",
    )
    acc.set_defaults(func=_accuracy)
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


def _spread(args: argparse.Namespace) -> int:
    from lumos.estimate.accuracy import corpus_jobs, measured

    if not args.dir.is_dir():
        print(f"error: {args.dir}: not a directory", file=sys.stderr)
        return 2
    jobs = corpus_jobs(args.dir)
    if not jobs:
        print(f"error: {args.dir}: no job folder with a measured.json", file=sys.stderr)
        return 2
    print(
        f"{'config':>22} {'n':>3} {'min ms':>8} {'median':>8} {'max ms':>8} {'cv %':>6}  unprofiled median (cv %)"
    )
    for job in jobs:
        try:
            m = measured(job)
            t, u = m["traced"]["step"], m["unprofiled"]["step"]
        except (ValueError, KeyError) as exc:
            print(f"error: {job}: {exc}", file=sys.stderr)
            return 1
        print(
            f"{job.name:>22} {t['n']:>3} {t['min'] / 1e6:8.2f} {t['median'] / 1e6:8.2f} "
            f"{t['max'] / 1e6:8.2f} {100 * t['cv']:6.1f}  {u['median'] / 1e6:8.2f} "
            f"({100 * u['cv']:.1f})"
        )
    return 0


def _accuracy(args: argparse.Namespace) -> int:
    from lumos.estimate.accuracy import corpus_accuracy

    try:
        rows = corpus_accuracy(
            args.dir, args.warehouse, base=args.base, calibration=args.calibration
        )
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"from {args.base}" + ("" if args.calibration else " alone (no calibration jobs)") + ":")
    print(f"{'config':>22} {'predicted':>10} {'measured':>10} {'error':>8} {'cv':>6}  in interval")
    for r in rows:
        print(
            f"{r['config']:>22} {r['predicted_ms']:8.2f}ms {r['measured_ms']:8.2f}ms "
            f"{r['error_pct']:+7.1f}% {r['cv_pct']:5.1f}%  {'yes' if r['in_interval'] else 'no'}"
        )
    errors = [abs(r["error_pct"]) for r in rows if r["config"] != args.base]
    if errors:
        print(
            f"mean |error| {sum(errors) / len(errors):.1f}%, max {max(errors):.1f}% "
            f"over {len(errors)} configuration(s) other than the base"
        )
    return 0
