"""`lumos migrate --from DIR --to s3://bucket/prefix`: a local warehouse to an S3 one."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "migrate",
        help="copy a local warehouse to an S3 warehouse, and check nothing was lost",
        description="Copy the local warehouse DIR to the S3 warehouse s3://bucket/prefix: its "
        "events and trace_meta files (content-addressed; those already there are skipped), then "
        "its manifest as one Delta commit; then compare row counts and hashes of traces, events, "
        "trace_meta and the data files on both sides. Running it again copies nothing. Endpoint "
        "and credentials: the standard AWS variables (AWS_ENDPOINT_URL for MinIO and the like).",
    )
    p.add_argument("--from", dest="source", required=True, metavar="DIR", help="local warehouse")
    p.add_argument("--to", dest="target", required=True, metavar="URI", help="s3://bucket/prefix")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from warehouse.location import is_object_store
    from warehouse.migrate import migrate

    if not is_object_store(args.target):
        print(f"lumos migrate: --to {args.target}: expected s3://bucket/prefix", file=sys.stderr)
        return 2
    report = migrate(args.source, args.target)
    print(
        f"{report.source} -> {report.target}: {report.files_copied} data file(s) copied, "
        f"{report.files_present} already there; {report.rows_committed} manifest row(s) "
        "committed"
    )
    print(f"{'table':<12} {'local rows':>10} {'S3 rows':>10}  local sha256    S3 sha256       same")
    for c in report.comparisons:
        print(
            f"{c.table:<12} {c.local_rows:>10,} {c.remote_rows:>10,}  {c.local_sha256[:14]}  "
            f"{c.remote_sha256[:14]}  {'yes' if c.equal else 'NO'}"
        )
    if not report.equal:
        print("lumos migrate: the S3 warehouse differs from the local one", file=sys.stderr)
        return 1
    return 0
