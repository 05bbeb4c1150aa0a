"""The Perfetto exports a job report links to: one Chrome trace per replayed step (model
replay), written beside the report (`lumos export` writes the same file for one step)."""

from __future__ import annotations

import os
from pathlib import Path

MAX_EXPORTS = 64  # more steps than this: the report names `lumos export` for the rest


def write_exports(
    warehouse: Path, job: str, steps: list[tuple[int, int]], folder: str | os.PathLike[str]
) -> tuple[dict[tuple[int, int], Path], str | None]:
    """Write `<folder>/rank<r>_step<s>.json.gz` for the first MAX_EXPORTS (rank, step) pairs;
    returns the files by (rank, step) and a note when some or all were not written."""
    from lumos.explain.inputs import ExplainInputError, load_job
    from lumos.export.chrome_trace import ExportError, trace_events, write_trace

    if not steps:
        return {}, None
    try:
        tables = load_job(warehouse, job)
    except ExplainInputError as exc:
        return {}, f"no Perfetto export: {exc}"
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[tuple[int, int], Path] = {}
    failed: list[str] = []
    for rank, step in steps[:MAX_EXPORTS]:
        try:
            trace = trace_events(tables, rank, step, "model")
        except ExportError as exc:
            failed.append(f"rank {rank} step {step}: {exc}")
            continue
        files[(rank, step)] = write_trace(trace, out / f"rank{rank}_step{step}.json.gz")
    note = None
    if len(steps) > MAX_EXPORTS:
        note = (
            f"Perfetto exports written for the first {MAX_EXPORTS} of {len(steps)} steps; "
            f"`lumos export --job {job} --rank R --step S --out F.json.gz` writes any other"
        )
    if failed:
        note = (note + "; " if note else "") + "not exported: " + "; ".join(failed[:5])
    return files, note
