"""An opened warehouse, for the code that works on one: its root and catalog (rebuilt when it is
stale), Arrow and pandas queries, ingests. `lumos.api.Warehouse` is the notebook's name for it;
the domain packages (replay, estimate) open a warehouse through this one, below the entry points.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from warehouse.catalog import connect as catalog_connect
from warehouse.layout import Layout
from warehouse.location import WarehouseLocationError, local_warehouse, warehouse_location

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from warehouse.ingest import IngestProgress, IngestReport

__all__ = ["WarehouseHandle", "WarehouseNotFound", "to_pandas"]


class WarehouseNotFound(FileNotFoundError):
    """The directory is not a lumos warehouse (nothing ingested there yet)."""


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """Arrow to pandas keeping integers exact: nullable Int64 instead of float64 when a column
    has nulls (ns timestamps near 1.7e18 do not survive a float64)."""
    import pandas as pd
    import pyarrow as pa

    ints = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(),
        pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(),
        pa.uint64(): pd.UInt64Dtype(),
    }
    return table.to_pandas(types_mapper=ints.get)


@dataclass(frozen=True)
class WarehouseHandle:
    """An opened warehouse: its root (a directory, or an `s3://` URI: `remote`), its catalog,
    queries and ingests (`lumos.api.Warehouse` adds what reads the replay's state)."""

    root: Path | str

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = False,
        object_store: bool = False,
    ) -> WarehouseHandle:
        """Open the warehouse at `path` (default `$LUMOS_WAREHOUSE`, else `./lumos_warehouse`).

        Raises WarehouseNotFound unless it exists or `create` is set. Rebuilds the catalog when it
        is missing or was built for another location (the warehouse was moved). An `s3://`
        warehouse only where the caller can work on one (`object_store`); otherwise it raises
        `WarehouseLocationError` naming the commands that can.
        """
        from warehouse.catalog import build_catalog, catalog_is_current

        location = warehouse_location(path) if object_store else local_warehouse(path)
        if isinstance(location, str):
            from warehouse import lake_catalog

            if not create and not lake_catalog.exists(location):
                raise WarehouseNotFound(
                    f"{location}: no lumos warehouse here (no manifest table; run `lumos ingest "
                    f"PATH... --warehouse {location}` first)"
                )
            return cls(location)
        layout = Layout(location)
        if not layout.exists():
            if not create:
                raise WarehouseNotFound(
                    f"{layout.root}: no lumos warehouse here (run `lumos ingest PATH... "
                    "--warehouse DIR` first, or set LUMOS_WAREHOUSE)"
                )
        if not catalog_is_current(layout.root):
            build_catalog(layout.root)
        return cls(layout.root)

    @property
    def remote(self) -> bool:
        """Whether the warehouse is on object storage (its root an `s3://` URI)."""
        return isinstance(self.root, str)

    @property
    def catalog(self) -> Path:
        if self.remote:
            raise WarehouseLocationError(
                f"{self.root}: an S3 warehouse has no catalog file (its views are made by each "
                "connection: WarehouseHandle.connect)"
            )
        return Layout(self.root).catalog_path

    def connect(self, *, locked: bool = False):  # noqa: ANN201 (duckdb is imported lazily)
        """A connection to the catalog's views, reading one snapshot of the warehouse;
        `locked`: it reads nothing else and cannot be reconfigured (`lumos sql`)."""
        if self.remote:
            from warehouse import lake_catalog

            return lake_catalog.connect(str(self.root), locked=locked)
        if locked:
            from warehouse.catalog import connect_read_only

            return connect_read_only(self.root)
        return catalog_connect(str(self.catalog))

    def arrow(self, query: str, params: dict[str, object] | None = None) -> pa.Table:
        """Run a query on the catalog's views; the result as an Arrow table.

        `params` fills DuckDB's `$name` placeholders (values, never spliced into the text)."""

        con = self.connect()
        try:
            return con.sql(query, params=params or None).to_arrow_table()
        finally:
            con.close()

    def sql(self, query: str, params: dict[str, object] | None = None) -> pd.DataFrame:
        """Run a query on the catalog's views; the result as a pandas DataFrame."""
        return to_pandas(self.arrow(query, params))

    def ingest(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        job: str | None = None,
        workers: int = 1,
        progress: Callable[[IngestProgress], None] | None = None,
    ) -> IngestReport:
        """Ingest files or directories into this warehouse (see `warehouse.ingest.ingest`)."""
        from warehouse.ingest import ingest

        return ingest(paths, warehouse=self.root, job=job, workers=workers, progress=progress)
