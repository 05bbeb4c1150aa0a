"""Where a warehouse is: a local directory, from `--warehouse`, else `$LUMOS_WAREHOUSE`, else
`./lumos_warehouse`. A URI (`s3://bucket/wh`) is refused by name: it would otherwise become a
local folder called `s3:`. Kept free of pyarrow and duckdb, so that a cached estimate's process
can resolve its warehouse without importing them."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["WarehouseLocationError", "local_warehouse"]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class WarehouseLocationError(ValueError):
    """A warehouse location this version cannot use (says which, and why)."""


def local_warehouse(location: str | os.PathLike[str] | None = None) -> Path:
    """The warehouse directory `location` names (None: `$LUMOS_WAREHOUSE`, else
    `./lumos_warehouse`), absolute; a URI other than `file://` raises `WarehouseLocationError`."""
    text = os.fspath(location) if location is not None else None
    text = text or os.environ.get("LUMOS_WAREHOUSE") or "lumos_warehouse"
    if isinstance(text, str) and _URI.match(text):
        if text.startswith("file://"):
            text = text[len("file://") :]
        else:
            raise WarehouseLocationError(
                f"{text}: a warehouse is a local directory in this version; object storage "
                "(s3://) is being built (warehouse/lake.py holds the manifest on it, nothing "
                "else reads it yet: docs/warehouse.md, 'Open table format')"
            )
    return Path(text).expanduser().resolve()
