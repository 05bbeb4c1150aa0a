"""The reports' figures as Vega-Lite charts (altair): each a `Figure` whose spec the HTML page
embeds and vl-convert turns into PNG. Data travels inline as CSV (a third of the size of
Vega-Lite's row objects), so a 100k-point fleet stays a few MB (docs/report.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import altair as alt

if TYPE_CHECKING:
    import pandas as pd

# rows above which a figure draws on a canvas instead of SVG (SVG: one DOM node per mark)
CANVAS_ROWS = 5_000
COMPONENTS = {  # breakdown column -> (legend name, colour)
    "exposed_compute_ms": ("exposed compute", "#4c78a8"),
    "overlapped_ms": ("overlapped compute & communication", "#72b7b2"),
    "exposed_comm_ms": ("exposed communication", "#e45756"),
    "idle_ms": ("idle", "#bab0ac"),
}
SERIES_COLORS = {"measured": "#333333", "model": "#4c78a8", "multirank": "#f58518"}
CONFIG_KEYS = (
    "layers", "hidden", "ffn", "heads", "kv_heads", "seq", "micro_batch", "num_micro_batches",
    "vocab", "dp", "pp", "tp", "pp_schedule", "dtype_bytes", "recompute", "zero_stage",
    "sequence_parallel", "gated_mlp", "flash_attention", "vocab_parallel",
)  # fmt: skip


MAX_BANDS = 150  # bands (rank, step) a bar chart draws; more: points, or the mean over ranks


def _band(n: int) -> int:
    """Pixels per bar of a chart of `n` bars side by side (with an x offset, Vega-Lite's step
    is the offset's): wide for a few, at least 3 for many."""
    return max(3, min(16, 860 // max(n, 1)))  # ~1,100 px with the bands' padding


@dataclass
class Figure:
    """One chart of a report: `name` is its file stem (PNG) and element id (HTML)."""

    name: str
    title: str
    chart: alt.TopLevelMixin
    rows: int  # data rows drawn
    hover: bool = False  # the chart's marks carry tooltips a test hovers

    @property
    def renderer(self) -> str:
        return "canvas" if self.rows > CANVAS_ROWS else "svg"

    def spec(self) -> dict[str, Any]:
        return self.chart.to_dict()


def _data(df: pd.DataFrame, columns: dict[str, str]) -> alt.Data:
    """`df`'s `columns` (name -> Vega parse type: number, boolean, string) as inline CSV."""
    frame = df[list(columns)].copy()
    for name, kind in columns.items():
        if kind == "boolean":  # Vega reads "False" as true: only false, 0 and "" are false
            frame[name] = frame[name].map({True: "true", False: "false"})
    text = frame.to_csv(index=False, float_format="%.6g", lineterminator="\n")
    parse = {k: v for k, v in columns.items() if v != "string"}
    return alt.Data(values=text, format=alt.DataFormat(type="csv", parse=parse))


def _label(df: pd.DataFrame) -> pd.Series:
    return "r" + df["rank"].astype(str) + " s" + df["step"].astype(str)


def _flags(df: pd.DataFrame) -> pd.Series:
    return df["warmup"].map({True: "warm-up", False: ""}).astype(str) + df["truncated"].map(
        {True: " truncated", False: ""}
    ).astype(str)


# --- the job report ---------------------------------------------------------------------------


def steps_chart(steps: pd.DataFrame) -> Figure:
    """Measured vs replayed per rank and step, one row per metric: bars side by side."""
    import pandas as pd

    s = steps.assign(label=_label(steps), flags=_flags(steps))
    measured = s.drop_duplicates(["rank", "step", "metric"]).assign(
        series="measured", ms=lambda d: d["measured_ms"], error_pct=0.0
    )
    replayed = s.assign(series=s["mode"], ms=s["replayed_ms"])
    long = pd.concat([measured, replayed], ignore_index=True)
    order = list(dict.fromkeys(s.sort_values(["rank", "step"])["label"]))
    cols = {
        "label": "string", "rank": "number", "step": "number", "metric": "string",
        "series": "string", "ms": "number", "error_pct": "number", "flags": "string",
    }  # fmt: skip
    series = [k for k in SERIES_COLORS if k in set(long["series"])]
    many = len(order) > MAX_BANDS
    base = alt.Chart(_data(long, cols))
    if many:  # every rank a point per step: one band per rank and step would not fit a page
        base = base.mark_point(filled=True, size=16, opacity=0.7)
        x: dict[str, Any] = {"x": alt.X("step:Q", title="step (every rank a point)")}
    else:
        base = base.mark_bar()
        x = {
            "x": alt.X("label:N", sort=order, title="rank, step"),
            "xOffset": alt.XOffset("series:N", sort=series),
        }
    chart = (
        base.encode(
            **x,
            y=alt.Y("ms:Q", title="ms"),
            color=alt.Color(
                "series:N",
                scale=alt.Scale(domain=series, range=[SERIES_COLORS[k] for k in series]),
                title="",
            ),
            tooltip=[
                alt.Tooltip("metric:N"),
                alt.Tooltip("rank:Q"),
                alt.Tooltip("step:Q"),
                alt.Tooltip("series:N"),
                alt.Tooltip("ms:Q", format=".3f"),
                alt.Tooltip("error_pct:Q", title="error %", format=".3f"),
                alt.Tooltip("flags:N", title="step"),
            ],  # fmt: skip
        )
        .properties(width=640 if many else alt.Step(_band(len(order) * len(series))), height=160)
        .facet(row=alt.Row("metric:N", title=None))
        .resolve_scale(y="independent")
    )
    return Figure("steps", "Steps: measured vs replayed", chart, len(long))


def breakdown_chart(breakdown: pd.DataFrame, waits: pd.DataFrame) -> Figure:
    """The GPU span of each step cut into exposed compute / overlap / exposed communication /
    idle, measured next to the replays (stacked bars); peers' waits in the tooltip."""
    b = breakdown.assign(label=_label(breakdown), flags=_flags(breakdown))
    if not waits.empty:
        b = b.merge(waits[["rank", "step", "wait_ms"]], on=["rank", "step"], how="left")
    else:
        b = b.assign(wait_ms=float("nan"))
    title, x_title = "Breakdown per step: measured next to the replay", "rank, step"
    if b["label"].nunique() > MAX_BANDS:  # the mean over ranks, one band per step
        num = ["span_ms", "wait_ms", *COMPONENTS]
        b = b.groupby(["step", "mode"], as_index=False).agg(
            {**{c: "mean" for c in num}, "flags": "first", "rank": "size"}
        )
        b["label"] = "s" + b["step"].astype(str)
        b = b.rename(columns={"rank": "ranks"}).assign(rank=-1)
        title, x_title = title + " (mean over ranks; rank -1)", "step"
    long = b.melt(
        id_vars=["label", "rank", "step", "mode", "span_ms", "wait_ms", "flags"],
        value_vars=list(COMPONENTS),
        var_name="component",
        value_name="ms",
    )
    long["component"] = long["component"].map(lambda c: COMPONENTS[c][0])
    long["order"] = long["component"].map({v[0]: i for i, v in enumerate(COMPONENTS.values())})
    order = list(dict.fromkeys(b.sort_values(["rank", "step"])["label"]))
    modes = [m for m in ("measured", "model", "multirank") if m in set(long["mode"])]
    cols = {
        "label": "string", "rank": "number", "step": "number", "mode": "string",
        "component": "string", "order": "number", "ms": "number", "span_ms": "number",
        "wait_ms": "number", "flags": "string",
    }  # fmt: skip
    chart = (
        alt.Chart(_data(long, cols))
        .mark_bar()
        .encode(
            x=alt.X("label:N", sort=order, title=x_title),
            xOffset=alt.XOffset("mode:N", sort=modes),
            y=alt.Y("sum(ms):Q", title="ms of the step's GPU span"),
            color=alt.Color(
                "component:N",
                scale=alt.Scale(
                    domain=[v[0] for v in COMPONENTS.values()],
                    range=[v[1] for v in COMPONENTS.values()],
                ),
                title="",
                legend=alt.Legend(labelLimit=280),
            ),
            order=alt.Order("order:Q"),
            opacity=alt.Opacity(
                "mode:N", scale=alt.Scale(domain=modes, range=[1.0, 0.65, 0.4][: len(modes)])
            ),
            tooltip=[
                alt.Tooltip("rank:Q"),
                alt.Tooltip("step:Q"),
                alt.Tooltip("mode:N"),
                alt.Tooltip("component:N"),
                alt.Tooltip("ms:Q", format=".3f"),
                alt.Tooltip("span_ms:Q", title="span ms", format=".3f"),
                alt.Tooltip("wait_ms:Q", title="waiting for peers ms", format=".3f"),
                alt.Tooltip("flags:N", title="step"),
            ],  # fmt: skip
        )
        .properties(width=alt.Step(_band(len(order) * len(modes))), height=220)
    )
    return Figure("breakdown", title, chart, len(long))


def critical_chart(critical: pd.DataFrame) -> Figure:
    """The critical path's shares per category, one bar per replay mode."""
    cols = {"mode": "string", "category": "string", "ms": "number", "share": "number"}
    chart = (
        alt.Chart(_data(critical, cols))
        .mark_bar()
        .encode(
            y=alt.Y("mode:N", title=None),
            x=alt.X("sum(share):Q", title="share of the replayed steps", axis=alt.Axis(format="%")),
            color=alt.Color("category:N", title=""),
            tooltip=[
                alt.Tooltip("mode:N"),
                alt.Tooltip("category:N"),
                alt.Tooltip("share:Q", format=".1%"),
                alt.Tooltip("ms:Q", format=".3f"),
            ],  # fmt: skip
        )
        .properties(width=520, height=alt.Step(28))
    )
    return Figure("critical_path", "Critical path shares", chart, len(critical))


def top_tasks_chart(top: pd.DataFrame, name: str, title: str) -> Figure:
    """Tasks by their time on the critical path (exposed: nothing hid it), longest first."""
    t = top.assign(short=top["name"].str.slice(0, 70))
    cols = {
        "short": "string",
        "name": "string",
        "category": "string",
        "ms": "number",
        "n": "number",
    }
    chart = (
        alt.Chart(_data(t, cols))
        .mark_bar()
        .encode(
            y=alt.Y("short:N", sort="-x", title=None, axis=alt.Axis(labelLimit=360)),
            x=alt.X("ms:Q", title="ms on the critical path (all ranks and steps)"),
            color=alt.Color("category:N", title=""),
            tooltip=[
                alt.Tooltip("name:N"),
                alt.Tooltip("category:N"),
                alt.Tooltip("ms:Q", format=".3f"),
                alt.Tooltip("n:Q", title="nodes"),
            ],  # fmt: skip
        )
        .properties(width=360, height=alt.Step(16))
    )
    return Figure(name, title, chart, len(t))


def memory_chart(memory: dict[str, Any]) -> Figure:
    """Memory per rank of each pipeline stage (parameters, gradients, optimizer, activations),
    against the device's memory when known."""
    import pandas as pd

    parts = ("param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes")
    rows = [
        {
            "stage": f"stage {st['stage']} ({st['layers']} layers)",
            "part": part.removesuffix("_bytes"),
            "gib": st[part] / 2**30,
        }
        for st in memory["stages"]
        for part in parts
    ]
    df = pd.DataFrame(rows)
    bars = (
        alt.Chart(_data(df, {"stage": "string", "part": "string", "gib": "number"}))
        .mark_bar()
        .encode(
            y=alt.Y("stage:N", title=None),
            x=alt.X("sum(gib):Q", title="GiB per rank"),
            color=alt.Color("part:N", sort=[p.removesuffix("_bytes") for p in parts], title=""),
            tooltip=[
                alt.Tooltip("stage:N"),
                alt.Tooltip("part:N"),
                alt.Tooltip("gib:Q", format=".3f"),
            ],
        )
        .properties(width=520, height=alt.Step(26))
    )
    chart: alt.TopLevelMixin = bars
    if memory.get("device_memory"):
        dev = pd.DataFrame([{"gib": memory["device_memory"] / 2**30}])
        rule = (
            alt.Chart(_data(dev, {"gib": "number"}))
            .mark_rule(color="#e45756", strokeDash=[4, 3])
            .encode(x="gib:Q", tooltip=[alt.Tooltip("gib:Q", title="device GiB", format=".2f")])
        )
        chart = bars + rule
    return Figure("memory", "Memory per rank", chart, len(df))


def sweep_chart(sweep: pd.DataFrame, index: int) -> Figure:
    """Throughput against memory of every configuration of one sweep: the Pareto front as a line,
    what does not fit greyed out, the base marked; hovering shows the configuration."""
    varying = [k for k in CONFIG_KEYS if k in sweep and sweep[k].astype(str).nunique() > 1]
    s = sweep.assign(
        fit=sweep["fits"].map({True: "fits", False: "does not fit"}).fillna("device unknown"),
        base=sweep["is_base"].map({True: "base", False: ""}),
        config=sweep[varying]
        .astype(str)
        .apply(lambda r: " ".join(f"{k}={v}" for k, v in r.items()), axis=1)
        if varying
        else "",
        low_ms=sweep["interval_low_ns"] / 1e6,
        high_ms=sweep["interval_high_ns"] / 1e6,
        mfu_pct=100 * sweep["mfu"].astype("Float64"),
    )
    cols = {
        "memory_gib": "number", "tokens_per_s": "number", "predicted_ms": "number",
        "low_ms": "number", "high_ms": "number", "mfu_pct": "number", "fit": "string",
        "pareto": "boolean", "base": "string", "config": "string",
    }  # fmt: skip
    cols.update({k: "string" for k in varying})
    data = _data(s, cols)
    fits = [f for f in ("fits", "device unknown", "does not fit") if f in set(s["fit"])]
    palette = {"fits": "#4c78a8", "device unknown": "#4c78a8", "does not fit": "#c7c7c7"}
    tooltip = [alt.Tooltip(f"{k}:N") for k in varying] + [
        alt.Tooltip("tokens_per_s:Q", title="tokens/s", format=",.0f"),
        alt.Tooltip("predicted_ms:Q", title="step ms", format=".3f"),
        alt.Tooltip("low_ms:Q", title="interval low ms", format=".3f"),
        alt.Tooltip("high_ms:Q", title="interval high ms", format=".3f"),
        alt.Tooltip("memory_gib:Q", title="memory GiB", format=".3f"),
        alt.Tooltip("mfu_pct:Q", title="MFU %", format=".1f"),
        alt.Tooltip("fit:N", title="memory"),
        alt.Tooltip("base:N", title="base"),
    ]
    base = alt.Chart(data).encode(
        x=alt.X("memory_gib:Q", title="memory per rank (GiB)", scale=alt.Scale(zero=False)),
        y=alt.Y("tokens_per_s:Q", title="tokens/s", scale=alt.Scale(zero=False)),
    )
    points = base.mark_point(filled=True, size=60).encode(
        color=alt.Color(
            "fit:N",
            scale=alt.Scale(domain=fits, range=[palette[f] for f in fits]),
            title="",
        ),
        tooltip=tooltip,
    )
    front = (
        base.transform_filter("datum.pareto")
        .mark_line(color="#f58518", strokeWidth=2, point=False)
        .encode(order="memory_gib:Q")
    )
    marked = base.transform_filter("datum.base == 'base'")
    star = marked.mark_point(shape="diamond", size=260, color="#e45756", strokeWidth=2.5).encode(
        tooltip=tooltip
    )
    text = marked.mark_text(align="left", dx=10, dy=-8, color="#e45756", fontWeight="bold").encode(
        text="base:N"
    )
    chart = (front + points + star + text).properties(width=560, height=340)
    sweep_id = str(s["sweep_id"].iloc[0])
    n_fit = int((s["fit"] != "does not fit").sum())
    title = f"Sweep {sweep_id}: {len(s)} configurations ({n_fit} fit), Pareto front in orange"
    return Figure(f"sweep_{index}", title, chart, len(s), hover=True)


# --- the fleet report -------------------------------------------------------------------------


def job_errors(errors: pd.DataFrame) -> pd.DataFrame:
    """Per job, its worst metric's replay error (the figure the fleet charts rank jobs by)."""
    idx = errors.groupby("job")["median_error_pct"].idxmax()
    return errors.loc[idx].sort_values("median_error_pct", ascending=False)


def error_hist_chart(errors: pd.DataFrame) -> Figure:
    """The distribution of replay errors over jobs and metrics (log-spaced bins)."""
    e = errors.assign(log_err=errors["median_error_pct"].clip(lower=1e-4).map(math.log10))
    cols = {"job": "string", "metric": "string", "median_error_pct": "number", "log_err": "number"}
    chart = (
        alt.Chart(_data(e, cols))
        .mark_bar()
        .encode(
            x=alt.X(
                "log_err:Q",
                bin=alt.Bin(step=0.25),
                title="median replay error of the worst rank (%, log scale)",
                axis=alt.Axis(labelExpr="format(pow(10, datum.value), '.2~g') + '%'"),
            ),
            y=alt.Y("count():Q", title="jobs × metrics"),
            color=alt.Color("metric:N", title=""),
            tooltip=[alt.Tooltip("metric:N"), alt.Tooltip("count():Q", title="jobs × metrics")],
        )
        .properties(width=560, height=220)
    )
    return Figure("error_distribution", "Replay error over the fleet", chart, len(e))


def worst_jobs_chart(errors: pd.DataFrame, top: int = 30) -> Figure:
    """The jobs with the largest replay error, worst first."""
    w = job_errors(errors).head(top)
    cols = {
        "job": "string", "metric": "string", "median_error_pct": "number",
        "max_error_pct": "number", "n_ranks": "number",
    }  # fmt: skip
    chart = (
        alt.Chart(_data(w, cols))
        .mark_bar()
        .encode(
            y=alt.Y("job:N", sort="-x", title=None, axis=alt.Axis(labelLimit=300)),
            x=alt.X("median_error_pct:Q", title="median replay error of the worst rank (%)"),
            color=alt.Color("metric:N", title=""),
            tooltip=[
                alt.Tooltip("job:N"),
                alt.Tooltip("metric:N"),
                alt.Tooltip("median_error_pct:Q", title="median %", format=".3f"),
                alt.Tooltip("max_error_pct:Q", title="max %", format=".3f"),
                alt.Tooltip("n_ranks:Q", title="ranks"),
            ],  # fmt: skip
        )
        .properties(width=460, height=alt.Step(16))
    )
    return Figure("worst_jobs", f"The {len(w)} jobs with the largest replay error", chart, len(w))


def estimates_chart(estimates: pd.DataFrame) -> Figure:
    """Each estimate of a configuration a real job ran: its error against the job's measured
    step, over the time it was made."""
    import pandas as pd

    stamps = pd.to_datetime(estimates["created_at"], utc=True).dt.tz_convert(None)
    e = estimates.assign(t=stamps.astype("datetime64[ms]").astype("int64"))  # epoch ms
    cols = {
        "t": "number", "measured_job": "string", "predicted_ms": "number",
        "measured_ms": "number", "error_pct": "number",
    }  # fmt: skip
    # a colour per job only while a legend can name them (1,000 jobs: one colour, and a
    # colour scale Vega need not build over every point)
    color = (
        alt.Color("measured_job:N", title="job")
        if e["measured_job"].nunique() <= 20
        else alt.value("#4c78a8")
    )
    points = (
        alt.Chart(_data(e, cols))
        .mark_circle(size=14 if len(e) > CANVAS_ROWS else 40, opacity=0.6)
        .encode(
            x=alt.X("t:T", title="estimated at"),
            y=alt.Y("error_pct:Q", title="estimate vs measured (%)"),
            color=color,
            tooltip=[
                alt.Tooltip("measured_job:N", title="job"),
                alt.Tooltip("t:T", format="%Y-%m-%d %H:%M"),
                alt.Tooltip("predicted_ms:Q", title="estimate ms", format=".3f"),
                alt.Tooltip("measured_ms:Q", title="measured ms", format=".3f"),
                alt.Tooltip("error_pct:Q", title="error %", format=".2f"),
            ],  # fmt: skip
        )
    )
    zero = alt.Chart(alt.Data(values=[{"y": 0}])).mark_rule(color="#888").encode(y="y:Q")
    chart = (zero + points).properties(width=640, height=260)
    return Figure("estimates", "Estimates against measured runs, over time", chart, len(e))


def ingest_chart(ingest: pd.DataFrame) -> Figure:
    """Files read and refused, the refused ones by reason."""
    i = ingest.assign(
        what=ingest["reason"].fillna("ok").where(ingest["status"] == "refused", "ok"),
    )
    i = i.groupby(["status", "what"], as_index=False)["n_files"].sum()
    i["short"] = i["what"].str.slice(0, 80)
    cols = {"status": "string", "what": "string", "short": "string", "n_files": "number"}
    chart = (
        alt.Chart(_data(i, cols))
        .mark_bar()
        .encode(
            y=alt.Y("short:N", sort="-x", title=None, axis=alt.Axis(labelLimit=420)),
            x=alt.X("n_files:Q", title="files"),
            color=alt.Color(
                "status:N",
                scale=alt.Scale(domain=["ok", "refused"], range=["#54a24b", "#e45756"]),
                title="",
            ),
            tooltip=[
                alt.Tooltip("status:N"),
                alt.Tooltip("what:N", title="reason"),
                alt.Tooltip("n_files:Q", title="files"),
            ],
        )
        .properties(width=360, height=alt.Step(18))
    )
    return Figure("ingest", "Ingest health: files read and refused, by reason", chart, len(i))
