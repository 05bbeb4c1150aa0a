"""The manifest: which files the warehouse has seen, and what became of each.

It is stored as append-only Parquet parts (schema `TRACES`), each written to a temporary file and
renamed, so a commit is one atomic rename. Commits happen under an exclusive `flock` on
`<wh>/.commit.lock`, which serialises the read-check-write of concurrent ingests. The current state
of a file is the latest row per (job, sha256); older rows stay as history (compaction keeps only
the latest ones).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.layout import Layout, write_parquet_atomic
from warehouse.schema import TRACES

__all__ = ["Manifest", "append_rows", "commit_lock", "compact", "read_manifest"]

# Past this many parts, a commit merges them into one. An ingest reads the whole manifest twice
# (planning, then each commit): at 40 parts that was 80 ms of every call, which a nightly run of
# one call per job pays per job; merging costs one read and one write of the rows.
COMPACT_AFTER_PARTS = 16
# How long a part merged away stays on disk: a query lists the parts and opens them moments
# later; one that listed them just before a merge must still find them (without
# the grace, 3 of 2,986 queries during 60 small ingests failed with "Cannot open file").
RETIRED_GRACE_S = 600.0


@contextmanager
def commit_lock(layout: Layout) -> Iterator[None]:
    """Hold the warehouse's exclusive commit lock (blocks until it is free)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class Manifest:
    """The latest manifest row per (job, sha256), as plain dicts, with the lookups ingest needs
    (`by_sha` and `ok_by_rank` built on first use: a commit needs one of them). A row's
    `ingested_at` is integer microseconds since the epoch (UTC): tz-aware datetimes cost 2.4 us
    each to make, 0.12 s of a process's first read at 50k rows."""

    def __init__(self, latest: dict[tuple[str, str], dict]) -> None:
        self.by_key = latest
        self.rows = list(latest.values())

    @cached_property
    def by_sha(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.rows:
            out.setdefault(r["sha256"], []).append(r)
        return out

    @cached_property
    def ok_by_rank(self) -> dict[tuple[str, int], dict]:
        return {(r["job"], r["rank"]): r for r in self.rows if r["status"] == "ok"}

    def get(self, job: str, sha256: str) -> dict | None:
        return self.by_key.get((job, sha256))

    def ok_files(self) -> set[str]:
        """Relative paths of the events and trace_meta files that committed rows point to."""
        out = set()
        for r in self.rows:
            if r["status"] == "ok" and r["events_file"]:
                out.add(r["events_file"])
        return out


def _read_part(path: Path) -> pa.Table:
    """One part, as TRACES (a column an older part lacks is null). `ParquetFile`, not
    `pq.read_table`: the latter goes through pyarrow.dataset, whose import costs ~0.3 s in every
    `lumos ingest`."""
    table = pq.ParquetFile(path).read()
    n = table.num_rows
    return pa.Table.from_arrays([_column(table, f, n) for f in TRACES], schema=TRACES)


def _column(table: pa.Table, f: pa.Field, n: int) -> pa.ChunkedArray | pa.Array:
    if f.name not in table.column_names:
        return pa.nulls(n, f.type)
    col = table.column(f.name)
    # a cast goes through pyarrow.compute, whose import costs 0.05 s: only when types differ
    return col if col.type == f.type else col.cast(f.type)


# What this process last read of each warehouse's manifest: the parts (name, size, mtime) and
# the latest rows they gave. Parts never change once renamed into place (a commit adds one, a
# merge replaces them all), so a later read parses only the parts added since, as long as the
# parts read before are all still there, first in order; otherwise it reads everything again.
# An ingest reads the manifest before every commit: at 50k rows (a fleet's months) a whole read
# was 0.35 s, each commit's.
_READ: dict[Path, tuple[tuple[tuple[str, int, int], ...], dict[tuple[str, str], dict]]] = {}


def read_manifest(layout: Layout) -> Manifest:
    """The latest row per (job, sha256). Ties on `ingested_at` go to the later part file.
    The rows are shared with later reads in this process: read them, do not change them."""
    try:
        return _read_since(layout)
    except FileNotFoundError:  # a part merged away since the listing: read from scratch
        _READ.pop(layout.root, None)
        return _read_since(layout)


def _read_since(layout: Layout) -> Manifest:
    parts = layout.manifest_parts()
    stamps = tuple((p.name, (st := p.stat()).st_size, st.st_mtime_ns) for p in parts)
    seen, latest = _READ.get(layout.root, ((), {}))
    if stamps[: len(seen)] != seen:
        seen, latest = (), {}
    latest = dict(latest)
    for part in parts[len(seen) :]:
        _keep_latest(latest, _rows(_read_part(part)))
    _READ[layout.root] = (stamps, latest)
    return Manifest(latest)


def _rows(table: pa.Table) -> list[dict]:
    """The table's rows as dicts, `ingested_at` as integer microseconds (see `Manifest`); built
    column by column (`Table.to_pylist` is row by row, 2x slower)."""
    columns = []
    for f in TRACES:
        col = table.column(f.name)
        if pa.types.is_timestamp(f.type):
            columns.append([x for c in col.chunks for x in c.view(pa.int64()).to_pylist()])
        else:
            columns.append(col.to_pylist())
    names = TRACES.names  # a new list on every access
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _keep_latest(latest: dict[tuple[str, str], dict], rows: list[dict]) -> None:
    for row in rows:  # parts are in time order, rows in commit order
        key = (row["job"], row["sha256"])
        prev = latest.get(key)
        if prev is None or row["ingested_at"] >= prev["ingested_at"]:
            latest[key] = row


def append_rows(layout: Layout, rows: Sequence[dict]) -> Path | None:
    """Append rows as one new part (atomic). Call under `commit_lock`."""
    if not rows:
        return None
    table = pa.Table.from_pylist(list(rows), schema=TRACES)
    part = layout.new_manifest_part()
    # Uncompressed: a part holds one commit's rows (a few kB), and every ingest reads every part
    # until compaction; zstd'd, each read set up a decompressor per column (0.6 ms a part
    # against 0.35 ms). The compacted part, which can hold a fleet's rows, stays zstd'd.
    write_parquet_atomic(table, part, compression="none")
    return part


def compact(layout: Layout, *, min_parts: int = COMPACT_AFTER_PARTS) -> bool:
    """Merge the live parts into one holding the latest row per (job, sha256). Call under the
    lock.

    The merged part is renamed in before the old parts are retired; a crash in between leaves
    duplicate rows, which the latest-row rule resolves to the same answer. A retired part stays
    on disk for `RETIRED_GRACE_S` (a query that listed it before the merge can still open it:
    the views' latest-row rule reads its rows as the duplicates they are) and is removed by a
    later compaction (or commit) after that.
    """
    _purge_retired(layout)
    parts = layout.manifest_parts()
    if len(parts) < min_parts:
        return False
    rows = read_manifest(layout).rows
    rows.sort(key=lambda r: (r["ingested_at"], r["job"], r["path"]))
    merged = layout.new_manifest_part()
    write_parquet_atomic(pa.Table.from_pylist(rows, schema=TRACES), merged)
    retired = layout.retired_parts()
    now = time.time()
    retired.update({p.name: now for p in parts})
    _write_retired(layout, retired)
    # what a read of the merged part would give, without reading it
    st = merged.stat()
    _READ[layout.root] = (
        ((merged.name, st.st_size, st.st_mtime_ns),),
        {(r["job"], r["sha256"]): r for r in rows},
    )
    return True


def _purge_retired(layout: Layout, now: float | None = None) -> None:
    """Remove the retired parts older than `RETIRED_GRACE_S`. Call under the lock."""
    retired = layout.retired_parts()
    if not retired:
        return
    now = time.time() if now is None else now
    old = {name for name, when in retired.items() if now - when >= RETIRED_GRACE_S}
    if not old:
        return
    for name in old:
        (layout.manifest_dir / name).unlink(missing_ok=True)
    _write_retired(layout, {k: v for k, v in retired.items() if k not in old})


def _write_retired(layout: Layout, retired: dict[str, float]) -> None:
    import json
    import uuid

    tmp = layout.retired_path.with_name(f"{layout.retired_path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(retired), encoding="utf-8")
    os.replace(tmp, layout.retired_path)
