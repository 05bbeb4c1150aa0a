"""`lumos ingest PATH... [--job NAME] [--warehouse DIR] [--workers N]`: traces into the warehouse."""

from __future__ import annotations

import argparse
import sys

from lumos.commands.options import add_warehouse, job_name

DESCRIPTION = """\
Ingest Kineto trace files (or every *.json / *.json.gz under the given directories) into the
warehouse. Without --job, the job is the one the trace names (mast_job_name, distributedInfo), else
the directory holding the files (each folder of a directory argument is one job), else the file's
name; the choice is printed. Each file's rank comes from distributedInfo, else the file name
(rank-3, rank3, worker3), else 0 for a one-file job. Re-ingesting an identical file does nothing.
Exits 1 when any file was refused (each is listed with the reason) or a directory among the
arguments held no trace file (the others are ingested), 2 on a bad argument."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ingest",
        help="ingest trace files into the warehouse",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories")
    p.add_argument(
        "--job", type=job_name, help="ingest all the given files as the ranks of this job"
    )
    add_warehouse(p)
    p.add_argument(
        "--workers", type=int, default=1, metavar="N", help="parse N files in parallel (default 1)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only refusals and errors")
    p.set_defaults(func=run)


class _ProgressBar:
    """Files, megabytes and events so far, on one progress line."""

    def __init__(self) -> None:
        from lumos.commands.progress import ProgressLine

        self.line = ProgressLine()

    def __call__(self, p) -> None:
        self.line.draw(
            p.bytes_done / p.bytes_total if p.bytes_total else 1.0,
            f"{p.files_done}/{p.files_total} files "
            f"{p.bytes_done / 1e6:,.1f}/{p.bytes_total / 1e6:,.1f} MB "
            f"{p.events_done:,} events {self.line.elapsed:.0f}s",
            final=p.files_done >= p.files_total,
        )

    def close(self) -> None:
        self.line.close()


def run(args: argparse.Namespace) -> int:
    from warehouse.ingest_process import prepare_ingest_process

    prepare_ingest_process()  # this process only ingests: no pandas, one allocator
    from warehouse.errors import TraceError
    from warehouse.ingest import ingest
    from warehouse.location import warehouse_location

    if args.workers < 1:
        print("lumos ingest: --workers must be at least 1", file=sys.stderr)
        return 2
    location = warehouse_location(args.warehouse)  # a directory, or s3://bucket/prefix
    bar = None if args.quiet else _ProgressBar()
    try:
        report = ingest(
            args.paths, warehouse=location, job=args.job, workers=args.workers, progress=bar
        )
    except (TraceError, ValueError) as exc:
        if bar:
            bar.close()
        print(f"lumos ingest: {exc}", file=sys.stderr)
        return 2
    if bar:
        bar.close()
    if not args.quiet:
        sources = {
            "given": "given with --job",
            "trace": "named by the trace",
            "path": "from the directory / file name",
            "window": "a later profiling window: other ProfilerSteps of the same ranks",
        }
        for job, source in report.jobs.items():
            ranks = sorted({f.rank for f in report.files if f.job == job and f.rank is not None})
            shown = ", ".join(map(str, ranks)) if len(ranks) <= 16 else f"{len(ranks)} ranks"
            print(f"job {job!r} ({sources.get(source, source)}): ranks {shown or '-'}")
        for f in report.files:
            if f.status == "ok":
                print(f"  {f.action:<9} {f.job} rank {f.rank}: {f.path} ({f.n_events:,} events)")
    for f in report.refused:
        again = " (refused before, unchanged)" if f.action == "still refused" else ""
        print(f"  REFUSED{again} {f.error}", file=sys.stderr)
    for path, why in report.skipped:
        print(f"  SKIPPED {path}: {why}", file=sys.stderr)
    print(f"{report.summary()}; warehouse {report.warehouse}")
    if report.refused or report.skipped:
        problems = [f"{len(report.refused)} file(s) refused"] if report.refused else []
        problems += [f"{len(report.skipped)} argument(s) skipped"] if report.skipped else []
        print(f"lumos ingest: {', '.join(problems)}", file=sys.stderr)
        return 1
    return 0
