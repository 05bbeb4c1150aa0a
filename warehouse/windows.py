"""Profiling windows: several trace files of one rank of one run.

`torch.profiler` with `schedule(..., repeat=N)` writes one file per active window and rank, each
with the same `distributedInfo.rank` but other steps. The `ProfilerStep#` numbers are the key the
ranks share, so a later window of a job goes to `<job>/steps-<first step>`. A file is another
window of `job`, decided on the commit path only, when it conflicts with or lies outside what the
job holds and both sides hold `ProfilerStep#` annotations with no step in common; anything else
is as before. The window ingested first keeps the job's name. The rule in full:
docs/warehouse.md, "Module notes".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

WINDOW_MARK = "/steps-"
_STEP = re.compile(r"ProfilerStep#(\d+)")


def window_job(job: str, steps: Iterable[int]) -> str:
    """The job of the window whose profiled steps are `steps` (non-empty)."""
    return f"{job}{WINDOW_MARK}{min(steps)}"


def is_window_of(candidate: str, job: str) -> bool:
    """Whether `candidate` names a later window of `job`."""
    rest = candidate.removeprefix(job + WINDOW_MARK)
    return rest != candidate and rest.isdigit()


def windows_of(job: str, jobs: Iterable[str]) -> list[str]:
    """The later windows of `job` among `jobs`, in order of their first step."""
    found = [j for j in jobs if is_window_of(j, job)]
    return sorted(found, key=lambda j: int(j.rsplit(WINDOW_MARK, 1)[1]))


def profiler_steps(events_parquet: str | Path) -> frozenset[int]:
    """The `ProfilerStep#N` numbers of an events file (CPU annotations; empty without any)."""
    import pyarrow.compute as pc  # not at import: an ingest that needs no window check skips it

    table = pq.read_table(
        events_parquet, columns=["name"], filters=[("cat", "=", "user_annotation")]
    )
    names = table.column("name")
    hits = pc.filter(names, pc.starts_with(names, "ProfilerStep#")).unique().to_pylist()
    return frozenset(int(m.group(1)) for n in hits if (m := _STEP.fullmatch(n or "")))


def overlaps(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two manifest rows' time spans meet (unknown spans are taken to meet)."""
    lo_a, hi_a, lo_b, hi_b = (
        a.get("first_ts_ns"), a.get("last_ts_ns"), b.get("first_ts_ns"), b.get("last_ts_ns")
    )  # fmt: skip
    if None in (lo_a, hi_a, lo_b, hi_b):
        return True
    return lo_a <= hi_b and lo_b <= hi_a
