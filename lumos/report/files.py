"""Writing a report to disk, for `lumos report` and the Dagster assets: the HTML page, the job's
Perfetto exports beside it, every figure as PNG (`--png`) and one figure as the page's preview
(`<page>.png`, the picture a Dagster materialisation shows)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lumos.report.gather import gather_fleet, gather_job
from lumos.report.page import Report, write_html, write_png, write_pngs
from lumos.report.perfetto import write_exports
from lumos.report.reports import fleet_report, job_report
from warehouse.layout import encode_job


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    figures: int
    notes: list[str]
    pngs: list[Path]
    preview: Path | None  # `<page stem>.png`, when a preview was asked for and drawn


def safe_name(job: str) -> str:
    """A file name for a job name (which may hold `/` and anything else): the warehouse's own
    directory-safe form, distinct for distinct jobs."""
    return encode_job(job)


def _finish(
    report: Report, out: Path, png_dir: str | os.PathLike[str] | None, preview: tuple[str, ...]
) -> ReportFiles:
    path = write_html(report, out)
    pngs = write_pngs(report, png_dir) if png_dir else []
    shown = None
    for name in preview:  # the first of these figures the report holds
        fig = next((f for f in report.figures if f.name == name), None)
        if fig is not None:
            shown = write_png(fig, out.with_suffix(".png"), scale=1.0)
            break
    return ReportFiles(path, len(report.figures), list(report.notes), pngs, shown)


def write_job_report(
    wh,  # noqa: ANN001 (a warehouse.handle.WarehouseHandle)
    job: str,
    out: str | os.PathLike[str],
    *,
    png_dir: str | os.PathLike[str] | None = None,
    perfetto: bool = True,
    preview: tuple[str, ...] = (),
) -> ReportFiles:
    """Write `job`'s report to `out` (ReportError: no such job)."""
    out = Path(out)
    data = gather_job(wh, job)
    exports: dict = {}
    if perfetto and not data.step_list.empty:
        pairs = data.step_list[["rank", "step"]].itertuples(index=False)
        steps = [(int(rank), int(step)) for rank, step in pairs]
        exports, note = write_exports(wh.root, job, steps, out.with_name(out.stem + "_perfetto"))
        if note:
            data.notes.append(note)
    return _finish(job_report(data, wh.root, exports, out.parent), out, png_dir, preview)


def write_fleet_report(
    wh,  # noqa: ANN001 (a warehouse.handle.WarehouseHandle)
    out: str | os.PathLike[str],
    *,
    png_dir: str | os.PathLike[str] | None = None,
    preview: tuple[str, ...] = (),
) -> ReportFiles:
    """Write the fleet report to `out`."""
    return _finish(fleet_report(gather_fleet(wh), wh.root), Path(out), png_dir, preview)
