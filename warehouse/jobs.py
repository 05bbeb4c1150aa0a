"""Which job and which rank a trace file belongs to.

Job: `--job NAME`, else the job the trace names (`distributedInfo.job_name`, ...), else for a
directory argument each folder holding traces is one job named by its path, else the file's stem.
Rank: `distributedInfo.rank`, else a number in the file name, else 0 for a job's only file, else
the file is refused. The first rule that answers wins. A later profiling window of a distributed
job is moved at commit time (`warehouse.windows`). The rules in full: docs/warehouse.md,
"Module notes".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from warehouse.errors import TraceError
from warehouse.layout import cannot_read, find_trace_files

__all__ = [
    "RANK_UNKNOWN",
    "InputError",
    "PlannedFile",
    "job_from_trace",
    "plan_inputs",
    "rank_from_filename",
    "resolve_job",
    "resolve_rank",
]

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_.]?(\d+)(?![0-9])", re.IGNORECASE)
_TRACE_JOB_KEYS = ("job_name", "mast_job_name")
_DIST_JOB_KEYS = ("job_name", "job_id")
# the start of the refusal of a file whose rank its content does not name, among several files
# of one job: a refusal about the other files given with it, not about this file
RANK_UNKNOWN = "cannot tell which rank this file is"


class InputError(TraceError):
    """A command-line argument that yields nothing to ingest (missing path, no trace files)."""


@dataclass(frozen=True)
class PlannedFile:
    """One file to ingest and what is known about it before it is read."""

    path: Path  # absolute
    job: str  # the given job, or the fallback from the directory / file name
    job_given: bool  # True when --job was given: the trace cannot override it
    group_size: int  # number of files sharing this fallback job in this ingest


def strip_trace_suffix(name: str) -> str:
    """`worker0.123.pt.trace.json.gz` -> `worker0.123`."""
    for suffix in (".gz", ".json", ".trace", ".pt"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def rank_from_filename(name: str) -> int | None:
    """The rank written in a file name, or None. Only `rank`/`worker` followed by a number count."""
    matches = _RANK_IN_NAME.findall(strip_trace_suffix(Path(name).name))
    if len(set(matches)) != 1:
        return None  # none, or ambiguous (`rank0_of_worker3`)
    return int(matches[0])


NO_TRACES = "directory contains no trace files (*.json, *.json.gz)"


def plan_inputs(
    paths: list[str | Path], job: str | None = None, skipped: list[tuple[str, str]] | None = None
) -> list[PlannedFile]:
    """Expand the arguments into files with their fallback job. Raises `InputError` naming the
    argument when it does not exist; nothing is ingested in that case. A directory without trace
    files raises too, unless other arguments hold some and `skipped` is given: then it is listed
    there (path, why) and the others go on, as a nightly `lumos ingest inbox/*` needs when a
    job's folder is still being filled."""
    groups: dict[str, list[Path]] = {}
    seen: set[Path] = set()
    empty: list[Path] = []
    for arg in paths:
        p = Path(arg).expanduser()
        if not p.exists():
            raise InputError(p, "no such file or directory")
        p = p.resolve()
        if p.is_dir():
            notes: list[str] = []
            files = find_trace_files(p, notes)
            if skipped is not None:  # unreadable folders, links walked already
                skipped.extend((str(p), note) for note in notes)
            if not files:
                empty.append(p)
                continue
            for f in files:
                rel_parent = f.parent.relative_to(p)
                name = p.name if rel_parent == Path(".") else f"{p.name}/{rel_parent.as_posix()}"
                groups.setdefault(job or name, []).append(f)
        elif p.is_file():
            if (why := cannot_read(p)) is not None:
                raise InputError(p, why)
            # A file named on the command line is read whatever its suffix: the reader says
            # what it really is.
            groups.setdefault(job or strip_trace_suffix(p.name) or p.name, []).append(p)
        else:
            raise InputError(p, "not a regular file or directory")
    if empty and (skipped is None or not groups):
        raise InputError(empty[0], NO_TRACES)
    if skipped is not None:
        skipped.extend((str(p), NO_TRACES) for p in empty)
    out = []
    for name, files in groups.items():
        unique = [f for f in dict.fromkeys(files) if f not in seen]
        seen.update(unique)
        for f in unique:
            out.append(PlannedFile(f, name, job is not None, len(unique)))
    return out


def _parse(value: str | None):
    if value is None:
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return None


def job_from_trace(top_level: dict[str, str]) -> str | None:
    """The job name a trace declares about itself, or None. `top_level` values are JSON text."""
    dist = _parse(top_level.get("distributedInfo"))
    if isinstance(dist, dict):
        for key in _DIST_JOB_KEYS:
            if isinstance(dist.get(key), str | int) and str(dist[key]).strip():
                return str(dist[key]).strip()
    for key in _TRACE_JOB_KEYS:
        value = _parse(top_level.get(key))
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _declared_rank(rank: int | None, top_level: dict[str, str]) -> int | None:
    """The reader's rank (distributedInfo), else distributedInfo.rank from the metadata."""
    if rank is None:
        dist = _parse(top_level.get("distributedInfo"))
        if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
            rank = dist["rank"]
    return rank


def _bad_declared_rank(top_level: dict[str, str]) -> str | None:
    """What is wrong with a distributedInfo.rank that is present but not an integer."""
    dist = _parse(top_level.get("distributedInfo"))
    if not isinstance(dist, dict) or dist.get("rank") is None:
        return None
    value = dist["rank"]
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return f"distributedInfo.rank {value!r} is not an integer"


def _own_job(planned: PlannedFile, rank: int | None, top_level: dict[str, str]) -> bool:
    """A file among several of a folder's job that names no rank and no job: a run of its own."""
    return (
        planned.group_size > 1
        and not planned.job_given
        and job_from_trace(top_level) is None
        and _declared_rank(rank, top_level) is None
        and rank_from_filename(planned.path.name) is None
    )


def resolve_job(
    planned: PlannedFile, top_level: dict[str, str], rank: int | None = None
) -> tuple[str, str]:
    """(job, where it came from); `rank` is the reader's rank, if it knows one."""
    if planned.job_given:
        return planned.job, "given"
    declared = job_from_trace(top_level)
    if declared:
        return declared, "trace"
    if _own_job(planned, rank, top_level):
        stem = strip_trace_suffix(planned.path.name) or planned.path.name
        return f"{planned.job}/{stem}", "path"
    return planned.job, "path"


def resolve_rank(
    planned: PlannedFile, rank: int | None, top_level: dict[str, str]
) -> tuple[int, str]:
    """(rank, source) from the reader's rank (distributedInfo), else the file name, else 0 for a
    one-file job. Raises TraceError for a file of a multi-file job whose rank cannot be known."""
    if rank is None and (bad := _bad_declared_rank(top_level)) is not None:
        raise TraceError(planned.path, bad)
    rank = _declared_rank(rank, top_level)
    if rank is not None:
        if not 0 <= rank < 2**31:
            raise TraceError(planned.path, f"distributedInfo.rank {rank} is out of range")
        return int(rank), "distributedInfo"
    from_name = rank_from_filename(planned.path.name)
    if from_name is not None:
        return from_name, "file name"
    if planned.group_size == 1 or _own_job(planned, None, top_level):
        return 0, "single file"
    raise TraceError(
        planned.path,
        f"{RANK_UNKNOWN}: no distributedInfo.rank in the trace and no "
        f"rank in the file name (e.g. rank-3, worker3), and job {planned.job!r} has "
        f"{planned.group_size} files; rename it or ingest it alone",
    )


def provisional_rank(planned: PlannedFile) -> int:
    """The rank to stamp on rows before the trace's own metadata is known (fixed up later)."""
    r = rank_from_filename(planned.path.name)
    return 0 if r is None else r
