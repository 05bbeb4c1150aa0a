"""Torture cases of unbounded time or memory from ordinary-looking input (item 6): gigabytes of
blanks, a string of hundreds of megabytes, `select *` of many events, estimates and grids far
out of range."""

from __future__ import annotations

import shutil
from pathlib import Path

from torture_bench import BASE, BIG, GPT_CPU, Bench, sql_rows
from torture_checks import Verdict, lumos, state
from torture_inputs import blanks_between_events, giant_string

# ------------------------------------------------------------------------- 6. unbounded input


def unbounded(b: Bench) -> None:
    wh = b.warehouse("unbounded")
    blanks = (64 << 20) if b.quick else (5 << 30)
    giant = (80 << 20) if b.quick else (300 << 20)
    if b.quick:
        b.scaled.append("unbounded: 64 MiB of blanks (the issue: 5 GB), an 80 MiB string (300 MB)")

    def ingest_bounded(path: Path, job: str, ok: bool, says: str, rss_mb: float) -> Verdict:
        v = Verdict()
        before = state(wh)
        ran = lumos("ingest", str(path), "--job", job, "-q", "--warehouse", str(wh), timeout=120)
        (v.succeeded if ok else v.refused)(ran, says)
        v.need(ran.max_rss_mb < rss_mb, f"peak RSS {ran.max_rss_mb:,.0f} MB >= {rss_mb:,.0f} MB")
        v.note(
            f"{path.stat().st_size / 1e6:.1f} MB file, {ran.wall_s:.1f} s, peak RSS {ran.max_rss_mb:,.0f} MB"
        )
        if not ok:
            v.need(len(state(wh).rows) == len(before.rows) + 1, "not one refused manifest row")
        v.later_ingest_works(wh, BASE, job)
        return v

    ws = b.tmp / "inputs" / "blanks.json.gz"
    b.case(
        "unbounded", f"{blanks >> 20:,} MiB of whitespace inside traceEvents",
        lambda: ingest_bounded(blanks_between_events(ws, b.doc, blanks), "blanks", True, "1 ingested", 600), True,
    )  # fmt: skip
    ws.unlink(missing_ok=True)
    gs = b.tmp / "inputs" / "giant.json.gz"
    b.case(
        "unbounded", f"a string of {giant >> 20} MiB",
        lambda: ingest_bounded(giant_string(gs, b.doc, giant), "giant", False, "runs past", 800), True,
    )  # fmt: skip

    def max_rows() -> Verdict:
        v = Verdict()
        ran = lumos("sql", "select * from events", "--max-rows", "10", "--warehouse", str(wh))
        v.succeeded(ran)
        rows = [ln for ln in ran.out.splitlines() if ln.strip()]
        v.need(len(rows) <= 1 + 10 + 1, f"printed {len(rows)} lines")
        return v

    b.case("unbounded", "lumos sql --max-rows 10", max_rows)
    b.case(
        "unbounded",
        "select * from events, table and csv, 4 copies of the biggest trace",
        lambda: _big_select(b),
    )
    ran = lumos("ingest", str(GPT_CPU), "-q", "--warehouse", str(wh))
    if ran.rc != 0:
        raise RuntimeError(f"ingesting {GPT_CPU}: {ran.brief()}")

    # a first estimate writes the job's template cache (estimate_templates/): not a change
    warm = lumos("estimate", "--job", "gpt_cpu", "--set", "layers=4", "--warehouse", str(wh))
    if warm.rc != 0:
        raise RuntimeError(f"a first estimate: {warm.brief()}")

    def estimate(s: str, says: str) -> Verdict:
        v = Verdict()
        before = state(wh)
        ran = lumos("estimate", "--job", "gpt_cpu", "--set", s, "--warehouse", str(wh), timeout=60)
        v.refused(ran, says)
        v.need(ran.max_rss_mb < 1000, f"peak RSS {ran.max_rss_mb:,.0f} MB")
        v.unchanged(before, state(wh))
        return v

    b.case(
        "unbounded",
        "estimate --set layers=140000",
        lambda: estimate("layers=140000", "at most 5,000,000"),
        True,
    )
    b.case(
        "unbounded",
        "estimate --set speedup.all=1e308",
        lambda: estimate("speedup.all=1e308", "between 1/1000 and 1000"),
    )
    b.case("unbounded", "estimate --set vocab=0", lambda: estimate("vocab=0", "vocab"), True)

    def sweep(grid: str, ok: bool, says: str) -> Verdict:
        v = Verdict()
        path = b.tmp / "inputs" / "grid.yaml"
        path.write_text(grid)
        before = state(wh)
        ran = lumos(
            "sweep",
            "--job",
            "gpt_cpu",
            "--grid",
            str(path),
            "--no-write",
            "--warehouse",
            str(wh),
            timeout=90,
        )
        (v.succeeded if ok else v.refused)(ran, says)
        v.need(ran.max_rss_mb < 1000, f"peak RSS {ran.max_rss_mb:,.0f} MB")
        v.note(f"{ran.wall_s:.1f} s")
        v.unchanged(before, state(wh))
        return v

    axis = list(range(1, 1001))
    b.case(
        "unbounded",
        "a grid constraint 10**10**10 > 1",
        lambda: sweep("grid:\n  layers: [2]\nconstraints:\n  - 10**10**10 > 1\n", True, "layers=2"),
    )
    b.case(
        "unbounded",
        "a grid of 1,000,000 points",
        lambda: sweep(
            f"grid: {{layers: {axis}, micro_batch: {axis}}}\n", False, "1,000,000 points"
        ),
    )


def _big_select(b: Bench) -> Verdict:
    v = Verdict()
    wh = b.tmp / "wh-big"
    for k in range(4):
        ran = lumos(
            "ingest", str(BIG), "--job", f"big{k}", "-q", "--warehouse", str(wh), timeout=180
        )
        if not v.need(ran.rc == 0, f"setting up: {ran.brief()}"):
            return v
    n = sql_rows(wh, "select count(*) as n from events")[0]["n"]
    b.scaled.append(f"unbounded: select * over {n:,} events (the issue: 2M)")
    for fmt in ("table", "csv"):
        ran = lumos(
            "sql", "select * from events", "--format", fmt, "--warehouse", str(wh), timeout=300
        )
        v.succeeded(ran)
        v.need(ran.max_rss_mb < 1500, f"{fmt}: peak RSS {ran.max_rss_mb:,.0f} MB")
        v.note(
            f"{fmt}: {ran.out_bytes / 1e6:,.1f} MB out, peak RSS {ran.max_rss_mb:,.0f} MB, {ran.wall_s:.1f} s"
        )
    shutil.rmtree(wh)
    return v
