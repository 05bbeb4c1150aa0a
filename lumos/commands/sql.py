"""`lumos sql "QUERY" [--warehouse DIR] [--format table|csv|json] [--unsafe]`: query the
warehouse. One read-only statement by default (`warehouse.catalog.check_read_only`, on a
connection that reads nothing outside the warehouse); rows are streamed, and a table shows the
first `--max-rows` only."""

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
    p.add_argument(
        "--unsafe",
        action="store_true",
        help="run any statement DuckDB accepts (COPY, SET, INSTALL, ATTACH, several statements, "
        "files outside the warehouse): it can change or break the warehouse",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import duckdb

    from lumos.api import Warehouse, WarehouseNotFound
    from warehouse.catalog import QueryRefused, check_read_only

    if args.max_rows < 0:
        print("lumos sql: --max-rows must be >= 0", file=sys.stderr)
        return 2
    try:
        wh = Warehouse.open(args.warehouse, object_store=True)
    except WarehouseNotFound as exc:
        print(f"lumos sql: {exc}", file=sys.stderr)
        return 2
    try:
        if not args.unsafe:
            check_read_only(args.query)
        con = wh.connect(locked=not args.unsafe)
    except QueryRefused as exc:
        print(f"lumos sql: {exc}", file=sys.stderr)
        return 2
    try:
        rel = con.sql(args.query)
        if rel is None:  # a statement without a result (--unsafe)
            return 0
        if args.format == "json":
            _write_json(_batches(rel), sys.stdout)
        elif args.format == "csv":
            _write_csv(rel.columns, _batches(rel), sys.stdout)
        else:
            _write_table(rel, args.max_rows, sys.stdout)
    except duckdb.Error as exc:
        print(f"lumos sql: {exc}", file=sys.stderr)
        return 1
    finally:
        con.close()
    return 0


def _batches(rel):  # noqa: ANN001, ANN202
    """The result's record batches, read as they are written out (memory bounded by a batch)."""
    reader = rel.fetch_record_batch(rows_per_batch=65_536)
    yield from reader


def _write_table(rel, max_rows: int, out) -> None:  # noqa: ANN001
    """The first `max_rows` rows as a table; only those (and one more, to know) are fetched."""
    import pandas as pd

    from lumos.api import to_pandas

    table = rel.limit(max_rows + 1).to_arrow_table()
    more = table.num_rows > max_rows
    df = to_pandas(table.slice(0, max_rows))
    with pd.option_context(
        "display.max_rows",
        max_rows + 1,
        "display.max_columns",
        None,
        "display.width",
        200,
        "display.max_colwidth",
        60,
    ):
        if len(df) or not more:
            out.write(
                (df.to_string(index=False) if len(df) else f"(0 rows) {list(df.columns)}") + "\n"
            )
    if more:
        out.write(
            f"(more than {max_rows} rows; showing the first {max_rows}: --max-rows N for more, "
            "--format csv or json for all)\n"
        )


def _write_json(batches, out) -> None:  # noqa: ANN001
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
    for batch in batches:
        for row in batch.to_pylist():
            out.write(("" if first else ",\n") + json.dumps(row, default=default))
            first = False
    out.write("]\n")


def _write_csv(columns, batches, out) -> None:  # noqa: ANN001
    """RFC 4180 with quotes only where a value needs them (pyarrow's writer quotes every string,
    which shell tools such as `cut` and `while read` would have to strip); nulls are empty, lists
    and structs JSON."""
    import csv
    import json

    def cell(value):
        return json.dumps(value, default=str) if isinstance(value, list | dict) else value

    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for batch in batches:
        cols = [c.to_pylist() for c in batch.columns]
        writer.writerows([cell(v) for v in row] for row in zip(*cols, strict=True))
