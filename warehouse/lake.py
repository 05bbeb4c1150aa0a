"""The manifest as a Delta Lake table on object storage: the prototype of issue 38, item 1.

Only for a warehouse URI `s3://bucket/prefix` (that is the flag: a local directory keeps the
lock-and-rename manifest of `warehouse.manifest`, unchanged). The table `<uri>/manifest` holds
rows of `TRACES`; one `append` is one Delta commit, which delta-rs makes with S3's conditional
put, so writers on several machines commit safely without a lock, and a reader sees whole
commits only (a killed writer's data file that no log entry names is in no version). Endpoint
and credentials come from the standard AWS variables (`AWS_ENDPOINT_URL` for S3-compatible
stores). Why Delta Lake: docs/warehouse.md, "Open table format: choice by measurement".
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pyarrow as pa

from warehouse.layout import Layout
from warehouse.location import WarehouseLocationError
from warehouse.manifest import Manifest, _keep_latest, _rows, read_manifest
from warehouse.schema import TRACES

__all__ = [
    "LakeError",
    "LakeManifest",
    "create_table",
    "import_manifest",
    "is_remote",
    "storage_options",
]

REMOTE_SCHEMES = ("s3",)
# What this process last read of each manifest table: its live data files, and the latest rows
# they gave. A commit adds files and never changes one, so a later read parses only the files
# added since (an ingest reads the manifest before each commit: a whole read of 100k rows on
# moto's S3 took 0.47 s, docs/warehouse.md 'Warehouse on S3').
_READ: dict[str, tuple[frozenset[str], dict[tuple[str, str], dict]]] = {}
_AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class LakeError(WarehouseLocationError):
    """A warehouse URI or table the lake refuses; the message names the URI and the problem."""


def create_table(uri: str, schema: pa.Schema, storage: dict[str, str], what: str) -> None:
    """Create the Delta table at `uri` if absent: several processes may race to (one creates
    its version 0 with a conditional put, the others find it); a `LakeError` naming `what` when
    it can be neither created nor opened."""
    from deltalake import DeltaTable

    try:
        DeltaTable.create(uri, schema=schema, mode="ignore", storage_options=storage)
    except Exception as exc:  # a racing creator's version 0 won the conditional put
        try:
            DeltaTable(uri, storage_options=storage)
        except Exception:
            raise LakeError(f"{uri}: cannot create {what}: {exc}") from exc


def is_remote(uri: str | os.PathLike[str]) -> bool:
    """Whether `uri` names a warehouse on object storage (else it is a local directory)."""
    return urlparse(os.fspath(uri)).scheme in REMOTE_SCHEMES


def storage_options(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """delta-rs's options from the standard AWS variables; plain http only for an http endpoint
    (a local MinIO or moto)."""
    env = os.environ if env is None else env
    out = {k: env[k] for k in _AWS_VARIABLES if env.get(k)}
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        out["AWS_REGION"] = region
    endpoint = env.get("AWS_ENDPOINT_URL")
    if endpoint:
        out["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
    return out


@dataclass(frozen=True)
class LakeManifest:
    """The manifest table of the warehouse at `uri` (`s3://bucket/prefix`)."""

    uri: str
    storage: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def at(cls, uri: str, env: Mapping[str, str] | None = None) -> LakeManifest:
        parsed = urlparse(uri)
        if parsed.scheme not in REMOTE_SCHEMES:
            raise LakeError(f"{uri}: not an object-storage warehouse (expected s3://bucket/prefix)")
        if not parsed.netloc:
            raise LakeError(f"{uri}: no bucket (expected s3://bucket/prefix)")
        import importlib.util

        if importlib.util.find_spec("deltalake") is None:
            raise LakeError(
                f"{uri}: a warehouse on S3 needs deltalake, which is not installed "
                "(pip install 'lumos[lake]')"
            )
        return cls(uri.rstrip("/"), storage_options(env))

    @property
    def table_uri(self) -> str:
        return f"{self.uri}/manifest"

    def ensure(self) -> None:
        """Create the table if absent (several processes may race to: one creates it).
        Not `DeltaTable.is_deltatable`: in deltalake 1.6.6 it never returns against moto."""
        create_table(self.table_uri, TRACES, self.storage, "the manifest table")

    def append(self, rows: Sequence[dict]) -> None:
        """Append `rows` (TRACES, `ingested_at` a datetime or integer µs) as one commit."""
        if not rows:
            return
        from deltalake import write_deltalake

        table = pa.Table.from_pylist(list(rows), schema=TRACES)
        write_deltalake(self.table_uri, table, mode="append", storage_options=self.storage)

    def version(self) -> int:
        """The latest committed version: a reader that pins it sees that commit and no later."""
        from deltalake import DeltaTable

        return DeltaTable(self.table_uri, storage_options=self.storage).version()

    def read(self, version: int | None = None) -> Manifest:
        """The latest row per (job, sha256) as of `version` (the latest when None). Only the
        data files added since this process last read the table are read, as long as those it
        read are all still live (`_READ`); a compaction since makes it read everything."""
        import pyarrow.dataset as ds
        from deltalake import DeltaTable

        try:
            dt = DeltaTable(self.table_uri, version=version, storage_options=self.storage)
        except Exception as exc:  # TableNotFoundError, or a version that is not there
            raise LakeError(f"{self.table_uri}: cannot read the manifest table: {exc}") from exc
        dataset = dt.to_pyarrow_dataset()
        fragments = list(dataset.get_fragments())
        live = frozenset(f.path for f in fragments)
        seen, latest = _READ.get(self.table_uri, (frozenset(), {}))
        if not seen <= live:
            seen, latest = frozenset(), {}
        new = [f for f in fragments if f.path not in seen]
        latest = dict(latest)
        if new:
            part = ds.FileSystemDataset(new, dataset.schema, dataset.format, dataset.filesystem)
            table = part.to_table(columns=TRACES.names).cast(TRACES)
            _keep_latest(latest, _rows(table.sort_by([("ingested_at", "ascending")])))
        _READ[self.table_uri] = (live, latest)
        return Manifest(latest)

    def snapshot(self) -> tuple[int, list[str]]:
        """A pinned version and its ok rows' events files (relative to the warehouse), what a
        catalog connection lists once (`warehouse.snapshot`)."""
        version = self.version()
        return version, sorted(self.read(version).ok_files())

    def upkeep(self) -> None:
        """Merge the small files the commits made, then checkpoint the log (a nightly job)."""
        from deltalake import DeltaTable

        dt = DeltaTable(self.table_uri, storage_options=self.storage)
        dt.optimize.compact()
        dt.create_checkpoint()


def import_manifest(layout: Layout, lake: LakeManifest) -> int:
    """Append a local warehouse's manifest (its latest rows) to `lake` as one commit, only the
    rows the lake's latest rows lack (a second import commits nothing), then check that the lake
    reads back every (job, sha256, status, n_events, events_file) of the local one; returns the
    rows appended. The data files are copied before by `warehouse.migrate`."""
    rows = read_manifest(layout).rows
    lake.ensure()
    before = {_key(r) for r in lake.read().rows}
    new = [r for r in rows if _key(r) not in before]
    lake.append(new)
    got = {_key(r) for r in lake.read().rows}
    missing = {_key(r) for r in rows} - got
    if missing:
        raise LakeError(
            f"{lake.table_uri}: the copy of {layout.root}'s manifest reads back differently "
            f"({len(missing)} rows missing, {len(got)} read)"
        )
    return len(new)


def _key(row: dict) -> tuple:
    return (row["job"], row["sha256"], row["status"], row["n_events"], row["events_file"])
