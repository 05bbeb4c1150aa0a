"""Resources: where the warehouse, the inbox and the sweep grid files live.

Defaults come from `LUMOS_WAREHOUSE` / `LUMOS_INBOX` / `LUMOS_GRIDS` when the definitions are
loaded, else `./lumos_warehouse`, `./lumos_inbox` and `./lumos_grids` relative to the working
directory of the Dagster process.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

DEFAULT_WAREHOUSE = "lumos_warehouse"
DEFAULT_INBOX = "lumos_inbox"
DEFAULT_GRIDS = "lumos_grids"


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse root (Parquet tables + `lumos.duckdb`), the inbox of incoming traces and the
    folder of sweep grid files (`<job>.yaml`)."""

    warehouse: str = DEFAULT_WAREHOUSE
    inbox: str = DEFAULT_INBOX
    grids: str = DEFAULT_GRIDS

    @classmethod
    def from_env(cls) -> WarehouseResource:
        """The resource configured from `LUMOS_WAREHOUSE` / `LUMOS_INBOX` / `LUMOS_GRIDS` (or the
        defaults)."""
        return cls(
            warehouse=os.environ.get("LUMOS_WAREHOUSE") or DEFAULT_WAREHOUSE,
            inbox=os.environ.get("LUMOS_INBOX") or DEFAULT_INBOX,
            grids=os.environ.get("LUMOS_GRIDS") or DEFAULT_GRIDS,
        )

    @property
    def warehouse_path(self) -> Path:
        return Path(self.warehouse).expanduser().resolve()

    @property
    def inbox_path(self) -> Path:
        return Path(self.inbox).expanduser().resolve()

    @property
    def grids_path(self) -> Path:
        return Path(self.grids).expanduser().resolve()
