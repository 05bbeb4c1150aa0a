"""Resources: where the warehouse, the inbox, the sweep grid files and the reports live.

Defaults come from `LUMOS_WAREHOUSE` / `LUMOS_INBOX` / `LUMOS_GRIDS` / `LUMOS_REPORTS` when the
definitions are loaded, else `./lumos_warehouse`, `./lumos_inbox` and `./lumos_grids` relative to
the working directory of the Dagster process, and `<warehouse>/reports`. The warehouse may be an
S3 prefix `s3://bucket/prefix` (docs/warehouse.md, 'Warehouse on S3'): the reports then go to
`./lumos_reports` unless `reports` names a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

DEFAULT_WAREHOUSE = "lumos_warehouse"
DEFAULT_INBOX = "lumos_inbox"
DEFAULT_GRIDS = "lumos_grids"


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse root (Parquet tables + `lumos.duckdb`), the inbox of incoming traces, the
    folder of sweep grid files (`<job>.yaml`) and the folder the assets write their HTML reports
    to (empty: `<warehouse>/reports`)."""

    warehouse: str = DEFAULT_WAREHOUSE
    inbox: str = DEFAULT_INBOX
    grids: str = DEFAULT_GRIDS
    reports: str = ""

    @classmethod
    def from_env(cls) -> WarehouseResource:
        """The resource configured from `LUMOS_WAREHOUSE` / `LUMOS_INBOX` / `LUMOS_GRIDS` /
        `LUMOS_REPORTS` (or the defaults)."""
        return cls(
            warehouse=os.environ.get("LUMOS_WAREHOUSE") or DEFAULT_WAREHOUSE,
            inbox=os.environ.get("LUMOS_INBOX") or DEFAULT_INBOX,
            grids=os.environ.get("LUMOS_GRIDS") or DEFAULT_GRIDS,
            reports=os.environ.get("LUMOS_REPORTS") or "",
        )

    @property
    def warehouse_path(self) -> Path:
        """The local warehouse directory (`WarehouseLocationError` for an S3 warehouse)."""
        from warehouse.location import local_warehouse

        return local_warehouse(self.warehouse)

    @property
    def location(self) -> Path | str:
        """The warehouse: a local directory, or an `s3://bucket/prefix` URI."""
        from warehouse.location import warehouse_location

        return warehouse_location(self.warehouse)

    @property
    def remote(self) -> bool:
        """Whether the warehouse is on object storage."""
        return isinstance(self.location, str)

    @property
    def inbox_path(self) -> Path:
        return Path(self.inbox).expanduser().resolve()

    @property
    def grids_path(self) -> Path:
        return Path(self.grids).expanduser().resolve()

    @property
    def reports_path(self) -> Path:
        if self.reports:
            return Path(self.reports).expanduser().resolve()
        if self.remote:
            return Path("lumos_reports").resolve()
        return self.warehouse_path / "reports"
