"""Where everything lives inside a warehouse directory.

    <wh>/events/job=<enc>/rank=<r>/<sha256>.parquet       one file per ingested trace
    <wh>/trace_meta/job=<enc>/rank=<r>/<sha256>.parquet   its top-level keys (deviceProperties, ...)
    <wh>/manifest/part-<time>-<uuid>.parquet              append-only manifest parts (schema TRACES)
    <wh>/<table>/_schema.parquet                          0 rows, the table's schema: keeps the
                                                          catalog's globs valid on an empty table
    <wh>/_staging/<run>/                                  one ingest process's work in progress
    <wh>/.commit.lock                                     flock held while committing
    <wh>/lumos.duckdb                                     the catalog of views

Job names are free text (they may contain `/`, spaces, `=`), so the `job=` directory holds an
escaped form; the real name is stored inside every file.
"""

from __future__ import annotations

import os
import re
import stat
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.location import local_warehouse
from warehouse.schema import EVENTS, TRACE_META, TRACES

__all__ = [
    "Layout",
    "decode_job",
    "encode_job",
    "events_relative",
    "find_trace_files",
    "is_trace_file",
    "trace_meta_relative",
    "write_parquet_atomic",
]

TRACE_SUFFIXES: tuple[str, ...] = (".json", ".json.gz")
CATALOG_NAME = "lumos.duckdb"
SCHEMA_FILE = "_schema.parquet"
PARQUET_COMPRESSION = "zstd"

# Characters kept as they are in a `job=` directory name; everything else is %XX-escaped (UTF-8),
# which keeps the name reversible, portable and free of `/`.
_SAFE = re.compile(r"[A-Za-z0-9._\-]")


# Bytes a `job=` directory's encoded name may take: a path component holds 255 bytes on every
# common filesystem, and the name sits under `<table>/` beside `job=` and the files' own names.
JOB_DIR_MAX_BYTES = 160
# Characters of the name's sha256 that end an encoded name cut to JOB_DIR_MAX_BYTES: two names
# that share their first bytes stay apart (64 bits).
JOB_DIR_HASH_CHARS = 16


def encode_job(job: str) -> str:
    """The directory-safe form of a job name: %XX-escaped, reversible with `decode_job` when it
    fits `JOB_DIR_MAX_BYTES`; a longer one is cut there (never inside an escape) and ends with
    `~` and its name's sha256 prefix, so that it stays bounded and distinct. The job's real name
    is stored in every file; no reader parses it from the directory."""
    if not job:
        raise ValueError("a job name cannot be empty")
    out = []
    for ch in job:
        if _SAFE.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    text = "".join(out)
    if len(text) > JOB_DIR_MAX_BYTES:
        import hashlib

        digest = hashlib.sha256(job.encode("utf-8")).hexdigest()[:JOB_DIR_HASH_CHARS]
        keep = JOB_DIR_MAX_BYTES - JOB_DIR_HASH_CHARS - 1
        cut = text[:keep]
        pct = cut.rfind("%")
        if pct >= keep - 2:  # do not split an escape
            cut = cut[:pct]
        return f"{cut}~{digest}"
    # `.` and `..` are not usable directory names
    return text.replace(".", "%2E") if set(text) == {"."} else text


def decode_job(encoded: str) -> str:
    """Invert `encode_job` (for a name that was not cut: see there)."""
    from urllib.parse import unquote

    return unquote(encoded, encoding="utf-8", errors="strict")


def is_trace_file(path: Path) -> bool:
    """A non-hidden regular file named like a trace (`*.json`, `*.json.gz`, `*.pt.trace.json[.gz]`)."""
    name = path.name
    return not name.startswith(".") and name.lower().endswith(TRACE_SUFFIXES) and path.is_file()


# Files that live beside traces in a job folder and are never traces themselves: the ground-truth
# trainer's `measured.json` (lumos.groundtruth). Given explicitly they are still read and refused.
SIDECAR_NAMES = frozenset({"measured.json"})


def find_trace_files(directory: Path, skipped: list[str] | None = None) -> list[Path]:
    """Trace files under `directory` at any depth, sorted, skipping hidden files and folders and
    the known sidecar files (`SIDECAR_NAMES`). Linked folders are followed (each real folder
    once: a link back up is not walked again); a folder or trace file that cannot be read, a
    link walked already, or a name like a trace's that is no regular file (a broken link, a
    pipe) is named in `skipped` when given."""
    directory = Path(directory)
    notes: list[str] = [] if skipped is None else skipped
    out: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def unreadable(err: OSError) -> None:
        notes.append(f"{err.filename}: cannot be read ({err.strerror or err}): skipped")

    for folder, dirs, files in os.walk(directory, onerror=unreadable, followlinks=True):
        try:
            st = os.stat(folder)
        except OSError as err:
            unreadable(err)
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen:
            notes.append(f"{folder}: a link to a folder already walked: skipped")
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            p = Path(folder) / name
            if name.startswith(".") or name in SIDECAR_NAMES:
                continue
            if is_trace_file(p):
                why = cannot_read(p)
                if why is None:
                    out.append(p)
                else:
                    notes.append(f"{p}: {why}: skipped")
            elif name.lower().endswith(TRACE_SUFFIXES):
                notes.append(f"{p}: {_not_a_file(p)}, named like a trace: skipped")
    return sorted(out)


def cannot_read(path: Path) -> str | None:
    """Why the file cannot be opened for reading (its permissions, ...), or None when it can."""
    try:
        open(path, "rb").close()  # noqa: SIM115
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    return None


def _not_a_file(path: Path) -> str:
    """What a path that is not a regular file is (for the note that skips it)."""
    if path.is_symlink() and not path.exists():
        return f"a link to {os.readlink(path)}, which does not exist"
    try:
        mode = path.stat().st_mode
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    kinds = ((stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows. `Schema.empty_table` imports pandas (0.28 s) in a process that had
    not, which every first catalog build of a warehouse paid."""
    return pa.Table.from_batches([], schema=schema)


def keep_schema_file(folder: Path, schema: pa.Schema) -> None:
    """Keep `folder/_schema.parquet`, no rows and the table's current schema, beside a table's
    files: the views read with `union_by_name`, so every column of the schema is there (null in
    files written before it existed) and a query naming a new column works on a warehouse that
    holds only older files."""
    marker = folder / SCHEMA_FILE
    try:
        if pq.read_schema(marker).equals(schema, check_metadata=False):
            return
    except (OSError, pa.ArrowInvalid):
        pass  # missing, or not a Parquet file: written anew
    write_parquet_atomic(empty_table(schema), marker)


def temp_path(target: Path) -> Path:
    """A temporary file beside `target`, named with this process's id (`sweep_stale_temps`)."""
    return target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")


_TEMP_PID = re.compile(r"\.(\d+)-[0-9a-f]{32}\.tmp(\.wal)?$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_stale_temps(folders: list[Path]) -> int:
    """Remove the temporary files (`temp_path`) in `folders` whose writer is no longer running
    (a killed catalog build or replay left them); returns how many. A writer on another host
    sharing the folder is not seen: its files are kept unless its pid is reused here."""
    removed = 0
    for folder in folders:
        for tmp in folder.glob(".*.tmp*"):
            m = _TEMP_PID.search(tmp.name)
            if m and not _pid_alive(int(m.group(1))):
                tmp.unlink(missing_ok=True)
                removed += 1
    return removed


def write_parquet_atomic(
    table: pa.Table, target: Path, compression: str = PARQUET_COMPRESSION
) -> None:
    """Write `table` to a temporary file beside `target`, fsync it, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(target)
    try:
        pq.write_table(table, tmp, compression=compression)
        fsync_path(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_path(target.parent)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (so a rename survives a crash of the machine, not just ours)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def events_relative(job: str, rank: int, sha256: str) -> str:
    """Where a trace's events file lives, relative to the warehouse (a folder or an S3 prefix)."""
    return f"events/job={encode_job(job)}/rank={rank}/{sha256}.parquet"


def trace_meta_relative(job: str, rank: int, sha256: str) -> str:
    """Where a trace's trace_meta file lives, relative to the warehouse."""
    return f"trace_meta/job={encode_job(job)}/rank={rank}/{sha256}.parquet"


@dataclass(frozen=True)
class Layout:
    """Paths of one warehouse. `root` is made absolute so that paths stay valid after a chdir."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str] | None = None) -> Layout:
        return cls(local_warehouse(root))

    @property
    def events_dir(self) -> Path:
        return self.root / "events"

    @property
    def trace_meta_dir(self) -> Path:
        return self.root / "trace_meta"

    @property
    def manifest_dir(self) -> Path:
        return self.root / "manifest"

    @property
    def staging_dir(self) -> Path:
        return self.root / "_staging"

    @property
    def lock_path(self) -> Path:
        return self.root / ".commit.lock"

    @property
    def journal_path(self) -> Path:
        """The files a commit in progress is placing (`warehouse.ingest`): only a commit that
        died leaves it behind."""
        return self.root / ".commit.journal"

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_NAME

    def table_dirs(self) -> dict[str, tuple[Path, pa.Schema]]:
        return {
            "events": (self.events_dir, EVENTS),
            "trace_meta": (self.trace_meta_dir, TRACE_META),
            "traces": (self.manifest_dir, TRACES),
        }

    def events_file(self, job: str, rank: int, sha256: str) -> Path:
        return self.root / events_relative(job, rank, sha256)

    def trace_meta_file(self, job: str, rank: int, sha256: str) -> Path:
        return self.root / trace_meta_relative(job, rank, sha256)

    def new_manifest_part(self) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        return self.manifest_dir / f"part-{stamp}-{uuid.uuid4().hex[:12]}.parquet"

    @property
    def retired_path(self) -> Path:
        """The manifest parts a compaction merged away, kept a while for readers that listed
        them (`warehouse.manifest.compact`): name -> when (epoch seconds)."""
        return self.manifest_dir / "retired.json"

    def retired_parts(self) -> dict[str, float]:
        try:
            import json

            doc = json.loads(self.retired_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): float(v) for k, v in doc.items()} if isinstance(doc, dict) else {}

    def manifest_parts(self) -> list[Path]:
        """The live parts (a merged-away part still on disk for its grace period is not one)."""
        if not self.manifest_dir.is_dir():
            return []
        retired = self.retired_parts()
        return sorted(p for p in self.manifest_dir.glob("part-*.parquet") if p.name not in retired)

    def glob(self, table: str) -> str:
        """The DuckDB glob of a table's Parquet files (its `_schema.parquet` included)."""
        directory, _ = self.table_dirs()[table]
        return str(directory / "**" / "*.parquet")

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def exists(self) -> bool:
        return self.manifest_dir.is_dir()

    def ensure(self) -> None:
        """Create the directories and each table's empty `_schema.parquet` (idempotent)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.staging_dir.mkdir(exist_ok=True)
        for directory, schema in self.table_dirs().values():
            directory.mkdir(exist_ok=True)
            marker = directory / SCHEMA_FILE
            if not marker.exists():
                write_parquet_atomic(empty_table(schema), marker)
