"""ZeRO, sequence and vocabulary parallelism and speed-ups as edits of a GPU step graph, from
the real single-GPU llama_base trace (../shared/traces/gpu_h100): the collectives each adds,
where, on which stream and for how long, and the kernels each re-times."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kernels.graph import Kind

BASE = "llama_base"
# llama_base's parameters by hand (8 layers of hidden 1024, SwiGLU FFN 2816, 16 heads, vocab
# 32000, untied): attention 4·h², MLP 3·h·f, two norms per layer; embedding and LM head v·h
H, F, V, L = 1024, 2816, 32_000, 8
PARAMS = L * (4 * H * H + 3 * H * F + 2 * H) + 2 * V * H + H


@pytest.fixture(scope="module")
def est(gpu_wh):
    from lumos.estimate.estimator import Estimator

    return Estimator.open(gpu_wh.root, f"gpu_h100/{BASE}")


def _run(est, speed=None, **kw):  # noqa: ANN001, ANN202
    cfg = replace(est.base, **kw)
    model = est._gpu_model()
    e = model.explain(cfg, speed)
    return cfg, e, model.durations(e.edited, cfg, model.event_ns, speed)


def _codes(ed, *names):  # noqa: ANN001, ANN202
    from lumos.estimate.gpu_edit import Coll

    return np.flatnonzero(np.isin(ed.coll, [int(Coll[n]) for n in names]))


def _col(ed, name):  # noqa: ANN001, ANN202
    return np.asarray(ed.tasks.column(name).to_numpy())


def _kernels(est, ed, k_class, role=None):  # noqa: ANN001, ANN202
    from lumos.estimate.template import ROLE

    st, b = est.gpu, ed.base
    m = st.is_gpu[b] & (st.kind[b] == int(Kind.GPU_KERNEL)) & (st.k_class[b] == int(k_class))
    m &= ed.coll < 0 if ed.coll is not None else True  # an added collective has its anchor's row
    return m & (st.role[b] == ROLE[role]) if role else m


def test_zero1_shards_the_optimizer_then_gathers_the_parameters(est):
    from lumos.estimate.kernel_work import KClass

    _, e0, d0 = _run(est, dp=8)
    cfg, e1, d1 = _run(est, dp=8, zero_stage=1)
    ed = e1.edited
    opt0 = _kernels(est, e0.edited, KClass.OPTIMIZER)
    opt1 = _kernels(est, ed, KClass.OPTIMIZER)
    assert opt0.sum() == opt1.sum() > 0
    # each rank updates 1/8 of the parameters (above each kernel's fixed launch-bound part)
    assert 1 / 8 <= d1[opt1].sum() / d0[opt0].sum() < 0.2
    (ag,) = _codes(ed, "ZERO_GATHER")
    assert not _codes(e0.edited, "ZERO_GATHER").size
    # on DDP's gradient stream, after the optimizer's last kernel, waiting for it
    proc = _col(ed, "proc")
    assert proc[ag] == proc[_codes(ed, "DP_LAYER")[0]]
    assert _col(ed, "kind")[ag] == int(Kind.COLLECTIVE)
    last_opt = int(np.flatnonzero(opt1).max())
    assert ag > last_opt
    src, dst = np.asarray(ed.deps.column("src")), np.asarray(ed.deps.column("dst"))
    assert last_opt in src[dst == ag]
    # a ring all-gather of the fp32 parameters (autocast) over 8 ranks
    c = est._gpu_model().comm
    want = 7 / 8 * 4 * PARAMS / c.bw_bytes_per_ns + 7 * c.alpha_ns
    assert d1[ag] == pytest.approx(want, rel=0.02)
    assert cfg.autocast


def test_zero2_reduce_scatters_where_ddp_all_reduced(est):
    _, e0, d0 = _run(est, dp=8, num_micro_batches=2)
    _, e2, d2 = _run(est, dp=8, num_micro_batches=2, zero_stage=2)
    ar = _codes(e0.edited, "DP_HEAD", "DP_LAYER", "DP_EMBED")
    rs = _codes(e2.edited, "RS_HEAD", "RS_LAYER", "RS_EMBED")
    assert ar.size == rs.size == L + 2
    assert not _codes(e2.edited, "DP_HEAD", "DP_LAYER", "DP_EMBED").size
    # at the same places: after the same base kernels, in the last micro-batch's backward
    assert np.array_equal(e0.edited.base[ar - 1], e2.edited.base[rs - 1])
    assert np.array_equal(e0.edited.copy[ar - 1], e2.edited.copy[rs - 1])
    # a layer's reduce-scatter moves half an all-reduce's bytes in half its ring steps
    layer_ar = d0[_codes(e0.edited, "DP_LAYER")]
    layer_rs = d2[_codes(e2.edited, "RS_LAYER")]
    assert np.allclose(layer_rs, layer_ar / 2, atol=1)


def test_zero3_gathers_each_layer_before_its_forward_and_backward(est):
    from lumos.estimate.gpu_edit import Piece

    _, e1, d1 = _run(est, dp=8, zero_stage=1)
    for kw in (dict(num_micro_batches=2), dict(recompute="full")):
        cfg, e3, d3 = _run(est, dp=8, zero_stage=3, **kw)
        ed = e3.edited
        fwd, bwd = _codes(ed, "Z3_GATHER_FWD"), _codes(ed, "Z3_GATHER_BWD")
        assert fwd.size == bwd.size == cfg.layers * cfg.num_micro_batches, kw
        proc = _col(ed, "proc")
        gathers = np.concatenate([fwd, bwd])
        # a stream of their own: not the compute stream, not the gradients' stream
        assert np.unique(proc[gathers]).size == 1
        assert not np.isin(proc[gathers], proc[ed.coll < 0]).any()
        assert proc[gathers[0]] != proc[_codes(ed, "RS_LAYER")[0]]
        src, dst = np.asarray(ed.deps.column("src")), np.asarray(ed.deps.column("dst"))
        gpu = est.gpu.is_gpu[ed.base]
        for g in gathers.tolist():
            (waiter,) = dst[src == g]
            # the next task in id order is the layer's first kernel, which waits for it
            assert waiter == g + 1 and gpu[waiter] and ed.layer[waiter] >= 0
            piece = ed.copy == ed.copy[waiter]
            assert waiter == np.flatnonzero(piece & gpu & (ed.layer >= 0) & (ed.coll < 0)).min()
        if kw.get("recompute"):
            # the backward's gather comes before the recomputed forward
            assert (ed.piece[bwd + 1] == int(Piece.RECOMPUTED)).all()
        # per layer the parameters' fp32 bytes over 8 ranks
        c = est._gpu_model().comm
        per_layer = (PARAMS - 2 * V * H - H) / L
        want = 7 / 8 * 4 * per_layer / c.bw_bytes_per_ns + 7 * c.alpha_ns
        assert d3[fwd] == pytest.approx(want, rel=0.02)
        # after the optimizer only what no layer gathers (embedding and LM head)
        (ag,) = _codes(ed, "ZERO_GATHER")
        (ag1,) = _codes(e1.edited, "ZERO_GATHER")
        assert d3[ag] == pytest.approx(d1[ag1] * (2 * V * H + H) / PARAMS, rel=0.05)


def test_sequence_parallel_pairs_the_tp_collectives_and_splits_the_norms(est):
    from lumos.estimate.kernel_work import KClass

    cfg, tp, d_tp = _run(est, tp=2)
    _, sp, d_sp = _run(est, tp=2, sequence_parallel=True)
    ar = _codes(tp.edited, "TP")
    rs, ag = _codes(sp.edited, "SP_RS"), _codes(sp.edited, "SP_AG")
    assert rs.size == ag.size == ar.size == 4 * cfg.layers
    assert not _codes(sp.edited, "TP").size
    # each pair where the all-reduce was, on the compute stream: reduce-scatter, all-gather
    assert np.array_equal(ag, rs + 1)
    assert np.array_equal(sp.edited.base[rs - 1], tp.edited.base[ar - 1])
    proc = _col(sp.edited, "proc")
    assert (proc[rs] == proc[rs - 1]).all() and (proc[ag] == proc[rs]).all()
    # a pair moves what one all-reduce moves
    assert d_sp[rs].sum() + d_sp[ag].sum() == pytest.approx(d_tp[ar].sum(), abs=float(ar.size))
    # the layers' norm and residual kernels (tokens x hidden) run on half the tokens
    st = est.gpu

    def resid(e):  # noqa: ANN001, ANN202 (not the rotary embedding's: on a side of attention)
        b = e.edited.base
        return (
            _kernels(est, e.edited, KClass.OTHER, "tok_h")
            & (e.edited.layer >= 0)
            & (st.k_elems[b] == cfg.micro_batch * cfg.seq * cfg.hidden)
            & (st.path[b] <= 0)
        )

    assert resid(sp).sum() == resid(tp).sum() > 0
    assert 0.5 <= d_sp[resid(sp)].sum() / d_tp[resid(tp)].sum() < 0.6
    # the GEMMs are the same work
    gemm_tp = _kernels(est, tp.edited, KClass.GEMM)
    gemm_sp = _kernels(est, sp.edited, KClass.GEMM)
    assert d_sp[gemm_sp].sum() == pytest.approx(d_tp[gemm_tp].sum(), rel=1e-6)


def test_vocab_parallel_splits_the_head_and_adds_its_all_reduces(est):
    from lumos.estimate.gpu_sharding import VP_LOSS_ALLREDUCES
    from lumos.estimate.kernel_work import KClass
    from lumos.estimate.template import BLOCK

    cfg, tp, d_tp = _run(est, tp=2, num_micro_batches=2)
    _, vp, d_vp = _run(est, tp=2, num_micro_batches=2, vocab_parallel=True)
    head_tp = _kernels(est, tp.edited, KClass.GEMM, "gemm_head")
    head_vp = _kernels(est, vp.edited, KClass.GEMM, "gemm_head")
    assert head_tp.sum() == head_vp.sum() > 0
    assert 0.5 <= d_vp[head_vp].sum() / d_tp[head_tp].sum() < 0.55
    ed = vp.edited
    m = cfg.num_micro_batches
    loss, emb, head = _codes(ed, "VP_LOSS"), _codes(ed, "VP_EMBED"), _codes(ed, "VP_HEAD")
    assert (loss.size, emb.size, head.size) == (VP_LOSS_ALLREDUCES * m, m, m)
    proc = _col(ed, "proc")
    st = est.gpu
    for codes, block in ((emb, "f_pre"), (head, "b_post")):
        # on the compute stream right after that part's kernel
        assert (proc[codes] == proc[codes - 1]).all()
        assert (st.block[ed.base[codes - 1]] == BLOCK[block]).all()
    # the cross-entropy's all-reduces: a few bytes per token each
    c = est._gpu_model().comm
    alpha = c.sync_alpha_ns if c.sync_alpha_ns is not None else c.alpha_ns
    tokens = cfg.micro_batch * cfg.seq
    assert d_vp[loss] == pytest.approx(2 * alpha + tokens * 4 / c.bw_bytes_per_ns, abs=1)
    assert vp.gpu_work_ns < tp.gpu_work_ns


def test_speedup_divides_its_class_on_the_graph(est):
    from lumos.estimate.kernel_work import KClass

    _, plain, d0 = _run(est)
    _, fast, d1 = _run(est, speed={"gemm": 2.0})
    gemm = _kernels(est, plain.edited, KClass.GEMM)
    assert gemm.sum() > 0
    assert d1[gemm].sum() == pytest.approx(d0[gemm].sum() / 2, abs=float(gemm.sum()))
    assert np.array_equal(d1[~gemm], d0[~gemm])
    assert fast.predicted_ns < plain.predicted_ns
    # comm: the collectives only, the ones the edit adds included
    _, dp, d2 = _run(est, dp=8)
    _, dpc, d3 = _run(est, speed={"comm": 4.0}, dp=8)
    coll = dp.edited.coll >= 0
    assert np.allclose(d3[coll], d2[coll] / 4, atol=1) and np.array_equal(d3[~coll], d2[~coll])


@pytest.mark.parametrize(
    "kw, speed",
    [
        (dict(dp=8, zero_stage=1), {}),
        (dict(dp=8, zero_stage=2), {}),
        (dict(dp=8, zero_stage=3), {}),
        (dict(tp=2, sequence_parallel=True), {}),
        (dict(tp=2, vocab_parallel=True), {}),
        ({}, {"gemm": 2.0, "opt": 3.0}),
    ],
)
def test_every_target_of_a_single_gpu_base_takes_the_graph(est, kw, speed):
    cfg = est.target(kw)
    p = est.explain(cfg, speed)
    assert "GPU step graph" in p.warnings[0], p.warnings
    assert p.breakdown and "gpu_work" in p.breakdown
    assert p.speedups == speed
    (q,) = est.predict([cfg], [speed])
    assert q.predicted_ns == p.predicted_ns and q.speedups == speed
