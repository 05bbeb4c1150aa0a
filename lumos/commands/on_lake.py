"""Run a command that computes on a local warehouse (`estimate`, `sweep`) against an S3 one: in
its local mirror (`warehouse.lake_mirror`), committing back what it wrote there at the end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from warehouse.location import warehouse_location


@contextmanager
def local_warehouse_for(location: str | None) -> Iterator[str | None]:
    """`location` as a local warehouse: itself when it is one; for an `s3://` warehouse, its
    mirror's folder, whose new result files are committed to S3 (one Delta commit) when the
    block ends without an exception."""
    resolved = warehouse_location(location)
    if not isinstance(resolved, str):
        yield location
        return
    from warehouse.lake_mirror import mirror

    with mirror(resolved) as local:
        yield str(local.root)
        local.publish()
