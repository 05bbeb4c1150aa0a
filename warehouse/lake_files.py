"""The data files of an S3 warehouse (`s3://bucket/prefix`): put, read and list them through
pyarrow's S3 filesystem (in the pyarrow wheel: nothing downloaded at run time), configured from
the same standard AWS variables as the Delta manifest (`warehouse.lake.storage_options`).

A data file's key is `<prefix>/<relative path>`, the relative path a local warehouse uses
(`warehouse.layout.events_relative`): content-addressed by the trace's sha256, written once and
never changed, and visible to readers only once a manifest commit names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.dataset as ds
from pyarrow import fs

__all__ = ["LakeFiles"]


@dataclass(frozen=True)
class LakeFiles:
    """The objects under one warehouse URI, named by their path relative to it."""

    uri: str
    storage: Mapping[str, str]

    @cached_property
    def filesystem(self) -> fs.S3FileSystem:
        endpoint = self.storage.get("AWS_ENDPOINT_URL")
        kwargs: dict[str, object] = {}
        if endpoint:
            parsed = urlparse(endpoint)
            kwargs["endpoint_override"] = parsed.netloc or endpoint
            kwargs["scheme"] = parsed.scheme or "https"
        if self.storage.get("AWS_ACCESS_KEY_ID"):
            kwargs["access_key"] = self.storage["AWS_ACCESS_KEY_ID"]
            kwargs["secret_key"] = self.storage.get("AWS_SECRET_ACCESS_KEY")
            kwargs["session_token"] = self.storage.get("AWS_SESSION_TOKEN")
        if self.storage.get("AWS_REGION"):
            kwargs["region"] = self.storage["AWS_REGION"]
        return fs.S3FileSystem(**kwargs)

    def key(self, relative: str) -> str:
        """`bucket/prefix/relative`, the path pyarrow's S3 filesystem takes."""
        return f"{self.uri[len('s3://') :]}/{relative}"

    def size(self, relative: str) -> int | None:
        """The object's size, None when there is none."""
        info = self.filesystem.get_file_info(self.key(relative))
        return info.size if info.type == fs.FileType.File else None

    def put(self, local: str, relative: str) -> bool:
        """Upload `local` as `relative` unless an object of its size is there already (the same
        content: the name holds its trace's sha256); returns whether it uploaded. One PUT (or a
        multipart upload completed at its end): a killed upload leaves no object."""
        import os

        if self.size(relative) == os.path.getsize(local):
            return False
        fs.copy_files(
            local,
            self.key(relative),
            source_filesystem=fs.LocalFileSystem(),
            destination_filesystem=self.filesystem,
        )
        return True

    def open(self, relative: str) -> pa.NativeFile:
        """A readable file (for `pq.ParquetFile`, `pq.read_table`)."""
        return self.filesystem.open_input_file(self.key(relative))

    def get(self, relative: str, local: str) -> None:
        """Download the object `relative` to the local path `local` (its folder must exist)."""
        fs.copy_files(
            self.key(relative),
            local,
            source_filesystem=self.filesystem,
            destination_filesystem=fs.LocalFileSystem(),
        )

    def read_bytes(self, relative: str) -> bytes:
        with self.filesystem.open_input_stream(self.key(relative)) as f:
            return f.read()

    def dataset(
        self, relatives: Sequence[str], schema: pa.Schema, constants: Sequence[ds.Expression]
    ) -> ds.FileSystemDataset:
        """The files as one Arrow dataset of `schema`; `constants[i]` gives columns the i-th file
        does not store (`field == value`: an events file's `trace_sha256` is its name)."""
        return ds.FileSystemDataset.from_paths(
            [self.key(r) for r in relatives],
            schema=schema,
            format=ds.ParquetFileFormat(),
            filesystem=self.filesystem,
            partitions=list(constants),
        )
