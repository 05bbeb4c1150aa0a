"""`lumos report --job JOB | --fleet [--out FILE.html] [--png DIR]`: a self-contained HTML report
(opens offline) of one job or of the whole fleet, and its figures as PNG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    p.set_defaults(func=_run)


def _default_out(args: argparse.Namespace) -> Path:
    if args.fleet:
        return Path("report-fleet.html")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in args.job)
    return Path(f"report-{safe}.html")


def _run(args: argparse.Namespace) -> int:
    from lumos.api import Warehouse, WarehouseNotFound
    from lumos.report.gather import ReportError, gather_fleet, gather_job
    from lumos.report.page import write_html, write_pngs
    from lumos.report.perfetto import write_exports
    from lumos.report.reports import fleet_report, job_report

    out = Path(args.out) if args.out else _default_out(args)
    if out.suffix.lower() not in (".html", ".htm"):
        print(f"lumos report: --out {out}: the report is HTML, name it *.html", file=sys.stderr)
        return 2
    try:
        wh = Warehouse.open(args.warehouse)
        if args.fleet:
            report = fleet_report(gather_fleet(wh), wh.root)
        else:
            data = gather_job(wh, args.job)
            exports: dict = {}
            if not args.no_perfetto and not data.step_list.empty:
                steps = [
                    (int(r), int(s))
                    for r, s in zip(data.step_list["rank"], data.step_list["step"], strict=True)
                ]
                folder = out.with_name(out.stem + "_perfetto")
                exports, note = write_exports(wh.root, args.job, steps, folder)
                if note:
                    data.notes.append(note)
            report = job_report(data, wh.root, exports, out.parent)
    except (WarehouseNotFound, ReportError) as exc:
        print(f"lumos report: {exc}", file=sys.stderr)
        return 2
    path = write_html(report, out)
    size = path.stat().st_size
    print(f"wrote {path} ({size / 1e6:.2f} MB, {len(report.figures)} figures)")
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.png:
        pngs = write_pngs(report, args.png)
        print(f"wrote {len(pngs)} PNG files to {args.png}")
    return 0
