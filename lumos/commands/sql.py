"""`lumos sql "QUERY" [--warehouse DIR] [--format table|csv|json]`: query the warehouse."""

from __future__ import annotations

import argparse
import sys

from lumos.commands.options import add_warehouse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sql",
        help="run a SQL query on the warehouse",
        description="Run one DuckDB SQL query against the warehouse's views (events, traces, "
        "trace_meta, devices, threads, distributed_info, jobs; after `lumos replay` iterations, "
        "tasks, deps, kernels, collectives, schedules, iteration_replay, replay_quality, "
        "breakdown, sm_utilization, critical_path, critical_path_summary, replay_runs; after "
        "estimates estimates, job_configs, estimate_vs_measured; README.md lists them all) and "
        "print the result.",
    )
    p.add_argument(
        "query", help='the query, e.g. "select job, rank, count(*) from events group by all"'
    )
    add_warehouse(p)
    p.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (default), csv, or json: one JSON array with an object per row",
    )
    p.add_argument("--max-rows", type=int, default=100, help="rows shown by --format table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import duckdb

    from lumos.api import Warehouse, WarehouseNotFound, to_pandas

    try:
        wh = Warehouse.open(args.warehouse)
    except WarehouseNotFound as exc:
        print(f"lumos sql: {exc}", file=sys.stderr)
        return 2
    try:
        table = wh.arrow(args.query)
    except duckdb.Error as exc:
        print(f"lumos sql: {exc}", file=sys.stderr)
        return 1
    out = sys.stdout
    if args.format == "json":
        _write_json(table, out)
    elif args.format == "csv":
        _write_csv(table, out)
    else:
        import pandas as pd

        with pd.option_context(
            "display.max_rows",
            args.max_rows,
            "display.max_columns",
            None,
            "display.width",
            200,
            "display.max_colwidth",
            60,
        ):
            df = to_pandas(table)
            out.write(
                (df.to_string(index=False) if len(df) else f"(0 rows) {list(df.columns)}") + "\n"
            )
            if len(df) > args.max_rows:
                out.write(f"({len(df)} rows; showing {args.max_rows})\n")
    return 0


def _write_json(table, out) -> None:
    """One JSON array, an object per row; int64 stays exact (no float round-trip)."""
    import json

    def default(value):
        if hasattr(value, "isoformat"):
            return value.isoformat()
        if isinstance(value, bytes):
            return value.hex()
        if hasattr(value, "as_tuple"):  # Decimal
            return str(value)
        return str(value)

    out.write("[")
    first = True
    for batch in table.to_batches():
        for row in batch.to_pylist():
            out.write(("" if first else ",\n") + json.dumps(row, default=default))
            first = False
    out.write("]\n")


def _write_csv(table, out) -> None:
    """RFC 4180 with quotes only where a value needs them (pyarrow's writer quotes every string,
    which shell tools such as `cut` and `while read` would have to strip); nulls are empty, lists
    and structs JSON."""
    import csv
    import json

    def cell(value):
        return json.dumps(value, default=str) if isinstance(value, list | dict) else value

    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    for batch in table.to_batches():
        cols = [c.to_pylist() for c in batch.columns]
        writer.writerows([cell(v) for v in row] for row in zip(*cols, strict=True))
