"""The inbox convention: a directory where training jobs drop their profiler traces.

Each sub-directory of the inbox is one job (its name is the job name; its trace files, at any depth,
are the job's ranks). A trace file lying directly in the inbox is a one-file job named after the
file. Anything else (READMEs, licence folders, hidden files, half-copied `.part` files) is ignored.
The Dagster sensor and the main job both use this; nothing here imports Dagster.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from warehouse.jobs import strip_trace_suffix
from warehouse.layout import find_trace_files, is_trace_file

__all__ = ["discover_jobs", "job_fingerprint", "job_name_for"]


def job_name_for(path: Path) -> str:
    """The job name of an inbox entry: a directory's name, or a loose file's name minus suffixes."""
    if path.is_dir():
        return path.name
    return strip_trace_suffix(path.name) or path.name


def discover_jobs(inbox: Path, skipped: list[str] | None = None) -> dict[str, list[Path]]:
    """Map each job in `inbox` to its trace files (sorted). Jobs without trace files are left out.

    Raises `FileNotFoundError` / `NotADirectoryError` naming the inbox when it is not a directory.
    An entry that cannot be a job is skipped, never blocking the others, with a line saying why
    appended to `skipped`: two entries claiming one job name (a directory and a loose file, or
    two files differing only by suffix: both are skipped, neither is the job), a link to the
    inbox itself or to a folder holding it (its walk would ingest the whole inbox again), and an
    entry that cannot be read.
    """
    inbox = Path(inbox)
    if not inbox.exists():
        raise FileNotFoundError(f"{inbox}: inbox directory does not exist")
    if not inbox.is_dir():
        raise NotADirectoryError(f"{inbox}: inbox is not a directory")
    notes: list[str] = [] if skipped is None else skipped
    home = inbox.resolve()
    claims: dict[str, list[tuple[Path, list[Path]]]] = {}
    for entry in sorted(inbox.iterdir()):
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_dir():
                real = entry.resolve()
                if real == home or real in home.parents:
                    notes.append(f"{entry}: links to {real}, which holds the inbox itself: skipped")
                    continue
                files = find_trace_files(entry, notes)
            elif is_trace_file(entry):
                files = [entry]
            else:
                continue
        except OSError as exc:
            notes.append(f"{entry}: cannot be read ({exc.strerror or exc}): skipped")
            continue
        if files:
            claims.setdefault(job_name_for(entry), []).append((entry, files))
    jobs: dict[str, list[Path]] = {}
    for name, entries in claims.items():
        if len(entries) > 1:
            who = ", ".join(str(e) for e, _ in entries)
            notes.append(
                f"job name {name!r} is claimed by {len(entries)} entries of inbox {inbox} ({who}): "
                "all are skipped until one is renamed"
            )
            continue
        jobs[name] = entries[0][1]
    return jobs


def job_fingerprint(files: list[Path]) -> str:
    """A short digest of a job's file names, sizes and modification times.

    It changes when a file is added, replaced or still growing, so a watcher can request a new
    ingest of the job; reading sizes and times only keeps it cheap for a large inbox.
    """
    digest = hashlib.sha256()
    for path in sorted(files):
        try:
            stat = path.stat()
        except FileNotFoundError:  # removed since it was listed: the next look will not list it
            digest.update(f"{path}\0gone\n".encode())
            continue
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
