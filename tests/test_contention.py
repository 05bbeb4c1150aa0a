"""What the estimator learns from the warehouse's other jobs: co-location contention (rows as
`lumos_sql/estimate/contention.sql` returns them, and the SQL itself on a real corpus job pair),
the robust collective-cost fit, and one TP all-reduce per linear."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lumos.estimate.comm import CommModel
from lumos.estimate.contention import Contention
from lumos.estimate.template import ROLE
from lumos.estimate.transforms import _run_ends

CORPUS = Path(__file__).parent / "data" / "corpus"


def test_contention_factor_by_world():
    rows = [
        (2, "a", 1.2, 50, 0.9),
        (2, "b", 1.4, 50, 0.95),
        (2, "c", 1.3, 50, 0.9),
        (2, "tp", 0.6, 10, 0.3),  # matched too little of its time: ignored
        (4, "d", 2.0, 40, 0.8),
    ]
    c = Contention.from_rows(rows)
    assert c.factor(1) == (1.0, None)
    assert c.factor(2) == (1.3, None)
    assert c.jobs[2] == ["a", "b", "c"]
    f, warn = c.factor(8)  # not seen: the largest smaller world's, flagged
    assert f == 2.0 and "world 8" in warn
    scale, warns = c.scale(2, 4)
    assert scale == pytest.approx(2.0 / 1.3) and warns == []
    assert c.spread(1, 2) == pytest.approx((1.2 / 1.3, 1.4 / 1.3))
    assert c.spread(2, 2) == (1.0, 1.0)
    assert Contention.from_rows([]).factor(2)[1]  # nothing learned: 1, and said so
    again = Contention.from_dict(c.to_dict())
    assert again.by_world == c.by_world and again.ratios == c.ratios
    # without lock-step jobs, a TP target takes the others' factor and is told so
    f, warn = c.factor(2, lockstep=True)
    assert f == 1.3 and "lock-step" in warn


def test_contention_of_lockstep_jobs():
    """Jobs with synchronous collectives (TP) teach their own factor, whatever share of their
    op time matched (their sliced GEMMs match nothing single-rank)."""
    rows = [
        (2, "a", 1.2, 50, 0.9),
        (2, "b", 1.4, 50, 0.95),
        (2, "tp", 1.6, 10, 0.3),
        (2, "tp_wide", 1.8, 10, 0.3),
    ]
    c = Contention.from_rows(rows, lockstep_jobs=["tp", "tp_wide"])
    assert c.factor(2) == (pytest.approx(1.3), None) and c.jobs[2] == ["a", "b"]
    assert c.factor(2, lockstep=True) == (pytest.approx(1.7), None)
    assert c.lockstep.jobs[2] == ["tp", "tp_wide"]
    # base single-rank, target TP 2: the lock-step factor; a DP base to a TP target: their ratio
    assert c.scale(1, 2, False, True)[0] == pytest.approx(1.7)
    assert c.scale(2, 2, False, True)[0] == pytest.approx(1.7 / 1.3)
    assert c.spread(1, 2, False, True) == pytest.approx((1.6 / 1.7, 1.8 / 1.7))
    assert c.spread(2, 2, False, True) == pytest.approx((1.6 / 1.7, 1.8 / 1.7))
    # a world size no lock-step job has reached: the other jobs' factor, said so
    f, warn = Contention.from_rows([(2, "a", 1.2, 50, 0.9), (4, "tp", 1.6, 9, 0.3)], ["tp"]).factor(
        2, lockstep=True
    )
    assert f == 1.2 and "lock-step" in warn
    again = Contention.from_dict(c.to_dict())
    assert again.lockstep.by_world == c.lockstep.by_world and again.by_world == c.by_world


def test_collective_fit_uses_least_inflated_instances():
    # ring all-reduce of 2 ranks: per step alpha + (bytes/2)/bw; alpha 50 us, bw 1 byte/ns
    alpha, bw = 50_000.0, 1.0
    samples = []
    for nbytes in (1 << 20, 4 << 20):
        clean = 2 * (alpha + nbytes / 2 / bw)
        # most instances inflated by waiting for a late peer, a quarter clean
        samples += [(2, nbytes, clean)] * 3 + [(2, nbytes, clean * f) for f in (3, 5, 8, 2, 4)]
    m = CommModel._fit_samples(samples)
    assert m.alpha_ns == pytest.approx(alpha, rel=0.05)
    assert m.bw_bytes_per_ns == pytest.approx(bw, rel=0.05)


def test_synchronous_allreduce_latency():
    m = CommModel(1_000.0, 1.0, "test")
    assert m.allreduce_ns(1000, 2, sync=True) == m.allreduce_ns(1000, 2) == 2 * 1_000 + 1000
    m._attach_sync([])
    assert m.sync_alpha_ns is None and "transfer only" in m.sync_notes[0]
    # 2 ranks, 2 KB: transfer 1000 ns per ring step at 1 byte/ns; the callers blocked 2*(5000 +
    # 1000) ns on average (waits of 8000 and 16000 ns)
    m._attach_sync([(2, 2000, 8000.0), (2, 2000, 16000.0)])
    assert m.sync_alpha_ns == 5000.0
    assert m.allreduce_ns(2000, 2, sync=True) == 12_000.0
    m._attach_sync([(2, 2000, 100.0)])  # never below the transfer's own latency
    assert m.sync_alpha_ns == 1_000.0


def test_one_tp_allreduce_per_linear():
    # a layer's backward as autograd runs it: each linear is view / addmm / T backward with the
    # weight's AccumulateGrad interleaved; up and qkv take the all-reduce (column-parallel)
    p, up, qkv, tok = ROLE["param_l"], ROLE["gemm_up"], ROLE["gemm_qkv"], ROLE["tok_h"]
    role = np.array([tok, up, up, p, up, p, up, tok, p, qkv, qkv, p, qkv, qkv, tok, p])
    ends = _run_ends(role, (up, qkv), transparent=(p,))
    assert ends.tolist() == [6, 13]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not checked out")
def test_contention_sql_on_real_jobs(tmp_path):
    """dp2 runs base's exact per-rank work on two ranks of the same host: its ops are slower.
    The estimator's cache follows the calibration jobs: ingesting dp2 after a first estimate re-learns
    (before it, contention is the CPU host prior's, and the estimate says so)."""
    from lumos.api import Warehouse
    from lumos.estimate import priors
    from lumos.estimate.estimator import Estimator

    wh = Warehouse.open(tmp_path / "wh", create=True)
    wh.ingest([str(CORPUS / "base")], job="base")
    before = Estimator.open(wh.root, "base")
    prior = priors.load("cpu")
    assert before.contention.by_world == prior.contention
    assert before.contention.jobs == {2: [prior.cite()]}
    warnings = before.predict([before.target({"dp": 2})])[0].warnings
    assert any("host prior" in w and "contention" in w for w in warnings), warnings
    wh.ingest([str(CORPUS / "dp2")], job="dp2")
    c = Contention.calibrate(wh, "base")
    assert c.jobs == {2: ["dp2"]}
    assert 1.05 < c.by_world[2] < 2.0, c.notes
    assert Contention.calibrate(wh, "base", exclude=["dp2"]).by_world == {}
    after = Estimator.open(wh.root, "base")
    assert after.contention.by_world == c.by_world
    assert (
        after.predict([after.target({"dp": 2})])[0].predicted_ns
        > before.predict([before.target({"dp": 2})])[0].predicted_ns
    )


def test_exposed_allreduce_wait():
    m = CommModel(1_000.0, 1.0, "test")
    m._attach_exposed([])
    assert m.exposed_wait_ns == 0.0 and "transfer only" in m.exposed_notes[0]
    assert m.exposed_allreduce_ns(2000, 2) == m.allreduce_ns(2000, 2) == 4_000.0
    # 2 ranks: 2 KB transfers in 2*1000 + 2000 = 4000 ns; the step paid 8000 and 10000 ns on
    # average (5000 of peer wait); 4 KB: 6000 ns of transfer, paid 7000 (1000); mean over sizes
    m._attach_exposed([(2, 2000, 8000.0), (2, 2000, 10000.0), (2, 4000, 7000.0)])
    assert m.exposed_wait_ns == 3_000.0
    assert m.exposed_allreduce_ns(2000, 2) == 7_000.0
    m._attach_exposed([(2, 2000, 100.0)])  # faster than the transfer: no wait, never negative
    assert m.exposed_wait_ns == 0.0
