"""Where a warehouse is: from `--warehouse`, else `$LUMOS_WAREHOUSE`, else `./lumos_warehouse`.
A local directory, or an S3 prefix `s3://bucket/prefix` (issue 38: `warehouse.lake*`), which
the commands that work on one take (`OBJECT_STORE_COMMANDS`); the others refuse it by name, as
every other URI scheme is refused (it would otherwise become a local folder called `s3:`).
Kept free of pyarrow and duckdb, so that a cached estimate's process can resolve its warehouse
without importing them."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = [
    "OBJECT_STORE_COMMANDS",
    "WarehouseLocationError",
    "cache_folder",
    "is_object_store",
    "local_warehouse",
    "warehouse_location",
]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# the commands that take an s3:// warehouse (said in every refusal)
OBJECT_STORE_COMMANDS = (
    "ingest", "sql", "status", "replay", "estimate", "sweep", "describe", "explain", "export",
    "report", "migrate --to",
)  # fmt: skip


class WarehouseLocationError(ValueError):
    """A warehouse location this version cannot use (says which, and why)."""


def is_object_store(location: str | os.PathLike[str] | None) -> bool:
    """Whether `location` names a warehouse on object storage (`s3://...`)."""
    return isinstance(location, str) and location.startswith("s3://")


def cache_folder() -> Path:
    """Where lumos keeps local copies of an S3 warehouse's files (`warehouse.lake_mirror`) and
    the estimator's templates built from them: `$LUMOS_CACHE`, else `~/.cache/lumos`."""
    return Path(os.environ.get("LUMOS_CACHE") or Path.home() / ".cache" / "lumos").resolve()


def warehouse_location(location: str | os.PathLike[str] | None = None) -> Path | str:
    """The warehouse `location` names (None: `$LUMOS_WAREHOUSE`, else `./lumos_warehouse`): an
    absolute directory, or the `s3://bucket/prefix` URI as given (without a trailing `/`)."""
    text = os.fspath(location) if location is not None else None
    text = text or os.environ.get("LUMOS_WAREHOUSE") or "lumos_warehouse"
    if is_object_store(text):
        if not text[len("s3://") :].split("/")[0]:
            raise WarehouseLocationError(f"{text}: no bucket (expected s3://bucket/prefix)")
        return text.rstrip("/")
    return local_warehouse(text)


def local_warehouse(location: str | os.PathLike[str] | None = None) -> Path:
    """The warehouse directory `location` names (None: `$LUMOS_WAREHOUSE`, else
    `./lumos_warehouse`), absolute; a URI other than `file://` raises `WarehouseLocationError`
    (an `s3://` one naming the commands that take it)."""
    text = os.fspath(location) if location is not None else None
    text = text or os.environ.get("LUMOS_WAREHOUSE") or "lumos_warehouse"
    if isinstance(text, str) and _URI.match(text):
        if text.startswith("file://"):
            text = text[len("file://") :]
        elif is_object_store(text):
            raise WarehouseLocationError(
                f"{text}: this command needs a local warehouse directory; an s3:// warehouse "
                f"is taken by `lumos {'`, `lumos '.join(OBJECT_STORE_COMMANDS)}` only "
                "(docs/warehouse.md, 'Warehouse on S3')"
            )
        else:
            raise WarehouseLocationError(
                f"{text}: a warehouse is a local directory or s3://bucket/prefix; other URI "
                "schemes are not supported"
            )
    return Path(text).expanduser().resolve()
