"""A report as one self-contained HTML file (Vega, Vega-Lite and vega-embed inlined once, the
figures' specs as JSON: it opens offline) and its figures as PNG files (vl-convert, no browser).
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from lumos.report.charts import Figure


@dataclass
class Table:
    """A small HTML table: column titles and rows of cells (text, or a `Link`)."""

    columns: list[str]
    rows: list[list[object]]
    caption: str = ""


@dataclass(frozen=True)
class Link:
    text: str
    href: str


@dataclass
class Section:
    heading: str
    text: str = ""
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


@dataclass
class Report:
    title: str
    subtitle: str
    sections: list[Section]
    notes: list[str] = field(default_factory=list)

    @property
    def figures(self) -> list[Figure]:
        return [f for s in self.sections for f in s.figures]


@cache
def javascript_bundle() -> str:
    """vega-embed, Vega-Lite and Vega in one classic script that sets `window.vegaEmbed`
    (vl-convert's bundle of the versions it renders PNG with)."""
    import vl_convert

    return vl_convert.javascript_bundle().replace("</script", "<\\/script")


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; padding: 0 16px;
max-width: 1180px; color: #222; }
h1 { font-size: 22px; margin-bottom: 2px; } h2 { font-size: 18px; margin-top: 34px;
border-bottom: 1px solid #ddd; padding-bottom: 4px; } .sub { color: #666; }
.fig { margin: 12px 0 20px; } .fig-title { font-weight: 600; margin: 8px 0 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } caption { text-align: left; font-weight: 600; padding: 4px 0; }
.notes li { color: #8a5a00; } nav a { margin-right: 12px; }
"""

BOOT = """
window.lumosViews = {}; window.lumosErrors = [];
const lumosSpecs = JSON.parse(document.getElementById('lumos-specs').textContent);
window.lumosReady = Promise.all(Object.entries(lumosSpecs).map(([name, f]) =>
  vegaEmbed('#fig-' + name, f.spec, {renderer: f.renderer, actions: false})
    .then(r => { window.lumosViews[name] = r.view; })
    .catch(e => { window.lumosErrors.push(name + ': ' + e); console.error(name, e); })));
"""


def _cell(value: object) -> str:
    if isinstance(value, Link):
        return f'<a href="{html.escape(value.href)}">{html.escape(value.text)}</a>'
    if isinstance(value, float):
        return html.escape(f"{value:,.3f}")
    return html.escape("" if value is None else str(value))


def _table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in r) + "</tr>" for r in t.rows)
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _anchor(heading: str) -> str:
    return "s-" + "".join(c if c.isalnum() else "-" for c in heading.lower())


def render_html(report: Report) -> str:
    """The report's page: every figure a vega-embed container, the libraries inlined once."""
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(report.title)}</title><style>{STYLE}</style>",
        f"<script>{javascript_bundle()}</script></head><body>",
        f"<h1>{html.escape(report.title)}</h1><p class='sub'>{html.escape(report.subtitle)}</p>",
        "<nav>"
        + "".join(
            f"<a href='#{_anchor(s.heading)}'>{html.escape(s.heading)}</a>" for s in report.sections
        )
        + "</nav>",
    ]
    if report.notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
        parts.append(f"<ul class='notes'>{items}</ul>")
    specs: dict[str, dict] = {}
    for s in report.sections:
        parts.append(f"<section id='{_anchor(s.heading)}'><h2>{html.escape(s.heading)}</h2>")
        if s.text:
            parts.append(f"<p>{html.escape(s.text)}</p>")
        for f in s.figures:
            parts.append(
                f"<div class='fig-title'>{html.escape(f.title)}</div>"
                f"<div class='fig' id='fig-{f.name}' data-figure='{f.name}'"
                f" data-hover='{int(f.hover)}'></div>"
            )
            specs[f.name] = {"spec": f.spec(), "renderer": f.renderer}
        parts.extend(_table(t) for t in s.tables)
        parts.append("</section>")
    payload = json.dumps(specs, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    parts.append(f"<script type='application/json' id='lumos-specs'>{payload}</script>")
    parts.append(f"<script>{BOOT}</script></body></html>")
    return "".join(parts)


def write_html(report: Report, out: str | os.PathLike[str]) -> Path:
    """Write the page (temp file + rename: a reader never sees half a report)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(render_html(report), encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_png(figure: Figure, path: str | os.PathLike[str], scale: float = 1.5) -> Path:
    """One figure as PNG (vl-convert renders Vega without a browser)."""
    import vl_convert

    out = Path(path)
    out.write_bytes(vl_convert.vegalite_to_png(figure.spec(), scale=scale))
    return out


def write_pngs(report: Report, folder: str | os.PathLike[str], scale: float = 1.5) -> list[Path]:
    """Every figure as `<folder>/<name>.png`."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    return [write_png(f, out / f"{f.name}.png", scale) for f in report.figures]


def generated_line(what: str, warehouse: Path) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{what} · warehouse {warehouse} · generated {now}"
