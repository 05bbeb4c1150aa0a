"""Run code that computes on a local warehouse (`lumos estimate`, `sweep`, the `grid_sweeps` asset)
against an S3 one: in its local mirror (`warehouse.lake_mirror`), committing back what it wrote
there at the end. Imports no pyarrow for a local warehouse (a cached estimate's start-up)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from warehouse.location import warehouse_location


@contextmanager
def local_warehouse_for(location: str | None) -> Iterator[str]:
    """`location` (None: `$LUMOS_WAREHOUSE`, else `./lumos_warehouse`) as a local warehouse
    directory: itself when it is one (absolute); for an `s3://` warehouse, its
    mirror's folder, whose new result files are committed to S3 (one Delta commit) when the
    block ends without an exception."""
    resolved = warehouse_location(location)
    if not isinstance(resolved, str):
        yield str(resolved)
        return
    from warehouse.lake_mirror import mirror

    with mirror(resolved) as local:
        yield str(local.root)
        local.publish()
