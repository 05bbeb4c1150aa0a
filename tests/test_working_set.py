"""The working-set model (lumos/estimate/working_set.py) and the idle-gap model
(lumos/estimate/idle_gaps.py): the fits, the scales and their limits, by hand; the calibration queries
on the real corpus against recomputations from its events."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lumos.estimate.idle_gaps import IdleGaps
from lumos.estimate.working_set import MAX_LOG_RATIO, WorkingSet

CORPUS = Path(__file__).parent / "data" / "corpus"


def test_fit_is_weighted_least_squares_through_the_origin():
    # state x2 -> 10% slower (weight 1), state x0.5 -> 5% faster (weight 3), and a job of the
    # base's state that ran 8% faster (no say in the slope)
    pts = [
        ("big", math.log(2), math.log(1.10), 1.0),
        ("small", math.log(0.5), math.log(0.95), 3.0),
        ("same", 0.0, math.log(0.92), 1.0),
    ]
    ws = WorkingSet.fit(pts)
    l2 = math.log(2)
    want = (l2 * math.log(1.10) - 3 * l2 * math.log(0.95)) / (l2 * l2 + 3 * l2 * l2)
    assert ws.beta == pytest.approx(want)
    assert "big" in ws.notes[0] and "small" in ws.notes[0] and "same" not in ws.notes[0]
    # the one run at the base's state says how fast a new run is: its speed, shrunk by 1/2
    offset = math.log(0.92) / 2
    assert ws.offset == pytest.approx(offset)
    # every point is kept (job_scales of the calibration jobs), the fit used the two that moved
    assert ws.job_scales()["big"] == pytest.approx(2**want * math.exp(offset))
    assert ws.job_scales()["same"] == pytest.approx(math.exp(offset))
    # the interval's spread: how far whole well-matched jobs strayed from the fit
    assert ws.spread == pytest.approx((0.92, 1.10 / 2**want))
    assert WorkingSet.from_dict(ws.to_dict()).spread == pytest.approx(ws.spread)


def test_the_calibration_jobs_run_speed_shrunk_by_its_number_of_runs():
    # two runs at the base's state, matched on most of their op time, ran 10% faster; a job
    # matched on 5% of its time says nothing about run speed
    pts = [
        ("a", 0.0, math.log(0.9), 1.0),
        ("b", 0.0, math.log(0.9), 0.8),
        ("c", math.log(2), math.log(0.5), 0.05),
    ]
    ws = WorkingSet.fit(pts)
    assert ws.beta == 0.0  # one job moved: no slope
    assert ws.offset == pytest.approx(math.log(0.9) * 2 / 3)
    assert ws.run_speed == pytest.approx(0.9 ** (2 / 3))
    assert ws.scale(1e6, 2e6) == (1.0, None)  # the state's law is apart from the run's speed
    note = ws.run_notes()[0]
    assert "11.1% slower than the 2 calibration job(s)" in note and "(a, b)" in note
    # the base's own speed (1) and the calibration jobs' (0.9) stay inside the interval about the
    # estimate
    lo, hi = ws.interval_spread()
    assert lo * ws.run_speed == pytest.approx(0.9) and hi * ws.run_speed == pytest.approx(1.0)
    assert WorkingSet.from_dict(ws.to_dict()).offset == pytest.approx(ws.offset)
    # a well-matched job of another state speaks through the law, not about run speed
    other = WorkingSet.fit(pts + [("d", math.log(2), math.log(1.5), 1.0)])
    assert other.offset == pytest.approx(ws.offset) and "(a, b)" in other.run_notes()[0]
    # a borrowed slope keeps the offset, its residuals taken about the prior's slope
    from lumos.estimate.priors import load

    borrowed = ws.with_prior(load("cpu"))
    assert borrowed.offset == pytest.approx(ws.offset) and borrowed.run_notes()
    # no well-matched run: the base's speed is the only one known
    alone = WorkingSet.fit([pts[2]])
    assert alone.offset == 0.0 and alone.run_notes() == [] and alone.run_speed == 1.0


def test_contention_scale_is_the_state_against_the_jobs_compared_with():
    states = {"pp": 50.0, "base": 100.0, "big": 400.0, "small": 25.0}
    scale = WorkingSet(0.2).contention_scale(states.get)
    # time-weighted median of the references' log states: base (3 of 5 units of time)
    refs = [{"job": "small", "t": 1.0}, {"job": "base", "t": 3.0}, {"job": "big", "t": 1.0}]
    assert scale("pp", refs) == pytest.approx(0.5**0.2)
    # mostly compared with an 8x larger state: clamped at 4x, as the working-set law is
    big = [{"job": "big", "t": 4.0}, {"job": "base", "t": 1.0}]
    assert scale("pp", big) == pytest.approx(math.exp(-0.2 * MAX_LOG_RATIO))
    assert scale("unknown", refs) == 1.0 and scale("pp", []) == 1.0
    assert scale("pp", [{"job": "unknown", "t": 1.0}]) == 1.0
    assert WorkingSet(0.0).contention_scale(states.get)("pp", refs) == 1.0


def test_too_few_jobs_or_a_negative_slope_teach_nothing():
    one = WorkingSet.fit([("big", math.log(2), math.log(1.2), 1.0), ("near", 0.05, 0.3, 1.0)])
    assert one.beta == 0.0 and "not learned" in one.notes[0]
    assert one.scale(1e6, 4e6) == (1.0, None)
    neg = WorkingSet.fit(
        [("a", math.log(2), math.log(0.9), 1.0), ("b", math.log(3), math.log(0.8), 1.0)]
    )
    assert neg.beta == 0.0


def test_scale_within_and_beyond_the_calibration_jobs():
    ws = WorkingSet(0.2, [("a", math.log(0.5), 0.0, 1.0), ("b", math.log(2.0), 0.0, 1.0)])
    f, warn = ws.scale(100.0, 150.0)
    assert f == pytest.approx(1.5**0.2) and warn is None
    f, warn = ws.scale(100.0, 300.0)  # beyond the calibration jobs' 2x: extrapolated, and said
    assert f == pytest.approx(3.0**0.2) and "extrapolated" in warn
    f, warn = ws.scale(100.0, 1000.0)  # cache effects saturate: held at 4x
    assert f == pytest.approx(math.exp(0.2 * MAX_LOG_RATIO)) and warn
    f, _ = ws.scale(100.0, 1.0)
    assert f == pytest.approx(math.exp(-0.2 * MAX_LOG_RATIO))


def test_from_rows_and_round_trip():
    rows = [("a", 1.1, 10, 0.5), ("b", 0.9, 10, 0.001), ("c", 0.0, 3, 0.9), ("d", 1.2, 4, 0.4)]
    state = {"a": 200.0, "b": 50.0, "c": 300.0}  # d's state unknown
    ws = WorkingSet.from_rows(rows, state, 100.0)
    assert [p[0] for p in ws.points] == ["a", "b"]  # c: no ratio, d: no state
    assert ws.points[1][3] == pytest.approx(0.02)  # a tiny share still speaks, a little
    # ... but not for the spread: only a's residual counts (b matched on 0.1% of its time)
    r = 1.1 / 2**ws.beta
    assert ws.spread == pytest.approx((min(r, 1.0), max(r, 1.0)))
    back = WorkingSet.from_dict(ws.to_dict())
    assert back.beta == pytest.approx(ws.beta) and back.points == ws.points
    assert WorkingSet.from_dict(None).beta == 0.0


@pytest.fixture(scope="module")
def corpus_wh(tmp_path_factory) -> Path:
    from lumos.api import Warehouse
    from lumos.estimate.accuracy import corpus_jobs

    wh = tmp_path_factory.mktemp("ws") / "wh"
    w = Warehouse.open(wh, create=True)
    for job in corpus_jobs(CORPUS):
        if job.name in ("base", "layers_x0.5", "layers_x2", "hidden_x2", "micro_batch_x2", "dp2"):
            w.ingest([str(job)], job=job.name)
    return wh


def test_job_speed_on_the_corpus(corpus_wh):
    """job_speed.sql against the same ratio recomputed from the events: the 2-layer job runs the
    base's ops faster, the 8-layer job slower; the 2-rank job is not compared with a single-rank
    base (contention is contention.py's)."""
    import duckdb

    from lumos.api import Warehouse
    from lumos.estimate.calibration_sql import calibration_rows

    wh = Warehouse.open(corpus_wh)
    (rows,), why = calibration_rows(wh, ["job_speed"], "base")
    assert why is None
    got = {r[0]: r[1] for r in rows}
    assert set(got) == {"layers_x0.5", "layers_x2", "hidden_x2", "micro_batch_x2"}
    con = duckdb.connect(str(wh.catalog), read_only=True)
    ev = con.execute(
        "SELECT job, name, input_dims, input_types, dur_ns FROM events WHERE cat = 'cpu_op' "
        "AND ph = 'X' AND dur_ns > 0 AND job IN ('base', 'layers_x0.5', 'layers_x2')"
    ).df()
    con.close()
    ev = ev[ev.input_dims.fillna("").str.contains("[0-9]", regex=True)]
    ev = ev[~ev.name.str.startswith(("c10d::", "gloo:")) & ~ev.name.str.contains("nccl")]
    # an op is its name, shapes and dtypes
    ev["key"] = ev.input_dims.fillna("") + " " + ev.input_types.fillna("")
    med = ev.groupby(["job", "name", "key"]).dur_ns.agg(["median", "count"]).reset_index()
    base = med[med.job == "base"].set_index(["name", "key"])["median"]
    for job in ("layers_x0.5", "layers_x2"):
        m = med[med.job == job].set_index(["name", "key"])
        m = m[m.index.isin(base.index)]
        ratio = (m["count"] * m["median"]).sum() / (m["count"] * base[m.index]).sum()
        assert got[job] == pytest.approx(ratio, rel=1e-9)
    assert got["layers_x0.5"] < 1.0 < got["layers_x2"]
    ws = WorkingSet.calibrate(wh, "base")
    assert 0.0 < ws.beta < 0.5, ws.notes
    # the 2-layer job's state is smaller than the base's, the 8-layer's larger
    x = {p[0]: p[1] for p in ws.points}
    assert x["layers_x0.5"] < 0 < x["layers_x2"] < x["hidden_x2"]


def test_gpu_jobs_teach_no_working_set(examples: Path, warehouse_dir: Path):
    """Two real GPU jobs on the same device: their CPU ops are launches, so nothing is learned
    (and nothing fails) even though the jobs share op shapes."""
    from lumos.api import Warehouse
    from lumos.estimate.calibration_sql import calibration_rows

    wh = Warehouse.open(warehouse_dir, create=True)
    src = sorted((examples / "dlrm_8rank").glob("*.json.gz"))
    wh.ingest([str(src[0])], job="a")
    wh.ingest([str(src[1])], job="b")
    (rows,), why = calibration_rows(wh, ["job_speed"], "a")
    assert why is None and rows == []
    ws = WorkingSet.calibrate(wh, "a")
    assert ws.beta == 0.0 and "not learned" in " ".join(ws.notes)


def test_idle_gap_fit_and_scale_by_hand():
    # activations x2 -> gaps x1.3 (weight 1), x0.5 -> x0.9 (weight 1); a layers-only job (no
    # change of activations) has no say
    pts = [
        ("big", math.log(2), math.log(1.3), 1.0),
        ("small", math.log(0.5), math.log(0.9), 1.0),
        ("layers", 0.0, math.log(1.1), 1.0),
    ]
    g = IdleGaps.fit(pts)
    l2 = math.log(2)
    want = (l2 * math.log(1.3) - l2 * math.log(0.9)) / (2 * l2 * l2)
    assert g.gamma == pytest.approx(want)
    assert "big" in g.notes[0] and "layers" not in g.notes[0]
    f, warn = g.scale(100.0, 150.0)
    assert f == pytest.approx(1.5**want) and warn is None
    f, warn = g.scale(100.0, 1000.0)  # beyond the calibration jobs' 2x: clamped at 4x, and said
    assert f == pytest.approx(math.exp(want * MAX_LOG_RATIO)) and "extrapolated" in warn
    back = IdleGaps.from_dict(g.to_dict())
    assert back.gamma == pytest.approx(g.gamma) and back.points == g.points
    # one job that moved, or gaps that shrink with size, teach nothing
    assert IdleGaps.fit(pts[:1] + pts[2:]).gamma == 0.0
    shrink = IdleGaps.fit([("a", l2, -0.1, 1.0), ("b", -l2, 0.1, 1.0)])
    assert shrink.gamma == 0.0 and shrink.scale(1.0, 2.0) == (1.0, None)
    assert IdleGaps.from_dict(None).scale(1.0, 2.0) == (1.0, None)


def test_job_gaps_on_the_corpus(corpus_wh):
    """job_gaps.sql against the same ratio recomputed from the events with pandas: the gaps
    between top-level ops inside each ProfilerStep, per op name; larger activations (hidden x2,
    micro-batch x2) lengthen them, and the fitted slope says so."""
    import duckdb
    import pandas as pd

    from lumos.api import Warehouse
    from lumos.estimate.calibration_sql import calibration_rows

    wh = Warehouse.open(corpus_wh)
    (rows,), why = calibration_rows(wh, ["job_gaps"], "base")
    assert why is None
    got = {r[0]: r[1] for r in rows}
    assert set(got) == {"layers_x0.5", "layers_x2", "hidden_x2", "micro_batch_x2"}
    con = duckdb.connect(str(wh.catalog), read_only=True)
    ev = con.execute(
        "SELECT job, rank, tid, event_idx, cat, name, ts_ns, dur_ns FROM events "
        "WHERE ph = 'X' AND job IN ('base', 'hidden_x2', 'layers_x2') "
        "AND (cat = 'cpu_op' OR (cat = 'user_annotation' AND name LIKE 'ProfilerStep#%'))"
    ).df()
    con.close()
    med = {}
    for (job, rank, _tid), g in ev[ev.cat == "cpu_op"].groupby(["job", "rank", "tid"]):
        g = g.sort_values(["ts_ns", "event_idx"])
        end = (g.ts_ns + g.dur_ns).to_numpy()
        prev_max = pd.Series(end).cummax().shift(1).to_numpy()
        top = g[(g.ts_ns.to_numpy() >= prev_max) | pd.isna(prev_max)].copy()
        steps = ev[(ev.cat == "user_annotation") & (ev.job == job) & (ev["rank"] == rank)]
        top["step"] = -1
        for s0, d in zip(steps.ts_ns, steps.dur_ns, strict=True):
            top.loc[(top.ts_ns >= s0) & (top.ts_ns < s0 + d), "step"] = s0
        top = top[top.step >= 0]
        top["gap"] = top.ts_ns - (top.ts_ns + top.dur_ns).groupby(top.step).shift(1)
        med.setdefault(job, []).append(top[["name", "gap"]].dropna())
    per = {j: pd.concat(v).query("gap >= 0").groupby("name").gap for j, v in med.items()}
    base_n, base_med = per["base"].count(), per["base"].median()
    for job in ("hidden_x2", "layers_x2"):
        m = per[job].median()
        common = base_med.index.intersection(m.index)
        want = (base_n[common] * m[common]).sum() / (base_n[common] * base_med[common]).sum()
        assert got[job] == pytest.approx(want, rel=1e-9), job
    assert got["hidden_x2"] > got["layers_x2"] > got["layers_x0.5"]
    g = IdleGaps.calibrate(wh, "base")
    assert 0.0 < g.gamma < 1.0, g.notes
    x = {p[0]: p[1] for p in g.points}
    assert x["layers_x2"] == 0.0 and x["hidden_x2"] == x["micro_batch_x2"] == pytest.approx(
        math.log(2)
    )
