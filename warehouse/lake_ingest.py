"""An ingest into an S3 warehouse (`s3://bucket/prefix`): what `warehouse.ingest.LocalStore` is
for a directory. Parsing, staging and the decisions (unchanged, refused, rank held, profiling
window) are the local ingest's own (`warehouse.ingest.decide`, handed to `commit` by the ingest
that drives this store, which keeps the import one way); only the commit differs: the
staged files are uploaded to their content-addressed keys (`warehouse.lake_files`), then the
batch's manifest rows are appended as one Delta commit (`warehouse.lake.LakeManifest`), the
commit point. A killed ingest leaves at most data files that no committed row names: no reader
lists them. Concurrent ingests need no lock: delta-rs commits with S3's conditional put, and the
manifest's latest-row rule makes two commits of the same (job, sha256) one row.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from warehouse.lake import LakeManifest
from warehouse.lake_files import LakeFiles
from warehouse.manifest import Manifest

__all__ = ["Decide", "LakeStore"]

# `warehouse.ingest.decide`: (batch, manifest, outcomes, open a data file) -> (rows, placements)
Decide = Callable[[list, Manifest, dict, Callable[[str], object]], tuple[list[dict], list]]


@dataclass(frozen=True)
class LakeStore:
    """The S3 warehouse at `root` (its URI), as an ingest writes it."""

    root: str
    lake: LakeManifest
    files: LakeFiles

    @classmethod
    def at(cls, uri: str) -> LakeStore:
        lake = LakeManifest.at(uri)
        return cls(lake.uri, lake, LakeFiles(lake.uri, lake.storage))

    def begin(self) -> Manifest:
        """Create the manifest table if absent; the manifest as it is now."""
        self.lake.ensure()
        return self.lake.read()

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """A private local folder for the parsed files (removed at the end, killed or not: a
        dead run's folder in the system's temporary directory is the system's to clear)."""
        run = Path(tempfile.mkdtemp(prefix="lumos-lake-staging-"))
        try:
            yield run
        finally:
            shutil.rmtree(run, ignore_errors=True)

    def open_file(self, relative: str):  # noqa: ANN201 (a pyarrow NativeFile)
        return self.files.open(relative)

    def commit(self, batch: list, outcomes: dict, decide: Decide) -> None:
        """Upload the batch's new files, then append its rows as one Delta commit (last);
        `decide` (`warehouse.ingest.decide`) says which rows and files against the manifest."""
        manifest = self.lake.read()
        rows, placed = decide(batch, manifest, outcomes, self.files.open)
        for p in placed:
            self.files.put(p.events_tmp, p.events_file)
            self.files.put(p.meta_tmp, p.meta_file)
        self.lake.append(rows)  # the commit point
        if rows:
            from warehouse.lake_tables import sync_tables

            sync_tables(self.lake, self.files)  # the data tables' logs follow it
        for p in placed:
            for tmp in (p.events_tmp, p.meta_tmp):
                Path(tmp).unlink(missing_ok=True)

    def finish(self, report: object, *, build_catalog: bool) -> None:
        """Nothing to build: an S3 warehouse's views are made by each connection
        (`warehouse.lake_catalog`)."""
        del report, build_catalog
