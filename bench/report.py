"""The report's chart library, measured: HTML size and headless-Chromium render time of a
100k-point scatter (Vega-Lite through altair, inline CSV data, canvas; plotly's SVG `scatter`
and WebGL `scattergl`), and the fleet report of a synthetic 1,000-job, 100k-estimate fleet.

    .venv/bin/python bench/report.py [--points 100000] [--runs 3]

Render time: from navigation to the figures drawn (vega-embed's promises; plotly's `newPlot`
promise and two animation frames), medians of --runs page loads, every network request
blocked (the pages must be self-contained). PNG: vl-convert's time for the same Vega-Lite spec.
Needs chromium (apt) and playwright; figures go to docs/report.md with their date.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

VEGA_WAIT = "window.lumosReady"
PLOTLY_WAIT = """() => Promise.all([...document.querySelectorAll('.plotly-graph-div')].map(
  d => d._fullLayout ? Promise.resolve() : new Promise(r => d.on('plotly_afterplot', r))))
  .then(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))))"""


def _altair_page(n: int, out: Path) -> Path:
    from report_fleet import synthetic_fleet

    from lumos.report.charts import estimates_chart
    from lumos.report.page import Report, Section, write_html

    fig = estimates_chart(synthetic_fleet(10, n).estimates)
    return write_html(Report("bench", "", [Section("x", "", [fig])]), out)


def _plotly_page(n: int, out: Path, gl: bool) -> Path:
    import plotly.graph_objects as go
    from report_fleet import synthetic_fleet

    e = synthetic_fleet(10, n).estimates
    trace = (go.Scattergl if gl else go.Scatter)(
        x=e["created_at"], y=e["error_pct"], mode="markers", text=e["measured_job"],
        marker={"size": 4, "opacity": 0.6},
    )  # fmt: skip
    fig = go.Figure([trace], layout={"width": 700, "height": 320})
    out.write_text(fig.to_html(include_plotlyjs=True, full_html=True))
    return out


def _render_s(browser, path: Path, wait: str, runs: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(runs):
        page = browser.new_page()
        page.route(
            "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
        )
        t = time.perf_counter()
        page.goto(path.as_uri())
        page.evaluate(wait)
        times.append(time.perf_counter() - t)
        page.close()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("chromium is not installed (apt-get install chromium)")
    tmp = Path(tempfile.mkdtemp(prefix="lumos-bench-report-"))
    n = args.points
    t = time.perf_counter()
    pages = {"altair (Vega-Lite, canvas)": (_altair_page(n, tmp / "altair.html"), VEGA_WAIT)}
    build_vega = time.perf_counter() - t
    t = time.perf_counter()
    pages["plotly scatter (SVG)"] = (_plotly_page(n, tmp / "plotly.html", False), PLOTLY_WAIT)
    build_plotly = time.perf_counter() - t
    pages["plotly scattergl (WebGL)"] = (_plotly_page(n, tmp / "plotlygl.html", True), PLOTLY_WAIT)

    from report_fleet import synthetic_fleet

    from lumos.report.page import write_html, write_pngs
    from lumos.report.reports import fleet_report

    t = time.perf_counter()
    report = fleet_report(synthetic_fleet(1000, n), tmp)
    fleet = write_html(report, tmp / "fleet.html")
    build_fleet = time.perf_counter() - t
    pages["fleet report, 1,000 jobs + 100k estimates"] = (fleet, VEGA_WAIT)
    t = time.perf_counter()
    write_pngs(report, tmp / "png")
    png_s = time.perf_counter() - t

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        print(f"{n:,} points, medians of {args.runs} page loads in headless Chromium")
        print(f"{'page':<44} {'HTML MB':>8} {'render s':>9}")
        for name, (path, wait) in pages.items():
            s = _render_s(browser, path, wait, args.runs)
            print(f"{name:<44} {path.stat().st_size / 1e6:8.2f} {s:9.2f}")
        browser.close()
    print(f"build: altair page {build_vega:.2f} s, plotly page {build_plotly:.2f} s, "
          f"fleet report {build_fleet:.2f} s; its {len(report.figures)} PNGs (vl-convert) "
          f"{png_s:.2f} s")  # fmt: skip
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
