"""Run the estimator's calibration queries (`lumos_sql/estimate/*.sql`) on a warehouse's catalog.

Every query takes the base `$job` and the jobs to leave out, `$exclude` (an accuracy check
never learns from the run it predicts), and reads the jobs it learns from through the
`calibration_jobs` macro (`estimate/calibration_jobs.sql`), defined on the connection first. A warehouse without a catalog, or a query DuckDB
refuses, yields no rows and the reason, so that each model falls back to its defaults and says
why instead of failing the estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def calibration_rows(
    wh: Any, names: Sequence[str], job: str, exclude: Sequence[str] = ()
) -> tuple[list[list[tuple[Any, ...]]], str | None]:
    """(rows of each `estimate/<name>` query, None) or (empty lists, why nothing was read).
    `wh`: the warehouse, or a connection on its catalog (`catalog_connection`) that several
    calls share."""
    import duckdb

    import lumos_sql

    empty: list[list[tuple[Any, ...]]] = [[] for _ in names]
    own = not isinstance(wh, duckdb.DuckDBPyConnection)
    con = catalog_connection(wh) if own else wh
    if con is None:
        return empty, "no catalog"
    try:
        params = {"job": job, "exclude": list(exclude)}
        con.execute(lumos_sql.load("estimate/calibration_jobs"))
        return [
            con.execute(lumos_sql.load(f"estimate/{n}"), params).fetchall() for n in names
        ], None
    except duckdb.Error as e:
        return empty, str(e)
    finally:
        if own:
            con.close()


def catalog_connection(wh: Any) -> Any:
    """A connection on `wh`'s catalog (one snapshot), None where it has none."""
    import duckdb

    from warehouse.catalog import connect as catalog_connect

    try:
        return catalog_connect(str(wh.catalog))
    except duckdb.Error:
        return None
