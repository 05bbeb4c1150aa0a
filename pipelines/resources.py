"""Resources: where the warehouse and the inbox live.

Defaults come from `LUMOS_WAREHOUSE` / `LUMOS_INBOX` when the definitions are loaded, else
`./lumos_warehouse` and `./lumos_inbox` relative to the working directory of the Dagster process.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

DEFAULT_WAREHOUSE = "lumos_warehouse"
DEFAULT_INBOX = "lumos_inbox"


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse root (Parquet tables + `lumos.duckdb`) and the inbox of incoming traces."""

    warehouse: str = DEFAULT_WAREHOUSE
    inbox: str = DEFAULT_INBOX

    @classmethod
    def from_env(cls) -> WarehouseResource:
        """The resource configured from `LUMOS_WAREHOUSE` / `LUMOS_INBOX` (or the defaults)."""
        return cls(
            warehouse=os.environ.get("LUMOS_WAREHOUSE") or DEFAULT_WAREHOUSE,
            inbox=os.environ.get("LUMOS_INBOX") or DEFAULT_INBOX,
        )

    @property
    def warehouse_path(self) -> Path:
        return Path(self.warehouse).expanduser().resolve()

    @property
    def inbox_path(self) -> Path:
        return Path(self.inbox).expanduser().resolve()
