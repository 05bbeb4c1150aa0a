"""Compute a job's explanation tables from its replay tables and write them to the warehouse.

Tables (schemas in warehouse/schema.py): `breakdown` and `sm_utilization` for the measured
iteration and every replayed mode, `critical_path` and `critical_path_summary` for the replayed
modes. Each is written as `<wh>/<table>/job=<enc>/part.parquet` (temp file + rename), like the
replay's own tables.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from lumos.explain.breakdown import breakdown
from lumos.explain.critical_path import critical_paths
from lumos.explain.inputs import MEASURED, JobTables, job_file, load_job
from lumos.explain.utilization import utilization
from warehouse.layout import write_parquet_atomic
from warehouse.schema import BREAKDOWN, CRITICAL_PATH, CRITICAL_PATH_SUMMARY, SM_UTILIZATION

EXPLAIN_TABLES: dict[str, pa.Schema] = {
    "breakdown": BREAKDOWN,
    "sm_utilization": SM_UTILIZATION,
    "critical_path": CRITICAL_PATH,
    "critical_path_summary": CRITICAL_PATH_SUMMARY,
}


def explain(job: JobTables) -> dict[str, pa.Table]:
    """All explanation tables of a job (every rank; measured and replayed modes)."""
    parts: dict[str, list[pa.Table]] = {name: [] for name in EXPLAIN_TABLES}
    for view in job.ranks():
        for mode in view.modes:
            parts["breakdown"].append(breakdown(view, mode))
            parts["sm_utilization"].append(utilization(view, mode))
            if mode != MEASURED:
                path, summary = critical_paths(view, mode)
                parts["critical_path"].append(path)
                parts["critical_path_summary"].append(summary)
    return {
        name: pa.concat_tables(parts[name]) if parts[name] else schema.empty_table()
        for name, schema in EXPLAIN_TABLES.items()
    }


def write(warehouse: str | os.PathLike[str], job: str, tables: dict[str, pa.Table]) -> list[Path]:
    paths = []
    for name, table in tables.items():
        target = job_file(warehouse, name, job)
        write_parquet_atomic(table, target)
        paths.append(target)
    return paths


def explain_job(
    warehouse: str | os.PathLike[str], job: str, *, write_tables: bool = True
) -> dict[str, pa.Table]:
    """Read a replayed job from the warehouse, explain it and (by default) write the tables."""
    tables = explain(load_job(warehouse, job))
    if write_tables:
        write(warehouse, job, tables)
    return tables
