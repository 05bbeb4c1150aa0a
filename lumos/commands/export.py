"""`lumos export`: one replayed iteration as a Chrome-trace file (opens in ui.perfetto.dev)."""

from __future__ import annotations

import argparse
import sys

from lumos.commands.local import on_local_warehouse
from lumos.commands.options import add_warehouse, job_name


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="write one replayed step of a rank as Chrome-trace JSON (gzip) for ui.perfetto.dev",
    )
    p.add_argument("--job", type=job_name, required=True, help="a job replayed with `lumos replay`")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--step", type=int, required=True, help="profiler step number (ProfilerStep#N)")
    p.add_argument(
        "--mode",
        default="model",
        choices=("model", "identity", "measured"),
        help="replayed times (model, identity) or the trace's own (default: model)",
    )
    p.add_argument("--out", required=True, help="output file (.json.gz or .json)")
    add_warehouse(p)
    p.set_defaults(func=on_local_warehouse("export", _run_local))


def _run_local(args: argparse.Namespace) -> int:
    """The command on a local warehouse (an S3 one's mirror)."""
    from lumos.api import Warehouse, WarehouseNotFound
    from lumos.explain.inputs import ExplainInputError, load_job
    from lumos.export.chrome_trace import ExportError, trace_events, write_trace

    try:
        wh = Warehouse.open(args.warehouse)
        trace = trace_events(load_job(wh.root, args.job), args.rank, args.step, args.mode)
    except (WarehouseNotFound, ExplainInputError, ExportError) as exc:
        print(f"lumos export: {exc}", file=sys.stderr)
        return 2
    path = write_trace(trace, args.out)
    ev = trace["traceEvents"]
    n_x = sum(1 for e in ev if e["ph"] == "X")
    n_f = sum(1 for e in ev if e["ph"] == "s")
    print(
        f"wrote {path}: {n_x} tasks, {n_f} dependency arrows ({args.mode} replay of job "
        f"{args.job} rank {args.rank} step {args.step}); open it in https://ui.perfetto.dev"
    )
    return 0
