"""A local warehouse mirroring one pinned version of an S3 warehouse, where `lumos replay`,
`estimate` and `sweep` compute as they do on a local one (their SQL, kernels and caches unchanged).

The manifest's rows of the chosen jobs as of one Delta version and their data files are copied
once into the cache folder (`warehouse.location.cache_folder`), keyed by the URI, the jobs and the
version, with the estimator's templates built from them; a data file is downloaded once per URI
(`objects/`) and hard-linked into each version's copy, so that a later version fetches only the
files its new rows add. Each run works in a private folder
beside it: the data files hard-linked, the templates folder shared, the latest committed result
files (`warehouse.lake_results`) downloaded; what the run writes there is committed back by
`publish` (files, then one Delta commit), and the folder is removed at the end, so a killed or
failed run leaves nothing another run would take for committed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from warehouse.lake import LakeManifest
from warehouse.lake_files import LakeFiles
from warehouse.lake_results import LakeResults
from warehouse.layout import Layout, decode_job, trace_meta_relative
from warehouse.location import cache_folder
from warehouse.windows import windows_of

__all__ = ["Mirror", "mirror"]

# a copy of an older manifest version (or a dead run's folder) is removed once this old
STALE_AFTER_S = 3600.0
# the folders of the shared copy a run links to: the data (hard links) and the templates (one
# folder, so that what one run's estimator learns serves the next)
_DATA = ("manifest", "events", "trace_meta")
_SHARED = "estimate_templates"


@dataclass(frozen=True)
class Mirror:
    """A run's local warehouse at `root` for the S3 warehouse `uri` (manifest `version`), and its
    result files as they were when it was handed out (relative path -> (size, mtime_ns)), which
    `publish` compares against."""

    uri: str
    root: Path
    version: int
    before: dict[str, tuple[int, int]]

    def publish(self) -> int:
        """Commit the result files written in the mirror since it was handed out (new, or
        changed) to the S3 warehouse, as one Delta commit; returns how many."""
        changed = [r for r, stat in _result_files(self.root).items() if self.before.get(r) != stat]
        return LakeResults.at(self.uri).commit(self.root, sorted(changed))


@contextmanager
def mirror(
    uri: str, jobs: Sequence[str] | None = None, *, with_windows: bool = False
) -> Iterator[Mirror]:
    """A private local warehouse holding `jobs` (None: every job; `with_windows`: and their later
    profiling windows, `<job>/steps-N`) of the S3 warehouse `uri` at its latest manifest version,
    with their latest committed result files; removed at the end (`Mirror.publish` first, to
    keep what was written)."""
    from warehouse.catalog import build_catalog
    from warehouse.handle import WarehouseNotFound

    lake = LakeManifest.at(uri)
    try:
        version = lake.version()
    except Exception as exc:  # deltalake's TableNotFoundError, or no such bucket
        raise WarehouseNotFound(
            f"{lake.uri}: no lumos warehouse here (no manifest table; run `lumos ingest PATH... "
            f"--warehouse {lake.uri}` first): {exc}"
        ) from exc
    manifest = lake.read(version)
    wanted = None if jobs is None else set(jobs)
    if wanted is not None and with_windows:
        names = {r["job"] for r in manifest.rows}
        wanted |= {w for job in list(wanted) for w in windows_of(job, names)}
    rows = [r for r in manifest.rows if wanted is None or r["job"] in wanted]
    selection = "all" if wanted is None else "\n".join(sorted(wanted))
    key = hashlib.sha256(f"{lake.uri}\n{selection}".encode()).hexdigest()[:16]
    home = cache_folder() / "lake" / key
    shared = home / f"manifest-v{version}"
    objects = (
        cache_folder() / "lake" / "objects" / hashlib.sha256(lake.uri.encode()).hexdigest()[:16]
    )
    if not shared.is_dir():
        _build(lake, rows, home, shared, objects)
    os.utime(shared)  # in use: `_remove_stale` keeps a copy used within the hour
    _remove_stale(home, keep=shared)
    run = home / f"run-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        _link_tree(shared, run)
        _download_results(LakeResults.at(lake.uri), run, {r["job"] for r in rows}, objects)
        build_catalog(run)
        yield Mirror(lake.uri, run, version, _result_files(run))
    finally:
        shutil.rmtree(run, ignore_errors=True)


def _link_tree(shared: Path, run: Path) -> None:
    """The run's folder: the shared copy's data files hard-linked (copied where links cannot be
    made), its templates folder linked."""
    for folder in _DATA:
        for path in (shared / folder).rglob("*"):
            if path.is_dir():
                continue
            target = run / path.relative_to(shared)
            target.parent.mkdir(parents=True, exist_ok=True)
            _link(path, target)
    (shared / _SHARED).mkdir(exist_ok=True)
    (run / _SHARED).symlink_to(shared / _SHARED, target_is_directory=True)


def _build(lake: LakeManifest, rows: list[dict], home: Path, root: Path, objects: Path) -> None:
    """Write the mirror of `rows` in a temporary folder, then rename it to `root` (a racing
    process's mirror of the same version is as good: ours is dropped). Each data file is a hard
    link to its copy in `objects`, downloaded once: a new manifest version fetches only the
    files of the rows it adds."""
    from warehouse.manifest import append_rows

    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".build-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        layout = Layout(tmp)
        layout.ensure()
        files = LakeFiles(lake.uri, lake.storage)
        for r in rows:
            if r["status"] != "ok":
                continue
            # a data file is written once per manifest row: the row's ingest time names it
            stamp = str(r["ingested_at"])
            for relative in (
                r["events_file"],
                trace_meta_relative(r["job"], r["rank"], r["sha256"]),
            ):
                key = hashlib.sha256(f"{relative}\n{stamp}".encode()).hexdigest()
                target = tmp / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                _link(_object(files, relative, objects / "data" / key[:2] / key), target)
        append_rows(layout, rows)
        try:
            tmp.rename(root)
        except OSError:  # another process renamed its mirror first
            if not root.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(home: Path, keep: Path) -> None:
    """Remove the folders of runs (and builds) whose process is gone, and the copies of older
    manifest versions unused for `STALE_AFTER_S`."""
    now = time.time()
    for old in home.iterdir():
        if old == keep:
            continue
        if old.name.startswith(("run-", ".build-")):
            pid = old.name.split("-")[1]
            if pid.isdigit() and not _running(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        elif now - old.stat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(old, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _download_results(results: LakeResults, root: Path, jobs: set[str], objects: Path) -> None:
    """The latest committed result files of `jobs`, at their local paths under `root`: hard links
    to the objects downloaded once into `objects` (content-addressed, never changed; a run
    replaces a file by a rename, never writes into it)."""
    files = results.files
    for relative, row in results.latest().items():
        if row["job"] not in jobs:
            continue
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        _link(_object(files, row["key"], objects / row["key"]), target)


def _object(files: LakeFiles, relative: str, cached: Path) -> Path:
    """`cached`, the local copy of the S3 file `relative`: downloaded (to a temporary name, then
    renamed: a killed download leaves no partial copy) unless already there."""
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")
        files.get(relative, str(tmp))
        os.replace(tmp, cached)
    return cached


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system: a copy
        shutil.copy2(source, target)


def _result_files(root: Path) -> dict[str, tuple[int, int]]:
    """The mirror's result files (`<table>/job=<enc>/<file>.parquet`, as a replay, an explanation
    or an estimate writes them): relative path -> (size, mtime_ns)."""
    from warehouse.catalog import DERIVED_VIEWS

    out = {}
    for table in DERIVED_VIEWS:
        for path in (root / table).glob("job=*/*.parquet"):
            if path.name.startswith("."):
                continue
            decode_job(path.parent.name.removeprefix("job="))  # a name this layout wrote
            st = path.stat()
            out[path.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out
