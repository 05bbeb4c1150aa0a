"""The notebook API: open a warehouse, run SQL, get pandas or Arrow back.

    from lumos.api import Warehouse
    wh = Warehouse.open()                      # $LUMOS_WAREHOUSE, else ./lumos_warehouse
    wh.ingest(["traces/job_a"], job="job_a")   # same rules as `lumos ingest`
    wh.sql("select rank, count(*) from events group by rank")   # -> pandas.DataFrame
    wh.arrow("select * from traces")                            # -> pyarrow.Table
    wh.status()                                # {'jobs': DataFrame, 'refused': DataFrame, 'totals': dict}

Each query opens the catalog read-only and closes it, so notebooks never hold DuckDB's file lock
and any number of processes can query while an ingest runs.
"""

from __future__ import annotations

import lumos_sql
from warehouse.handle import WarehouseHandle, WarehouseNotFound, to_pandas

__all__ = ["Warehouse", "WarehouseNotFound", "to_pandas"]


class Warehouse(WarehouseHandle):
    """A warehouse opened from a notebook or a script (`WarehouseHandle`, and its status)."""

    def status(self) -> dict:
        """What the warehouse holds: per-job summary (with where its replay stands), refused
        files, totals."""

        from lumos.replay.fleet import replay_states

        jobs = self.sql(lumos_sql.load("status/jobs"))
        refused = self.sql(lumos_sql.load("status/refused"))
        con = self.connect()
        try:
            states = replay_states(con, self.root)
        finally:
            con.close()
        # where each job's replay stands (lumos replay skips the "ok" and "failed" ones; "-": no
        # ingested trace to replay)
        jobs["replay"] = [states.get(j, "-") for j in jobs["job"]] if len(jobs) else []
        self._add_replay_quality(jobs)
        totals = {
            "jobs": int(len(jobs)),
            "files_ok": int(jobs["files_ok"].sum()) if len(jobs) else 0,
            "files_refused": int(jobs["files_refused"].sum()) if len(jobs) else 0,
            "events": int(jobs["events"].sum()) if len(jobs) else 0,
            "bytes": int(jobs["bytes"].sum()) if len(jobs) else 0,
        }
        return {"jobs": jobs, "refused": refused, "totals": totals}

    def _add_replay_quality(self, jobs) -> None:  # noqa: ANN001
        """Columns `ext_wait_%` (the largest share of a step in measured external waits, with
        its main cause) and `model` (`ok`, `off bound`: the model replay's error exceeds the
        bounds of lumos.replay.bounds, `-`: not scored) of each job."""
        from lumos.replay.bounds import off_bounds

        views = set(self.sql("select view_name from duckdb_views()")["view_name"])
        rows = (
            self.sql(lumos_sql.load("status/replay_quality")).to_dict("records")
            if "replay_quality" in views
            else []
        )
        by = {r["job"]: r for r in rows}
        waits, model = [], []
        for j in jobs["job"]:
            r = by.get(j)
            if r is None:
                waits.append("-")
                model.append("-")
                continue
            share = r["ext_wait_share"]
            if share is None or share != share:  # a replay stored before the waits (NaN in pandas)
                waits.append("-")
            else:
                cause = f" {r['wait_cause']}" if share > 0 and r["wait_cause"] else ""
                waits.append(f"{100 * share:.2f}{cause}")
            model.append("off bound" if off_bounds(r) else "ok")
        jobs["ext_wait_%"] = waits
        jobs["model"] = model
