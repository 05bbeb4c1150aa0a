"""`lumos report --job JOB | --fleet [--out FILE.html] [--png DIR]`: a self-contained HTML report
(opens offline) of one job or of the whole fleet, and its figures as PNG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lumos.commands.local import on_local_warehouse
from lumos.commands.options import add_warehouse, job_name


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write an HTML report (one file, opens offline) of a job or of the fleet, and its "
        "figures as PNG",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", type=job_name, help="a job: steps, breakdown, critical path, "
                       "configuration, sweeps, Perfetto exports")  # fmt: skip
    which.add_argument("--fleet", action="store_true", help="every job: replay error, estimates "
                       "vs measured, ingest health")  # fmt: skip
    p.add_argument("--out", default=None, metavar="FILE.html",
                   help="output file (default: report-<job>.html or report-fleet.html)")  # fmt: skip
    p.add_argument("--png", default=None, metavar="DIR", help="also write each figure as PNG here")
    p.add_argument("--no-perfetto", action="store_true",
                   help="job report: do not write the steps' Perfetto exports beside it")  # fmt: skip
    add_warehouse(p)
    p.set_defaults(func=on_local_warehouse("report", _run_local))


def _run_local(args: argparse.Namespace) -> int:
    """The command on a local warehouse (an S3 one's mirror)."""
    from lumos.api import Warehouse, WarehouseNotFound
    from lumos.report.files import safe_name, write_fleet_report, write_job_report
    from lumos.report.gather import ReportError

    name = "fleet" if args.fleet else safe_name(args.job)
    out = Path(args.out) if args.out else Path(f"report-{name}.html")
    if out.suffix.lower() not in (".html", ".htm"):
        print(f"lumos report: --out {out}: the report is HTML, name it *.html", file=sys.stderr)
        return 2
    try:
        wh = Warehouse.open(args.warehouse)
        if args.fleet:
            files = write_fleet_report(wh, out, png_dir=args.png)
        else:
            perfetto = not args.no_perfetto
            files = write_job_report(wh, args.job, out, png_dir=args.png, perfetto=perfetto)
    except (WarehouseNotFound, ReportError) as exc:
        print(f"lumos report: {exc}", file=sys.stderr)
        return 2
    size = files.html.stat().st_size
    print(f"wrote {files.html} ({size / 1e6:.2f} MB, {files.figures} figures)")
    for note in files.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.png:
        print(f"wrote {len(files.pngs)} PNG files to {args.png}")
    return 0
