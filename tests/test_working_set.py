"""The working-set model (lumos/estimate/working_set.py): the fit, the scale and its limits, by
hand; the fleet query on the real corpus against a recomputation from its events."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

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
    # every point is kept (job_scales of the fleet's jobs), the fit used the two that moved
    assert ws.job_scales()["big"] == pytest.approx(2**want)
    assert ws.job_scales()["same"] == pytest.approx(1.0)
    # the interval's spread: how far whole well-matched jobs strayed from the fit
    assert ws.spread == pytest.approx((0.92, 1.10 / 2**want))
    assert WorkingSet.from_dict(ws.to_dict()).spread == pytest.approx(ws.spread)


def test_too_few_jobs_or_a_negative_slope_teach_nothing():
    one = WorkingSet.fit([("big", math.log(2), math.log(1.2), 1.0), ("near", 0.05, 0.3, 1.0)])
    assert one.beta == 0.0 and "not learned" in one.notes[0]
    assert one.scale(1e6, 4e6) == (1.0, None)
    neg = WorkingSet.fit(
        [("a", math.log(2), math.log(0.9), 1.0), ("b", math.log(3), math.log(0.8), 1.0)]
    )
    assert neg.beta == 0.0


def test_scale_within_and_beyond_the_fleet():
    ws = WorkingSet(0.2, [("a", math.log(0.5), 0.0, 1.0), ("b", math.log(2.0), 0.0, 1.0)])
    f, warn = ws.scale(100.0, 150.0)
    assert f == pytest.approx(1.5**0.2) and warn is None
    f, warn = ws.scale(100.0, 300.0)  # beyond the fleet's 2x: extrapolated, and said
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
        if job.name in ("base", "layers_x0.5", "layers_x2", "hidden_x2", "dp2"):
            w.ingest([str(job)], job=job.name)
    return wh


def test_job_speed_on_the_corpus(corpus_wh):
    """job_speed.sql against the same ratio recomputed from the events: the 2-layer job runs the
    base's ops faster, the 8-layer job slower; the 2-rank job is not compared with a single-rank
    base (contention is fleet.py's)."""
    import duckdb

    from lumos.api import Warehouse
    from lumos.estimate.fleet_sql import fleet_rows

    wh = Warehouse.open(corpus_wh)
    (rows,), why = fleet_rows(wh, ["job_speed"], "base")
    assert why is None
    got = {r[0]: r[1] for r in rows}
    assert set(got) == {"layers_x0.5", "layers_x2", "hidden_x2"}
    con = duckdb.connect(str(wh.catalog), read_only=True)
    ev = con.execute(
        "SELECT job, name, input_dims, dur_ns FROM events WHERE cat = 'cpu_op' AND ph = 'X' "
        "AND dur_ns > 0 AND job IN ('base', 'layers_x0.5', 'layers_x2')"
    ).df()
    con.close()
    ev = ev[ev.input_dims.fillna("").str.contains("[0-9]", regex=True)]
    ev = ev[~ev.name.str.startswith(("c10d::", "gloo:")) & ~ev.name.str.contains("nccl")]
    med = ev.groupby(["job", "name", "input_dims"]).dur_ns.agg(["median", "count"]).reset_index()
    base = med[med.job == "base"].set_index(["name", "input_dims"])["median"]
    for job in ("layers_x0.5", "layers_x2"):
        m = med[med.job == job].set_index(["name", "input_dims"])
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
    from lumos.estimate.fleet_sql import fleet_rows

    wh = Warehouse.open(warehouse_dir, create=True)
    src = sorted((examples / "dlrm_8rank").glob("*.json.gz"))
    wh.ingest([str(src[0])], job="a")
    wh.ingest([str(src[1])], job="b")
    (rows,), why = fleet_rows(wh, ["job_speed"], "a")
    assert why is None and rows == []
    ws = WorkingSet.calibrate(wh, "a")
    assert ws.beta == 0.0 and "not learned" in " ".join(ws.notes)
