"""A local warehouse mirroring one pinned version of an S3 warehouse, where `lumos replay`,
`estimate` and `sweep` compute as they do on a local one (their SQL, kernels and caches unchanged).

The mirror holds the manifest's rows of the chosen jobs as of one Delta version, their data
files, and the latest result files (`warehouse.lake_results`); it lives in the cache folder
(`warehouse.location.cache_folder`), keyed by the URI, the manifest version and the jobs, so a
later run on the same version downloads nothing again and the estimator's templates built there
stay valid. Built in a temporary folder and renamed: a killed build leaves no mirror. What a
command writes into the mirror's result folders is committed back by `publish` (files, then one
Delta commit): nothing it did is visible on S3 before that commit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from warehouse.lake import LakeManifest
from warehouse.lake_files import LakeFiles
from warehouse.lake_results import LakeResults, file_sha256
from warehouse.layout import Layout, decode_job, trace_meta_relative
from warehouse.location import cache_folder

__all__ = ["Mirror", "mirror"]

# a mirror of an older manifest version is removed once this old (another process may still be
# computing in it)
STALE_AFTER_S = 3600.0


@dataclass(frozen=True)
class Mirror:
    """A local copy of an S3 warehouse (`uri`) at `root`, and its result files as they were when
    it was handed out (relative path -> (size, mtime_ns)), which `publish` compares against."""

    uri: str
    root: Path
    version: int
    before: dict[str, tuple[int, int]]

    def publish(self) -> int:
        """Commit the result files written in the mirror since it was handed out (new, or
        changed) to the S3 warehouse, as one Delta commit; returns how many."""
        changed = [r for r, stat in _result_files(self.root).items() if self.before.get(r) != stat]
        return LakeResults.at(self.uri).commit(self.root, sorted(changed))


def mirror(uri: str, jobs: Sequence[str] | None = None) -> Mirror:
    """A local warehouse holding `jobs` (None: every job) of the S3 warehouse `uri` at its latest
    manifest version, with their latest result files."""
    from warehouse.catalog import build_catalog

    lake = LakeManifest.at(uri)
    version = lake.version()
    manifest = lake.read(version)
    wanted = None if jobs is None else set(jobs)
    rows = [r for r in manifest.rows if wanted is None or r["job"] in wanted]
    selection = "all" if wanted is None else "\n".join(sorted(wanted))
    key = hashlib.sha256(f"{lake.uri}\n{selection}".encode()).hexdigest()[:16]
    home = cache_folder() / "lake" / key
    root = home / f"manifest-v{version}"
    if not root.is_dir():
        _build(lake, rows, home, root)
        _remove_stale(home, keep=root)
    _sync_results(LakeResults.at(lake.uri), root, {r["job"] for r in rows})
    build_catalog(root)
    return Mirror(lake.uri, root, version, _result_files(root))


def _build(lake: LakeManifest, rows: list[dict], home: Path, root: Path) -> None:
    """Write the mirror of `rows` in a temporary folder, then rename it to `root` (a racing
    process's mirror of the same version is as good: ours is dropped)."""
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
            for relative in (
                r["events_file"],
                trace_meta_relative(r["job"], r["rank"], r["sha256"]),
            ):
                target = tmp / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                files.get(relative, str(target))
        append_rows(layout, rows)
        try:
            tmp.rename(root)
        except OSError:  # another process renamed its mirror first
            if not root.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(home: Path, keep: Path) -> None:
    now = time.time()
    for old in home.iterdir():
        if old != keep and now - old.stat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(old, ignore_errors=True)


def _sync_results(results: LakeResults, root: Path, jobs: set[str]) -> None:
    """Make the mirror's result files those of the latest results version, for `jobs`."""
    files = results.files
    for relative, row in results.latest().items():
        if row["job"] not in jobs:
            continue
        target = root / relative
        if target.is_file() and file_sha256(target) == row["sha256"]:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")
        files.get(row["key"], str(tmp))
        os.replace(tmp, target)


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
