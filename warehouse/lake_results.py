"""The result tables of an S3 warehouse (replay, explanations, collectives, estimates): their
files, content-addressed under `<uri>/tables/<table>/`, and the Delta table `<uri>/results`
naming them (`RESULT_FILES`), whose commit is the commit point; each result table's own Delta
log (`<uri>/tables/<table>`, for other engines) follows it (`warehouse.lake_tables`). A run uploads its files first, then appends
one row per file as one Delta commit: a killed run leaves only objects no row names. The latest
row of each `relative` (the path the file has in a local warehouse) is its content, as a local
file is overwritten in place; a reader pins one version of the table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from warehouse.lake import LakeManifest, create_table
from warehouse.lake_files import LakeFiles
from warehouse.lake_tables import RESULTS_PREFIX, sync_result_tables
from warehouse.layout import decode_job
from warehouse.schema import RESULT_FILES

__all__ = ["LakeResults", "file_sha256"]


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes (its object's name)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class LakeResults:
    """The results table of the S3 warehouse at `uri`, and its files."""

    uri: str
    storage: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def at(cls, uri: str) -> LakeResults:
        lake = LakeManifest.at(uri)
        return cls(lake.uri, lake.storage)

    @property
    def table_uri(self) -> str:
        return f"{self.uri}/results"

    @property
    def files(self) -> LakeFiles:
        return LakeFiles(self.uri, self.storage)

    def latest(self) -> dict[str, dict]:
        """The latest row per `relative` at the table's latest version ({} before any result)."""
        from deltalake import DeltaTable

        try:
            dt = DeltaTable(self.table_uri, storage_options=self.storage)
        except Exception:  # TableNotFoundError: nothing was replayed or estimated yet
            return {}
        table = dt.to_pyarrow_dataset().to_table(columns=RESULT_FILES.names).cast(RESULT_FILES)
        out: dict[str, dict] = {}
        for row in table.sort_by([("committed_at", "ascending")]).to_pylist():
            out[row["relative"]] = row
        return out

    def commit(self, root: Path, relatives: Sequence[str]) -> int:
        """Upload the files `relatives` of the local folder `root`, then append their rows as one
        Delta commit (the commit point; last); returns the rows appended."""
        if not relatives:
            return 0
        from deltalake import write_deltalake

        files, now, rows = self.files, datetime.now(UTC), []
        for relative in relatives:
            path = root / relative
            sha = file_sha256(path)
            table_name, part = relative.split("/", 1)
            key = f"{RESULTS_PREFIX}/{table_name}/{sha}.parquet"
            files.put(str(path), key)
            job = decode_job(part.split("/", 1)[0].removeprefix("job="))
            rows.append(
                {
                    "relative": relative,
                    "table_name": table_name,
                    "job": job,
                    "key": key,
                    "sha256": sha,
                    "size_bytes": path.stat().st_size,
                    "committed_at": now,
                }
            )
        create_table(self.table_uri, RESULT_FILES, self.storage, "the results table")
        table = pa.Table.from_pylist(rows, schema=RESULT_FILES)
        write_deltalake(self.table_uri, table, mode="append", storage_options=self.storage)
        # each result table's own log follows the commit (for other engines)
        sync_result_tables(LakeManifest(self.uri, self.storage), self.latest)
        return len(rows)
