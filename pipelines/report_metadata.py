"""A report's materialisation metadata: its path and its preview figure as an image embedded in
Markdown (Dagster's UI shows it on the materialisation)."""

from __future__ import annotations

import base64

import dagster as dg

from lumos.report.files import ReportFiles


def report_metadata(files: ReportFiles) -> dict[str, dg.RawMetadataValue]:
    """`report` (the HTML file's path) and, when one was drawn, `preview` (the PNG inline)."""
    meta: dict[str, dg.RawMetadataValue] = {"report": dg.MetadataValue.path(str(files.html))}
    if files.preview is not None:
        data = base64.b64encode(files.preview.read_bytes()).decode("ascii")
        meta["preview"] = dg.MetadataValue.md(
            f"![{files.preview.name}](data:image/png;base64,{data})"
        )
    return meta
