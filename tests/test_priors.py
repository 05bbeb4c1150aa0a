"""Host priors (lumos/estimate/priors.py): each calibration model takes the prior only for the laws its
warehouse could not teach, says so, and keeps what it learned. The packaged CPU prior against
the bundled corpus, and estimates from a base alone, are checked in test_corpus.py."""

from __future__ import annotations

import json
import math

import pytest

from lumos.estimate import priors
from lumos.estimate.comm import FIT_SOURCE, CommModel
from lumos.estimate.contention import Contention
from lumos.estimate.idle_gaps import IdleGaps
from lumos.estimate.priors import HostPrior
from lumos.estimate.working_set import WorkingSet

PRIOR = HostPrior(
    "cpu",
    "a test host",
    alpha_ns=100_000.0,
    bw_bytes_per_ns=2.0,
    sync_alpha_ns=400_000.0,
    exposed_wait_ns=3_000_000.0,
    contention={2: 1.05},
    contention_ratios={2: [1.0, 1.05, 1.1]},
    lockstep={2: 1.2},
    lockstep_ratios={2: [1.15, 1.25]},
    beta=0.1,
    beta_span=(math.log(0.5), math.log(3.0)),
    beta_spread=(0.9, 1.05),
    gamma=0.3,
    gamma_span=(0.0, math.log(2.0)),
)


def test_round_trip_and_packaged_priors():
    assert HostPrior.from_dict(json.loads(json.dumps(PRIOR.to_dict()))) == PRIOR
    cpu = priors.load("cpu")
    assert cpu is not None and cpu.kind == "cpu"
    # every law of the packaged prior is a physical one: positive latencies, slowdowns >= 1
    assert cpu.alpha_ns > 0 and cpu.bw_bytes_per_ns > 0 and cpu.sync_alpha_ns > cpu.alpha_ns
    assert all(f >= 1.0 for f in [*cpu.contention.values(), *cpu.lockstep.values()])
    assert cpu.beta > 0 and cpu.gamma > 0
    assert priors.load("gpu") is None  # NCCL keeps comm.DEFAULTS; no CPU-side laws
    assert len(priors.describe(cpu)) == 5


def test_corrupt_prior_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(priors, "PRIOR_DIR", tmp_path)
    (tmp_path / "cpu.json").write_text('{"kind": "cpu"}')
    with pytest.raises(ValueError, match=r"cpu\.json: not a host prior"):
        priors.load("cpu")


def test_comm_takes_only_what_it_did_not_learn():
    bare = CommModel.default("cpu")
    m = bare.with_prior(PRIOR)
    assert (m.alpha_ns, m.bw_bytes_per_ns) == (PRIOR.alpha_ns, PRIOR.bw_bytes_per_ns)
    assert m.sync_alpha_ns == PRIOR.sync_alpha_ns
    assert m.exposed_wait_ns == PRIOR.exposed_wait_ns
    assert all("cpu host prior" in n for n in m.notes + m.sync_notes + m.exposed_notes)
    # a ring of 2 blocking on 64 KiB: 2 steps of the prior's synchronous latency, each moving
    # half the message at 2 bytes/ns
    assert m.allreduce_ns(65536, 2, sync=True) == pytest.approx(2 * (400_000 + 32768 / 2.0))
    assert bare.allreduce_ns(65536, 2, sync=True) < m.allreduce_ns(65536, 2, sync=True) / 5

    fitted = CommModel(5_000.0, 7.0, FIT_SOURCE, ["fitted"], 9_000.0, ["sync"])
    fitted._attach_exposed([(2, 1 << 20, 1_000_000.0)])
    kept = fitted.with_prior(PRIOR)
    assert (kept.alpha_ns, kept.bw_bytes_per_ns, kept.sync_alpha_ns) == (5_000.0, 7.0, 9_000.0)
    assert kept.exposed_wait_ns == fitted.exposed_wait_ns and kept.notes == ["fitted"]


def test_contention_takes_each_factor_on_its_own():
    empty = Contention.from_rows([])
    c = empty.with_prior(PRIOR)
    assert c.factor(2) == (1.05, None)
    assert c.factor(2, lockstep=True)[0] == 1.2
    assert c.spread(1, 2) == pytest.approx((1.0 / 1.05, 1.1 / 1.05))
    assert len(c.borrowed) == 2 and all("priors/cpu.json" in n for n in c.borrowed)
    # learned multi-rank contention is kept; only the missing lock-step factor is borrowed
    learned = Contention.from_rows([(2, "dp2", 1.3, 10, 0.9)])
    c = learned.with_prior(PRIOR)
    assert c.factor(2) == (1.3, None) and c.jobs[2] == ["dp2"]
    assert c.factor(2, lockstep=True)[0] == 1.2
    assert len(c.borrowed) == 1 and "lock-step" in c.borrowed[0]
    both = Contention.from_rows([(2, "dp2", 1.3, 10, 0.9), (2, "tp2", 1.4, 5, 0.3)], ["tp2"])
    assert both.with_prior(PRIOR).borrowed == []
    assert Contention.from_dict(c.to_dict()).borrowed == c.borrowed


def test_slopes_borrow_the_prior_law_with_its_span():
    one = [("a", math.log(2.0), math.log(1.1), 1.0)]  # one job that moved: nothing learned
    ws = WorkingSet.fit(one)
    assert not ws.learned and ws.beta == 0.0
    w = ws.with_prior(PRIOR)
    assert w.beta == 0.1 and w.borrowed and w.spread == (0.9, 1.05)
    f, warn = w.scale(1.0, 2.0)
    assert f == pytest.approx(2.0**0.1) and warn is None  # inside the prior's 0.5-3x
    f, warn = w.scale(1.0, 3.5)
    assert f == pytest.approx(3.5**0.1) and "beyond the 0.50-3.00x" in warn
    assert WorkingSet.from_dict(w.to_dict()) == w
    two = one + [("b", math.log(0.5), math.log(0.9), 1.0)]
    assert WorkingSet.fit(two).with_prior(PRIOR) == WorkingSet.fit(two)  # learned: kept

    g = IdleGaps.fit([]).with_prior(PRIOR)
    assert g.gamma == 0.3 and g.borrowed and "cpu host prior" in g.notes[0]
    assert g.scale(1.0, 2.0) == (pytest.approx(2.0**0.3), None)
    assert IdleGaps.from_dict(g.to_dict()) == g
    assert not IdleGaps.fit(two).with_prior(PRIOR).borrowed


def test_attention_laws_are_borrowed_only_for_the_ops_the_fleet_did_not_fit():
    from dataclasses import replace

    from lumos.estimate.op_times import OpTimes

    prior = replace(PRIOR, attention={"aten::sdpa": [1e4, 0, 1, 0, 0.01], "own": [9, 9, 9, 9, 9]})
    learned = OpTimes({"own": [1.0, 0, 0, 0, 0]}, ["fitted 1 op"])
    got = learned.with_prior(prior)
    assert got.attn["own"] == [1.0, 0, 0, 0, 0]  # what the warehouse fitted is kept
    assert got.has_attention("aten::sdpa") and got.borrowed == {"aten::sdpa"}
    assert any("aten::sdpa" in n and "host prior" in n for n in got.notes)
    assert OpTimes.from_dict(got.to_dict()).borrowed == {"aten::sdpa"}
    full = OpTimes({"aten::sdpa": [2.0, 0, 0, 0, 0], "own": [1.0, 0, 0, 0, 0]})
    assert full.with_prior(prior) is full  # nothing to borrow
    # the packaged prior carries the corpus's attention laws (forward and backward)
    assert len(priors.load("cpu").attention) >= 2
