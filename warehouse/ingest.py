"""Ingest trace files into the warehouse: hash, skip what is known, parse, stage, commit.

A file whose sha256 the manifest already holds for its job is unchanged and not read again;
others are streamed by the reader into a staged Parquet file (hashed as they are read), then
committed under the warehouse's `flock`: re-read the manifest, place a later profiling window in
its own job (`warehouse.windows`), refuse a second file claiming a held (job, rank), rename the
data files into place and append the manifest rows as one atomically renamed part. The manifest
is the commit point, so a killed process leaves nothing visible. The steps in full:
docs/warehouse.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from warehouse import windows
from warehouse.errors import TraceError
from warehouse.ingest_process import prepare_ingest_worker
from warehouse.jobs import (
    RANK_UNKNOWN,
    PlannedFile,
    job_from_trace,
    plan_inputs,
    provisional_rank,
    resolve_job,
    resolve_rank,
)
from warehouse.layout import (
    PARQUET_COMPRESSION,
    Layout,
    events_relative,
    fsync_path,
    trace_meta_relative,
)
from warehouse.location import warehouse_location
from warehouse.manifest import Manifest, append_rows, commit_lock, compact, read_manifest
from warehouse.readers.columns import POOL
from warehouse.readers.source import HashedFile
from warehouse.schema import EVENT_FILE, TRACE_META

if TYPE_CHECKING:
    from warehouse.lake_ingest import LakeStore

__all__ = [
    "FileOutcome",
    "IngestProgress",
    "IngestReport",
    "LocalStore",
    "Placement",
    "decide",
    "ingest",
]

ROW_GROUP_ROWS = 1_000_000
# A row group is flushed early when its buffered batches pass this size: bounds memory on traces
# with huge `args`.
ROW_GROUP_BYTES = 192 * 1024 * 1024
# batches waiting for the Parquet writer thread at most (see _WriterThread)
QUEUE_BATCHES = 16
# A worker process is started per this many bytes of JSON to parse (see _pool_size); gzip'd
# Kineto traces are ~10-20x smaller than their JSON, GZIP_RATIO is the low end.
POOL_BYTES_PER_WORKER = 256 << 20
GZIP_RATIO = 10
# Results are committed in batches at most this far apart, so a killed ingest loses little.
COMMIT_EVERY_S = 1.0
# Marks a refusal caused by a bug rather than by the file: such files are retried on every ingest.
INTERNAL_ERROR = "internal error while reading"
# a refusal about where a file goes (a rank another file holds) rather than what it holds
RANK_HELD = "is already held by"
# refusals worth another try when the same file comes again: a reader fault, or a placement
# that depends on the other files (given with it, or already in the warehouse), which may have
# changed since
RETRIED_REFUSALS = (INTERNAL_ERROR, RANK_HELD, RANK_UNKNOWN)
# Dictionary-encode the repetitive strings only: on the free-text JSON columns the dictionary
# overflows and costs 3x the write time for a bigger file (measured on df_index_resolver).
_NO_DICTIONARY = {"args_json", "input_dims"}
EVENT_DICTIONARY_COLUMNS = [
    f.name for f in EVENT_FILE if pa.types.is_string(f.type) and f.name not in _NO_DICTIONARY
]
# Row-group statistics where a filter can use them: numbers (time ranges, ranks, ids) and the
# file keys. A 1M-row group spans every name and category, so their min/max prune nothing, and
# computing them on every string was 7% of the Parquet write.
EVENT_STATISTICS_COLUMNS = [
    f.name for f in EVENT_FILE if not pa.types.is_string(f.type) or f.name == "job"
]
# Columns that mostly increase from event to event (an index, timestamps, ids handed out in
# order) are stored as deltas: on the 1 GB trace, 9% less write time, a 21% smaller file, and
# DuckDB reads these five columns 2.5x faster than zstd'd plain values.
EVENT_DELTA_COLUMNS = ["event_idx", "ts_ns", "external_id", "correlation", "flow_id"]


@dataclass(frozen=True)
class IngestProgress:
    """Passed to the progress callback after each file."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    events_done: int
    path: str


@dataclass
class FileOutcome:
    """What happened to one input file.

    `action` is 'ingested' (new events written), 'refused' (newly recorded as refused),
    'unchanged' (already in the warehouse with this content: nothing written) or
    'still refused' (refused before, unchanged, nothing written). `status` is the manifest status.
    """

    path: str
    job: str
    rank: int | None
    sha256: str
    size_bytes: int
    action: str
    status: str
    error: str | None = None
    n_events: int = 0
    note: str = ""


@dataclass
class IngestReport:
    warehouse: Path | str  # a directory, or an s3:// URI
    files: list[FileOutcome] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)  # job -> how its name was chosen
    # arguments that held nothing to ingest while others did: (path, why)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    catalog: Path | None = None

    @property
    def refused(self) -> list[FileOutcome]:
        return [f for f in self.files if f.status == "refused"]

    @property
    def ingested(self) -> list[FileOutcome]:
        return [f for f in self.files if f.action == "ingested"]

    @property
    def unchanged(self) -> list[FileOutcome]:
        """Files already in the warehouse as they are (a file refused again is counted once, as
        refused: the summary's counts add up to the files)."""
        return [f for f in self.files if f.action == "unchanged"]

    @property
    def n_events(self) -> int:
        return sum(f.n_events for f in self.ingested)

    @property
    def bytes_read(self) -> int:
        return sum(f.size_bytes for f in self.files if f.action in ("ingested", "refused"))

    def summary(self) -> str:
        mb = self.bytes_read / 1e6
        rate = ""
        if self.seconds > 0 and self.n_events:
            rate = f", {self.n_events / self.seconds:,.0f} events/s"
        return (
            f"{len(self.files)} file(s): {len(self.ingested)} ingested, "
            f"{len(self.unchanged)} unchanged, {len(self.refused)} refused"
            f"{f', {len(self.skipped)} argument(s) skipped' if self.skipped else ''}; "
            f"{self.n_events:,} events from {mb:.1f} MB of files in {self.seconds:.2f} s{rate}"
        )


# ----------------------------------------------------------------------------- parsing (workers)


@dataclass(frozen=True)
class _Task:
    index: int
    planned: PlannedFile
    staging: str


@dataclass
class _Staged:
    """A parsed file waiting in staging (or the reason it was refused)."""

    index: int
    sha256: str = ""
    error: str | None = None
    job: str = ""
    job_source: str = ""
    rank: int | None = None
    rank_source: str | None = None
    n_events: int = 0
    events_tmp: str | None = None
    meta_tmp: str | None = None
    manifest: dict = field(default_factory=dict)


def _meta_get(meta, name: str, default=None):
    if isinstance(meta, dict):
        return meta.get(name, default)
    return getattr(meta, name, default)


def _constant(value, n: int, type_: pa.DataType) -> pa.Array:
    """`value` repeated n times. Strings are laid out directly (offsets i * len, the bytes
    repeated): a `take` of a one-row array cost 12 ms per million rows of a 64-char sha256."""
    if pa.types.is_integer(type_):
        return pa.array(np.full(n, value), type_)
    raw = str(value).encode()
    if len(raw) * n < 2**31:  # int32 offsets
        offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])
    return pa.array([value], type_).take(np.zeros(n, dtype=np.int32))


# EVENT_FILE as handed to the Parquet writer: the job, one value per file, as a dictionary of
# that value, which the writer stores as it is instead of hashing every row (2 ms per 200k
# rows). The file keeps no Arrow schema (`store_schema=False`), so it reads back as EVENT_FILE.
_JOB_TYPE = pa.dictionary(pa.int32(), pa.string())
EVENT_WRITE = EVENT_FILE.set(0, pa.field("job", _JOB_TYPE, nullable=False))


def _job_column(job: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, dtype=np.int32)), pa.array([job], pa.string())
    )


class _KeyColumns:
    """The job and rank columns of a file's batches: built once at the largest batch's length
    and sliced (zero-copy) for the others, instead of once per batch."""

    def __init__(self) -> None:
        self.key: tuple[str, int] | None = None
        self.arrays: list[pa.Array] = []

    def get(self, job: str, rank: int, n: int) -> list[pa.Array]:
        if self.key != (job, rank) or len(self.arrays[0]) < n:
            self.key = (job, rank)
            self.arrays = [_job_column(job, n), _constant(rank, n, pa.int32())]
        return [a.slice(0, n) for a in self.arrays]


def _with_keys(batch: pa.RecordBatch, job: str, rank: int, cache: _KeyColumns) -> pa.RecordBatch:
    keys = cache.get(job, rank, batch.num_rows)
    return pa.RecordBatch.from_arrays(keys + list(batch.columns), schema=EVENT_WRITE)


def _events_writer(path: str) -> pq.ParquetWriter:
    # Pages end at the 1 MiB default size only, not at Arrow's default of 20,000 rows: on the
    # mostly-null columns those short pages made the 1 GB trace's file 4 % bigger.
    return pq.ParquetWriter(
        path,
        EVENT_WRITE,
        store_schema=False,
        compression=PARQUET_COMPRESSION,
        use_dictionary=EVENT_DICTIONARY_COLUMNS,
        write_statistics=EVENT_STATISTICS_COLUMNS,
        column_encoding=dict.fromkeys(EVENT_DELTA_COLUMNS, "DELTA_BINARY_PACKED"),
        max_rows_per_page=ROW_GROUP_ROWS,
        memory_pool=POOL,
    )


class _RowGroupWriter:
    """Buffers batches into ~1M-row row groups (pyarrow writes one row group per call)."""

    def __init__(self, path: str) -> None:
        self.writer = _events_writer(path)
        self.buf: list[pa.RecordBatch] = []
        self.rows = 0
        self.nbytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.buf.append(batch)
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        if self.rows >= ROW_GROUP_ROWS or self.nbytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.writer.write_table(pa.Table.from_batches(self.buf), row_group_size=ROW_GROUP_ROWS)
        self.buf, self.rows, self.nbytes = [], 0, 0

    def close(self) -> None:
        self.flush()
        self.writer.close()


class _WriterThread:
    """Runs a _RowGroupWriter in a thread: Parquet encoding and zstd (pyarrow releases the GIL)
    overlap the parsing of the next chunks (the numba kernels release it too).

    The writer works in bursts: a row group (~0.2 s of encoding at 1M rows) is written when its
    batches are all there, and the reader makes a batch every ~13 ms meanwhile. A queue of one
    batch had the reader wait out every burst (1.4 s of the 1 GB trace's 4.8 s wall); QUEUE_BATCHES
    lets it parse through one (wall 4.77 -> 3.69 s, CPU unchanged, peak RSS 462 -> 540 MB: a batch
    holds one 4 MiB chunk's events)."""

    _DONE = object()

    def __init__(self, path: str) -> None:
        import queue
        import threading

        self.inner = _RowGroupWriter(path)
        self.queue: queue.Queue = queue.Queue(maxsize=QUEUE_BATCHES)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="parquet-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            batch = self.queue.get()
            if batch is self._DONE:
                return
            if self.error is None:
                try:
                    self.inner.write(batch)
                except BaseException as exc:  # re-raised in the parsing thread
                    self.error = exc

    def write(self, batch: pa.RecordBatch) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put(batch)

    def close(self) -> None:
        """Write what is queued, close the file; raises the writer's error, if any."""
        self._stop()
        if self.error is not None:
            raise self.error
        self.inner.close()

    def abort(self) -> None:
        """Stop without writing what is buffered (the file is deleted by the caller)."""
        self.error = self.error or RuntimeError("aborted")
        self._stop()
        self.inner.writer.close()

    def _stop(self) -> None:
        if self.thread.is_alive():
            self.queue.put(self._DONE)
            self.thread.join()


def _restamp(path: str, job: str, rank: int) -> None:
    """Rewrite a staged events file with the job/rank learnt from the trace's own metadata.

    Only needed when the trace's top-level keys came after its events, or the trace named a job or
    rank other than the file name suggested; done row group by row group (bounded memory).
    """
    src = pq.ParquetFile(path)
    tmp = path + ".restamp"
    with _events_writer(tmp) as writer:
        for i in range(src.num_row_groups):
            table = src.read_row_group(i)
            n = table.num_rows
            table = table.set_column(0, EVENT_WRITE.field("job"), _job_column(job, n))
            table = table.set_column(1, EVENT_FILE.field("rank"), _constant(rank, n, pa.int32()))
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    src.close()
    os.replace(tmp, path)


def _early_keys(planned: PlannedFile, meta, fallback_rank: int) -> tuple[str, int]:
    top_level = dict(_meta_get(meta, "top_level", {}) or {})
    job = resolve_job(planned, top_level)[0]
    try:
        rank = resolve_rank(planned, None, top_level)[0]
    except TraceError:
        rank = fallback_rank
    return job, rank


def _parse_one(task: _Task) -> _Staged:
    """Parse one file into staging. Runs in a worker process (or inline when workers == 1)."""
    from warehouse.readers import open_trace

    planned = task.planned
    out = _Staged(task.index, job=planned.job)
    base = Path(task.staging) / f"{task.index:06d}"
    events_tmp, meta_tmp = str(base) + ".events.parquet", str(base) + ".meta.parquet"
    job, rank = planned.job, provisional_rank(planned)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # bulk parsing allocates millions of objects; the cyclic GC costs 2-3x
    writer = None
    try:
        trace = open_trace(planned.path)
        writer = _WriterThread(events_tmp)
        key_columns = _KeyColumns()
        n = 0
        for batch in trace.batches():
            if n == 0:
                # Kineto writes its metadata before traceEvents, so the reader has usually seen
                # distributedInfo by now: stamping the right job and rank avoids a rewrite.
                job, rank = _early_keys(planned, trace.meta, rank)
            n += batch.num_rows
            writer.write(_with_keys(batch, job, rank, key_columns))
        writer.close()
        writer = None
        out.sha256 = trace.sha256  # set: the batches were read to the file's end
        meta = trace.meta
        top_level = dict(_meta_get(meta, "top_level", {}) or {})
        out.job, out.job_source = resolve_job(planned, top_level, _meta_get(meta, "rank"))
        out.rank, out.rank_source = resolve_rank(planned, _meta_get(meta, "rank"), top_level)
        if (out.job, out.rank) != (job, rank):
            _restamp(events_tmp, out.job, out.rank)
        keys = sorted(top_level)
        meta_table = pa.table(
            {
                "job": [out.job] * len(keys),
                "rank": [out.rank] * len(keys),
                "trace_sha256": [out.sha256] * len(keys),
                "key": keys,
                "value_json": [top_level[k] for k in keys],
            },
            schema=TRACE_META,
        )
        pq.write_table(meta_table, meta_tmp, compression=PARQUET_COMPRESSION)
        n_events = _meta_get(meta, "n_events", n)
        if n_events != n:
            raise TraceError(planned.path, f"reader reported {n_events} events but yielded {n}")
        if n == 0:
            raise TraceError(
                planned.path,
                "no events: its `traceEvents` is empty (the profiler recorded nothing)",
            )
        out.n_events = n
        out.events_tmp, out.meta_tmp = events_tmp, meta_tmp
        schema_version = _meta_get(meta, "schema_version")
        world_size = _meta_get(meta, "world_size")
        if world_size is not None and not 1 <= world_size < 2**31:
            raise TraceError(
                planned.path, f"distributedInfo.world_size {world_size} is out of range"
            )
        out.manifest = {
            "device": _meta_get(meta, "device"),
            "world_size": None if world_size is None else int(world_size),
            "schema_version": None if schema_version is None else str(schema_version),
            "trace_format": _meta_get(meta, "trace_format"),
            "first_ts_ns": _meta_get(meta, "first_ts_ns"),
            "last_ts_ns": _meta_get(meta, "last_ts_ns"),
        }
    except TraceError as exc:
        out.error = str(exc)
    except Exception as exc:  # a reader bug must not abort a fleet ingest; it is recorded loudly
        out.error = f"{planned.path}: {INTERNAL_ERROR} ({type(exc).__name__}: {exc})"
    finally:
        if writer is not None:
            try:
                writer.abort()
            except Exception:
                pass
        if gc_was_enabled:
            gc.enable()
    if not out.sha256:  # refused before the reading reached the end: the manifest row needs it
        out.sha256 = sha256_file(planned.path)
    if out.error:
        out.n_events, out.events_tmp, out.meta_tmp = 0, None, None
        for p in (events_tmp, meta_tmp, events_tmp + ".restamp"):
            Path(p).unlink(missing_ok=True)
        if out.rank_source is None:
            out.rank = None
    return out


# ----------------------------------------------------------------------------- helpers


def sha256_file(path: Path) -> str:
    """sha256 of the file's bytes, for a file that is not parsed (or whose reading stopped early):
    read as the reader reads it, through one reused buffer that stays in the CPU cache. Read-only
    mappings cost more: 0.94 against 0.77 s of CPU per GB, the difference being the page faults of
    every mapped page (the hash itself is ~0.59 s per GB)."""
    with HashedFile(path) as f:
        return f.sha256()


@contextmanager
def _run_staging(layout: Layout) -> Iterator[Path]:
    """A private staging folder, flock'ed for the life of this ingest so that other ingests can
    tell a live run's folder from a dead one's."""
    import fcntl

    run = layout.staging_dir / f"run-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    run.mkdir(parents=True)
    fd = os.open(run / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield run
    finally:
        os.close(fd)
        shutil.rmtree(run, ignore_errors=True)


def _clean_stale_staging(layout: Layout) -> None:
    """Remove staging folders of ingests that died (their lock is free)."""
    import fcntl

    if not layout.staging_dir.is_dir():
        return
    for run in layout.staging_dir.iterdir():
        lock = run / ".lock"
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            # A folder without its lock is either being created right now or half-deleted;
            # only remove it once it is old.
            if run.is_dir() and time.time() - run.stat().st_mtime > 3600:
                shutil.rmtree(run, ignore_errors=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # alive
        finally:
            os.close(fd)
        shutil.rmtree(run, ignore_errors=True)


def _sweep_dead_commit(layout: Layout, manifest: Manifest) -> int:
    """Delete the data files a commit that died had placed without their manifest rows (the
    journal it left names them), and temporary files of killed manifest writes. Call under the
    commit lock: a journal seen there is a dead commit's, since a commit holds the lock for the
    journal's whole life.

    The journal replaces a walk of the whole events and trace_meta trees on every ingest, which
    took 0.65 s of CPU under the lock at 20k traces (1.7 s with pathlib) and grew with the fleet.
    """
    removed = 0
    for tmp in layout.manifest_dir.glob("*.tmp"):
        tmp.unlink(missing_ok=True)
        removed += 1
    try:
        placed = json.loads(layout.journal_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return removed
    except ValueError:  # torn before its rename: nothing was placed yet
        placed = []
    for job, rank, sha in placed:
        row = manifest.get(job, sha)
        if row is not None and row["status"] == "ok" and row["rank"] == rank:
            continue
        for path in (layout.events_file(job, rank, sha), layout.trace_meta_file(job, rank, sha)):
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
            except OSError:  # a path that cannot be named (a name too long) was never placed
                continue
    layout.journal_path.unlink(missing_ok=True)
    return removed


def _write_journal(layout: Layout, placed: list[tuple[str, int, str]]) -> None:
    """Name the files about to be renamed into place, durably, before the first rename."""
    tmp = layout.journal_path.with_name(f"{layout.journal_path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(placed), encoding="utf-8")
    fsync_path(tmp)
    os.replace(tmp, layout.journal_path)
    fsync_path(layout.root)


def _manifest_row(
    *,
    job: str,
    rank: int | None,
    path: Path,
    sha256: str,
    size: int,
    status: str,
    error: str | None,
    n_events: int,
    rank_source: str | None,
    events_file: str | None,
    extra: dict | None = None,
) -> dict:
    row = {
        "job": job,
        "rank": rank,
        "path": str(path),
        "sha256": sha256,
        "size_bytes": size,
        "status": status,
        "error": error,
        "n_events": n_events,
        "rank_source": rank_source,
        "events_file": events_file,
        "ingested_at": time.time_ns() // 1000,  # microseconds, as `Manifest` rows have it
    }
    row.update(extra or {})
    return row


@dataclass(frozen=True)
class Placement:
    """A staged trace a commit makes visible: its (job, rank, sha256), its staged files and
    where they go, relative to the warehouse (a folder or an S3 prefix)."""

    job: str
    rank: int
    sha256: str
    events_tmp: str
    meta_tmp: str
    events_file: str
    meta_file: str


def decide(
    batch: list[tuple[_Task, int, _Staged]],
    manifest: Manifest,
    outcomes: dict[int, FileOutcome],
    events_path: Callable[[str], str | Path],
) -> tuple[list[dict], list[Placement]]:
    """What a commit of `batch` does against `manifest` (the latest rows): the outcome of each
    file (into `outcomes`), the manifest rows to append and the staged files to place. Shared
    by the local commit and the S3 one (`warehouse.lake_ingest`); `events_path` turns a row's
    `events_file` into a path `windows.profiler_steps` can read."""
    rows: list[dict] = []
    placed: list[Placement] = []
    pending: dict[str, str] = {}  # events_file of a row of this batch -> its staged file
    in_batch: dict[tuple[str, str], dict] = {}
    # job -> rank -> the ok row holding it (a job's rows at hand for the window check)
    holders: dict[str, dict[int, dict]] = {}
    for (j, r), row in manifest.ok_by_rank.items():
        holders.setdefault(j, {})[r] = row
    for task, size, staged in batch:
        planned = task.planned
        sha = staged.sha256
        job = staged.job
        prev = in_batch.get((job, sha)) or manifest.get(job, sha)
        window_note = None
        if staged.error is None and (prev is None or prev["status"] != "ok"):
            job, window_note = _window(events_path, staged, holders.get(staged.job, {}), pending)
            if job != staged.job:
                prev = in_batch.get((job, sha)) or manifest.get(job, sha)
                if prev is None or prev["status"] != "ok":
                    _restamp(staged.events_tmp, job, staged.rank)
                    _restamp_meta(staged.meta_tmp, job)
                staged.job = job
        outcome = FileOutcome(str(planned.path), job, staged.rank, sha, size, "refused", "refused")
        if staged.error is None:
            holder = holders.get(job, {}).get(staged.rank)
            if prev is not None and prev["status"] == "ok":
                outcome.action, outcome.status = "unchanged", "ok"
                outcome.n_events = prev["n_events"]
                outcome.note = f"same content already ingested from {prev['path']}"
                outcome.rank = prev["rank"]
                _discard(staged)
            elif holder is not None and holder["sha256"] != sha:
                staged.error = (
                    f"{planned.path}: job {job!r} rank {staged.rank} {RANK_HELD} "
                    f"{holder['path']} (sha256 {holder['sha256'][:12]}...) with different "
                    "content; give this file another job (--job) or rank"
                )
                _discard(staged)
            else:
                events = events_relative(job, staged.rank, sha)
                placed.append(
                    Placement(
                        job,
                        staged.rank,
                        sha,
                        staged.events_tmp,
                        staged.meta_tmp,
                        events,
                        trace_meta_relative(job, staged.rank, sha),
                    )
                )
                pending[events] = staged.events_tmp
                row = _manifest_row(
                    job=job,
                    rank=staged.rank,
                    path=planned.path,
                    sha256=sha,
                    size=size,
                    status="ok",
                    error=None,
                    n_events=staged.n_events,
                    rank_source=staged.rank_source,
                    events_file=events,
                    extra=staged.manifest,
                )
                rows.append(row)
                in_batch[(job, sha)] = row
                holders.setdefault(job, {})[staged.rank] = row
                outcome.action, outcome.status = "ingested", "ok"
                outcome.n_events = staged.n_events
                outcome.note = f"job from {staged.job_source}, rank from {staged.rank_source}"
                if window_note:
                    outcome.note += f"; {window_note}"
        if staged.error is not None:
            outcome.error = staged.error
            if prev is not None and prev["status"] == "refused" and prev["error"] == staged.error:
                outcome.action = "still refused"
            else:
                row = _manifest_row(
                    job=job,
                    rank=staged.rank,
                    path=planned.path,
                    sha256=sha,
                    size=size,
                    status="refused",
                    error=staged.error,
                    n_events=0,
                    rank_source=staged.rank_source,
                    events_file=None,
                )
                rows.append(row)
                in_batch[(job, sha)] = row
        outcomes[task.index] = outcome
    return rows, placed


def _commit(
    layout: Layout,
    batch: list[tuple[_Task, int, _Staged]],
    outcomes: dict[int, FileOutcome],
    decide: Callable[..., tuple[list[dict], list[Placement]]],
) -> None:
    """Move a batch of staged files into place and record them. Holds the commit lock."""
    with commit_lock(layout):
        manifest = read_manifest(layout)
        _sweep_dead_commit(layout, manifest)  # one that died since this ingest began
        rows, placed = decide(batch, manifest, outcomes, lambda rel: layout.root / rel)
        if placed:
            moves = [(p.events_tmp, layout.root / p.events_file) for p in placed]
            moves += [(p.meta_tmp, layout.root / p.meta_file) for p in placed]
            # the files' bytes reach the disk before the manifest row that makes them visible:
            # after a power cut an ok row never points at an incomplete file
            for src, _ in moves:
                fsync_path(src)
            _write_journal(layout, [(p.job, p.rank, p.sha256) for p in placed])
            made: set[Path] = set()
            for src, dst in moves:
                if not dst.parent.is_dir():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    made.update(dst.parents[:3])  # rank=, job= and the table's folder
                os.replace(src, dst)
            for folder in {dst.parent for _, dst in moves} | made:
                fsync_path(folder)  # the renames (and new partition folders) are durable too
        append_rows(layout, rows)  # the commit point: last
        layout.journal_path.unlink(missing_ok=True)
        compact(layout)


def _window(
    events_path: Callable[[str], str | Path],
    staged: _Staged,
    held: dict[int, dict],
    pending: dict[str, str],
) -> tuple[str, str | None]:
    """The job a staged file goes to: its own, or a later profiling window of it
    (`warehouse.windows`), with a note saying why. `held`: rank -> ok row of its job;
    `pending`: where the events of rows of the same commit still are (staged)."""
    job = staged.job
    if not held or staged.events_tmp is None:
        return job, None
    holder = held.get(staged.rank)
    apart = not any(windows.overlaps(staged.manifest, row) for row in held.values())
    if holder is None and not apart:
        return job, None
    mine = windows.profiler_steps(staged.events_tmp)
    other = holder if holder is not None else next(iter(held.values()))
    if not mine or not other.get("events_file"):
        return job, None
    theirs = windows.profiler_steps(
        pending.get(other["events_file"]) or events_path(other["events_file"])
    )
    if not theirs or mine & theirs:
        return job, None
    to = windows.window_job(job, mine)
    return to, (
        f"another profiling window of job {job!r}: steps {min(mine)}-{max(mine)}, where "
        f"{other['path']} (rank {other['rank']}) holds steps {min(theirs)}-{max(theirs)}"
    )


def _restamp_meta(path: str | None, job: str) -> None:
    """Rewrite a staged trace_meta file for another job (a few rows)."""
    if path is None:
        return
    table = pq.read_table(path)
    table = table.set_column(
        0, TRACE_META.field("job"), _constant(job, table.num_rows, pa.string())
    )
    pq.write_table(table, path + ".restamp", compression=PARQUET_COMPRESSION)
    os.replace(path + ".restamp", path)


def _ingested_under_declared_job(
    open_file: Callable[[str], object], manifest: Manifest, sha: str
) -> dict | None:
    """The ok row of this content if it went to the job its trace names (which wins over the
    path's job whenever --job is not given), so that re-ingesting it is recognised unparsed."""
    for row in manifest.by_sha.get(sha, []):
        if row["status"] != "ok":
            continue
        try:
            meta = open_file(trace_meta_relative(row["job"], row["rank"], sha))
            table = pq.ParquetFile(meta).read(columns=["key", "value_json"])
        except (OSError, pa.ArrowInvalid):
            continue
        keys, values = table.column("key").to_pylist(), table.column("value_json").to_pylist()
        top_level = dict(zip(keys, values, strict=True))
        if job_from_trace(top_level) == row["job"]:
            return row
    return None


def _discard(staged: _Staged) -> None:
    for p in (staged.events_tmp, staged.meta_tmp):
        if p:
            Path(p).unlink(missing_ok=True)


def _pool_size(workers: int, paths: Sequence[Path], sizes: Sequence[int]) -> int:
    """How many worker processes are worth starting for these files.

    A spawned worker costs ~1.5 CPU-seconds before it parses anything (imports, loading the
    numba kernels; ~12 s each if their cache is cold), about what parsing 150 MB of JSON costs.
    So a worker is only added per POOL_BYTES_PER_WORKER of (estimated uncompressed) JSON: a
    nightly job of a few small traces is parsed in this process instead of starting a pool.
    """
    if workers <= 1 or len(paths) <= 1:
        return 1
    from warehouse.readers.source import is_gzip

    est = sum(
        size * (GZIP_RATIO if is_gzip(p) else 1) for p, size in zip(paths, sizes, strict=True)
    )
    return max(1, min(workers, len(paths), est // POOL_BYTES_PER_WORKER))


class LocalStore:
    """A warehouse directory as an ingest writes it: commits under its flock, the manifest's
    renamed parts as the commit point (`warehouse.manifest`). `warehouse.lake_ingest.LakeStore`
    is the same for an S3 warehouse."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    @property
    def root(self) -> Path:
        return self.layout.root

    def begin(self) -> Manifest:
        """Make the warehouse, clean what dead ingests left; the manifest as it is now."""
        with commit_lock(self.layout):
            self.layout.ensure()
            _clean_stale_staging(self.layout)
            # the plan's view of the warehouse too: a read outside the lock would be no fresher
            # for long, and every commit checks its rows against the manifest again under it
            manifest = read_manifest(self.layout)
            _sweep_dead_commit(self.layout, manifest)
        return manifest

    def staging(self) -> contextlib.AbstractContextManager[Path]:
        return _run_staging(self.layout)

    def open_file(self, relative: str) -> Path:
        return self.layout.root / relative

    def commit(
        self,
        batch: list[tuple[_Task, int, _Staged]],
        outcomes: dict[int, FileOutcome],
        decide: Callable[..., tuple[list[dict], list[Placement]]],
    ) -> None:
        """Commit under the lock; `decide` says which rows and files (the ingest hands each
        store this module's `decide`: the S3 store imports nothing of this module back)."""
        _commit(self.layout, batch, outcomes, decide)

    def finish(self, report: IngestReport, *, build_catalog: bool) -> None:
        """The views read globs, so new files need no rebuild: only a missing or moved catalog."""
        from warehouse.catalog import build_catalog as _build
        from warehouse.catalog import catalog_is_current

        if build_catalog and not catalog_is_current(self.layout.root):
            _build(self.layout.root)
        if self.layout.catalog_path.exists():
            report.catalog = self.layout.catalog_path


def _store(warehouse: str | os.PathLike[str] | None) -> LocalStore | LakeStore:
    """Where an ingest commits: the directory, or the S3 warehouse (`warehouse.lake_ingest`)."""
    location = warehouse_location(warehouse)
    if isinstance(location, str):
        from warehouse.lake_ingest import LakeStore

        return LakeStore.at(location)
    return LocalStore(Layout(location))


# ----------------------------------------------------------------------------- entry point


def _known_files(
    open_file: Callable[[str], object],
    manifest: Manifest,
    planned: list[PlannedFile],
    shas: dict[int, str],
    sizes: list[int],
) -> tuple[dict[int, FileOutcome], list[int]]:
    """The outcome of each planned file the warehouse already holds (hashed first, `shas`):
    unchanged, or still refused; and the indices of the others, which are to be parsed."""
    outcomes: dict[int, FileOutcome] = {}
    todo: list[int] = []
    for i, p in enumerate(planned):
        sha = shas.get(i)
        if sha is None:
            todo.append(i)
            continue
        prev = manifest.get(p.job, sha)
        if prev is None and not p.job_given:
            prev = _ingested_under_declared_job(open_file, manifest, sha)
        if prev is None:  # a later profiling window of the job, placed at its first ingest
            prev = next(
                (
                    r
                    for r in manifest.by_sha.get(sha, [])
                    if r["status"] == "ok" and windows.is_window_of(r["job"], p.job)
                ),
                None,
            )
        if prev is None or (
            prev["status"] == "refused"
            and any(m in (prev["error"] or "") for m in RETRIED_REFUSALS)
        ):
            todo.append(i)
            continue
        status = prev["status"]
        outcomes[i] = FileOutcome(
            str(p.path),
            prev["job"],
            prev["rank"],
            sha,
            sizes[i],
            "unchanged" if status == "ok" else "still refused",
            status,
            prev["error"],
            prev["n_events"] if status == "ok" else 0,
            f"already in the warehouse (from {prev['path']})",
        )
    return outcomes, todo


def ingest(
    paths: Sequence[str | os.PathLike[str]],
    *,
    warehouse: str | os.PathLike[str] | None = None,
    job: str | None = None,
    workers: int = 1,
    progress: Callable[[IngestProgress], None] | None = None,
    build_catalog: bool = True,
) -> IngestReport:
    """Ingest trace files (or the trace files under directories) into `warehouse`.

    Raises `warehouse.jobs.InputError` (before touching the warehouse) when an argument does not
    exist, or when no argument holds a trace file; a directory without trace files among others
    that have some is listed in `report.skipped`. Refused files are recorded in the manifest and
    listed in the report; they do not raise.
    """
    t0 = time.perf_counter()
    if job is not None and not job.strip():
        raise ValueError("--job cannot be empty")
    skipped: list[tuple[str, str]] = []
    planned = plan_inputs(list(paths), job, skipped)
    store = _store(warehouse)
    report = IngestReport(store.root, skipped=skipped)
    manifest = store.begin()

    sizes = [p.path.stat().st_size for p in planned]
    # Only a file of a size the warehouse has seen can be in it already: those are hashed first,
    # to skip them unparsed. Every other file is hashed by the reading that parses it.
    seen_sizes = {r["size_bytes"] for r in manifest.rows}
    first = [i for i, size in enumerate(sizes) if size in seen_sizes]
    with ThreadPoolExecutor(max(1, workers)) as pool:  # hashlib releases the GIL
        shas = dict(
            zip(first, pool.map(sha256_file, (planned[i].path for i in first)), strict=True)
        )

    outcomes, todo = _known_files(store.open_file, manifest, planned, shas, sizes)

    bytes_total = sum(sizes)
    done_bytes = sum(sizes[i] for i in outcomes)
    done_events = 0

    files_done = len(outcomes)

    def tick(i: int) -> None:
        nonlocal done_bytes, files_done
        done_bytes += sizes[i]
        files_done += 1
        if progress is not None:
            progress(
                IngestProgress(
                    files_done,
                    len(planned),
                    done_bytes,
                    bytes_total,
                    done_events,
                    str(planned[i].path),
                )
            )

    ready: dict[int, _Staged] = {}
    if todo:
        with store.staging() as staging:
            tasks = {i: _Task(i, planned[i], str(staging)) for i in todo}
            order = iter(todo)
            next_i = next(order, None)
            pending: list[tuple[_Task, int, _Staged]] = []
            # the first staged file is committed at once: a kill loses at most what came after
            last_commit = -float("inf")

            def drain(force: bool) -> None:
                # commit staged files in input order, so "the second file" of a rank clash is the
                # later one on the command line whatever the worker timing
                nonlocal next_i, last_commit
                while next_i is not None and next_i in ready:
                    pending.append((tasks[next_i], sizes[next_i], ready.pop(next_i)))
                    next_i = next(order, None)
                if pending and (force or time.monotonic() - last_commit >= COMMIT_EVERY_S):
                    store.commit(pending, outcomes, decide)
                    pending.clear()
                    last_commit = time.monotonic()

            def received(staged: _Staged) -> None:
                nonlocal done_events
                ready[staged.index] = staged
                done_events += staged.n_events
                tick(staged.index)
                drain(force=False)

            n_procs = _pool_size(workers, [planned[i].path for i in todo], [sizes[i] for i in todo])
            if n_procs <= 1:
                for i in todo:
                    received(_parse_one(tasks[i]))
            else:
                import multiprocessing as mp

                # spawn, not fork: the parent already runs Arrow's thread pools
                ctx = mp.get_context("spawn")
                with ProcessPoolExecutor(
                    n_procs, mp_context=ctx, initializer=prepare_ingest_worker
                ) as pool:
                    futures: list[Future] = [pool.submit(_parse_one, tasks[i]) for i in todo]
                    for fut in as_completed(futures):
                        received(fut.result())
            drain(force=True)

    report.files = [outcomes[i] for i in range(len(planned))]
    for p, o in zip(planned, report.files, strict=True):
        if o.status == "ok" and windows.is_window_of(o.job, p.job):
            source = "window"
        elif o.status == "ok":
            by_path = o.job == p.job or o.job.startswith(p.job + "/")  # jobs.py rule 3
            source = "given" if p.job_given else ("path" if by_path else "trace")
        else:
            source = "given" if p.job_given else "path"
        report.jobs.setdefault(o.job, source)
    store.finish(report, build_catalog=build_catalog)
    report.seconds = time.perf_counter() - t0
    return report
