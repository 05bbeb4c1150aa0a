"""Graph transforms on a hand-built template, checked against schedules computed by hand, and the
pure-Python chain replay against the numba kernel on the same graphs."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.estimate.chain import chain_replay
from lumos.estimate.estimator import ddp_buckets
from lumos.estimate.template import BLOCK, ROLE, Template
from lumos.estimate.transforms import (
    N_ROLES,
    Structure,
    TransformError,
    build,
    cls_dp_ar,
    cls_dp_early,
    cls_opt,
    cls_recv,
    cls_send,
    cls_tp_ar,
    durations,
    n_classes,
)


def _template(layers: int = 2, fwd=(10,), bwd=(20,), fwd_roles=("const",), bwd_roles=("const",)):
    """One micro-batch; each layer's forward and backward ops as given; optimizer 5 ns."""
    rows = []
    for ly in range(layers):
        rows += [("f_layer", ly, 0, r, 0, d) for r, d in zip(fwd_roles, fwd, strict=True)]
    for ly in reversed(range(layers)):
        rows += [("b_layer", ly, 0, r, 1, d) for r, d in zip(bwd_roles, bwd, strict=True)]
    rows.append(("opt", -1, -1, "opt", 0, 5))
    return Template(
        job="hand",
        block=np.array([BLOCK[r[0]] for r in rows], np.int8),
        layer=np.array([r[1] for r in rows], np.int64),
        mb=np.array([r[2] for r in rows], np.int64),
        role=np.array([ROLE[r[3]] for r in rows], np.int8),
        bwd=np.array([r[4] for r in rows], np.int8),
        dur_ns=np.array([r[5] for r in rows], np.int64),
        gap_ns=np.zeros(len(rows), np.int64),
        end_gap_ns=0,
        step_ns=np.array([100], np.int64),
    )


def _run(tpl: Template, s: Structure, comm: dict[int, float] | None = None):
    eg = build(tpl, s)
    nc = n_classes(s.pp)
    mult = np.ones((1, nc))
    add = np.zeros((1, nc))
    for c, v in (comm or {}).items():
        add[0, c] = v
    dur = durations(eg, np.zeros(tpl.n, np.int64), tpl.dur_ns, mult, add)[0]
    start, end = chain_replay(eg.graph, dur)
    return eg, dur, start, end


def test_layers_duplicated_and_removed():
    tpl = _template()
    for layers, expected in ((1, 10 + 20 + 5), (2, 2 * 30 + 5), (5, 5 * 30 + 5)):
        _, _, _, end = _run(tpl, Structure(layers=layers))
        assert end.max() == expected


def test_pipeline_1f1b_schedule_by_hand():
    tpl = _template()
    eg, dur, start, end = _run(tpl, Structure(layers=2, pp=2, num_micro_batches=2))
    # stage 0: F0 [0,10] F1 [10,20] | B0 waits for stage 1's B0 (ends 40) -> [40,60]
    # stage 1: F0 [10,20] B0 [20,40] F1 [40,50] B1 [50,70] opt [70,75]
    # stage 0: B1 after stage 1's B1 (70) -> [70,90], opt [90,95]
    work = (eg.tpl_idx >= 0) & (dur > 0)
    got = [
        (int(s), int(st), int(e))
        for s, st, e in zip(eg.stage[work], start[work], end[work], strict=True)
    ]
    assert got == [
        (0, 0, 10), (0, 10, 20), (0, 40, 60), (0, 70, 90), (0, 90, 95),
        (1, 10, 20), (1, 20, 40), (1, 40, 50), (1, 50, 70), (1, 70, 75),
    ]  # fmt: skip
    assert end.max() == 95


def test_pipeline_gpipe_schedule_by_hand():
    tpl = _template()
    eg, dur, start, end = _run(
        tpl, Structure(layers=2, pp=2, num_micro_batches=2, pp_schedule="gpipe")
    )
    # stage 1: F0 [10,20] F1 [20,30] B0 [30,50] B1 [50,70]; stage 0: B0 [50,70] B1 [70,90]
    work = (eg.tpl_idx >= 0) & (dur > 0)
    got = [
        (int(s), int(st), int(e))
        for s, st, e in zip(eg.stage[work], start[work], end[work], strict=True)
    ]
    assert got == [
        (0, 0, 10), (0, 10, 20), (0, 50, 70), (0, 70, 90), (0, 90, 95),
        (1, 10, 20), (1, 20, 30), (1, 30, 50), (1, 50, 70), (1, 70, 75),
    ]  # fmt: skip


def test_pipeline_transfers_delay_the_next_stage():
    tpl = _template()
    pp = 2
    comm = {cls_recv(pp): 3, cls_send(pp): 1}
    _, _, _, end = _run(tpl, Structure(layers=2, pp=pp, num_micro_batches=1), comm)
    # F0 s0 [0,10], send [10,11]; s1 recv [11,14], F0 [14,24], B0 [24,44], send [44,45];
    # s0 recv [45,48], B0 [48,68], opt [68,73]
    assert end.max() == 73


def test_tensor_parallel_adds_two_allreduces_per_layer_and_direction():
    roles_f = ("gemm_qkv", "attn", "gemm_out", "gemm_up", "gemm_down")
    roles_b = ("gemm_down", "gemm_up", "gemm_out", "attn", "gemm_qkv")
    tpl = _template(layers=2, fwd=(1,) * 5, bwd=(2,) * 5, fwd_roles=roles_f, bwd_roles=roles_b)
    s = Structure(layers=3, tp=2, num_micro_batches=2)
    eg = build(tpl, s)
    ar = np.flatnonzero(eg.cls == cls_tp_ar(1))
    assert ar.size == 3 * 2 * 4  # layers × micro-batches × (2 forward + 2 backward)
    # each forward all-reduce follows an out or down GEMM; each backward one a qkv or up GEMM
    before = eg.tpl_idx[ar - 1]
    assert set(tpl.role[before].tolist()) == {
        ROLE["gemm_out"], ROLE["gemm_down"], ROLE["gemm_qkv"], ROLE["gemm_up"],
    }  # fmt: skip
    _, _, _, end = _run(tpl, s, {cls_tp_ar(1): 7})
    assert end.max() == 2 * 3 * (5 + 10) + 24 * 7 + 5


def test_data_parallel_allreduce_before_optimizer():
    tpl = _template()
    eg, dur, start, end = _run(tpl, Structure(layers=2, dp=2), {cls_dp_ar(1, 0): 11})
    i = int(np.flatnonzero(eg.cls == cls_dp_ar(1, 0))[0])
    assert (start[i], end[i]) == (60, 71) and end.max() == 76


def test_data_parallel_buckets_overlap_the_last_backward():
    # F [0,10] [10,20]; B layer 1 [20,40], layer 0 [40,60]; the earlier buckets start after the
    # first layer's backward on the communication processor, the last bucket after the backward
    tpl = _template()
    for early, last_bucket, opt in ((15, (60, 71), (71, 76)), (30, (70, 81), (81, 86))):
        comm = {cls_dp_early(1, 0): early, cls_dp_ar(1, 0): 11}
        eg, dur, start, end = _run(tpl, Structure(layers=2, dp=2), comm)
        a = int(np.flatnonzero(eg.cls == cls_dp_early(1, 0))[0])
        b = int(np.flatnonzero(eg.cls == cls_dp_ar(1, 0))[0])
        o = int(np.flatnonzero(eg.cls == cls_opt(0))[0])
        assert (start[a], end[a]) == (40, 40 + early)
        assert (start[b], end[b]) == last_bucket and (start[o], end[o]) == opt
        assert eg.graph.proc[a] == eg.graph.proc[b] != eg.graph.proc[o]


def test_ddp_buckets():
    mib = 1 << 20
    assert ddp_buckets(0.5 * mib) == (0.0, 0.5 * mib)
    assert ddp_buckets(4 * mib) == (mib, 3 * mib)
    assert ddp_buckets(26 * mib) == (mib, 25 * mib)
    assert ddp_buckets(30 * mib) == (26 * mib, 4 * mib)


def test_bad_structures_are_refused():
    with pytest.raises(TransformError, match="fewer than pipeline stages"):
        build(_template(), Structure(layers=1, pp=2))
    with pytest.raises(TransformError, match="pp_schedule"):
        build(_template(), Structure(layers=2, pp=2, pp_schedule="zb"))


def test_chain_replay_equals_the_numba_kernel():
    from kernels.replay import replay_sweep

    rng = np.random.default_rng(0)
    tpl = _template(layers=3, fwd=(4, 9), bwd=(8, 17), fwd_roles=("const",) * 2,
                    bwd_roles=("const",) * 2)  # fmt: skip
    tpl.gap_ns[:] = rng.integers(0, 5, tpl.n)
    for s in (
        Structure(layers=5, pp=2, num_micro_batches=3),
        Structure(layers=7, pp=3, num_micro_batches=5, pp_schedule="gpipe", dp=2, tp=2),
        Structure(layers=4, pp=4, num_micro_batches=8),
    ):
        eg = build(tpl, s)
        nc = n_classes(s.pp)
        mult = rng.uniform(0.5, 2.0, (4, nc))
        add = rng.uniform(0, 20, (4, nc))
        dur = durations(eg, np.zeros(tpl.n, np.int64), tpl.dur_ns, mult, add)
        ms = replay_sweep(eg.graph, dur, parallel=False)
        for c in range(4):
            assert chain_replay(eg.graph, dur[c])[1].max() == ms[c]
    assert N_ROLES < n_classes(1)


def test_compressed_runs_by_hand():
    from kernels.replay import replay_sweep
    from lumos.estimate.compress import compress

    tpl = _template()
    eg, dur, _, end = _run(tpl, Structure(layers=2, pp=2, num_micro_batches=2))
    cg = compress(eg)
    # stage 0: F0+send | F1+send | recv+B0 | recv+B1+opt+end; stage 1: recv+F0+B0+send |
    # recv+F1+B1+send | opt+end (a run ends at a send, starts at a recv)
    assert cg.graph.proc.tolist() == [0, 0, 0, 0, 1, 1, 1]
    nc = n_classes(2)
    got = cg.durations(np.zeros(tpl.n, np.int64), tpl.dur_ns, np.ones((1, nc)), np.zeros((1, nc)))
    assert got[0].tolist() == [10, 10, 20, 25, 30, 30, 5]
    assert chain_replay(cg.graph, got[0])[1].max() == end.max() == 95
    assert replay_sweep(cg.graph, got, parallel=False)[0] == 95


def test_compressed_graph_keeps_the_makespan_exactly():
    """Random templates (gaps, durations, fixed parts), structures and per-class coefficients:
    the merged graph's makespan equals the full graph's, to the nanosecond."""
    from kernels.replay import replay_sweep
    from lumos.estimate.compress import compress

    rng = np.random.default_rng(7)
    roles_f = ("tok_h", "gemm_qkv", "attn", "gemm_out", "const", "gemm_up", "tok_f", "gemm_down")
    roles_b = ("gemm_down", "tok_f", "gemm_up", "param_l", "gemm_out", "attn", "gemm_qkv")
    structures = (
        Structure(layers=5, pp=2, num_micro_batches=3, tp=2),
        Structure(layers=7, pp=3, num_micro_batches=5, pp_schedule="gpipe", dp=2, tp=4),
        Structure(layers=4, pp=4, num_micro_batches=8, dp=2),
        Structure(layers=3, num_micro_batches=2, tp=2, dp=2),
    )
    for trial in range(8):
        tpl = _template(
            layers=2,
            fwd=tuple(rng.integers(1, 10_000, len(roles_f))),
            bwd=tuple(rng.integers(1, 10_000, len(roles_b))),
            fwd_roles=roles_f,
            bwd_roles=roles_b,
        )
        tpl.gap_ns[:] = rng.integers(0, 500, tpl.n)
        fixed = (tpl.dur_ns * rng.uniform(0, 0.9, tpl.n)).astype(np.int64)
        var = tpl.dur_ns - fixed
        s = structures[trial % len(structures)]
        eg = build(tpl, s)
        cg = compress(eg)
        assert cg.n_tasks < eg.n_tasks
        nc = n_classes(s.pp)
        mult = rng.uniform(0.1, 5.0, (16, nc))
        add = rng.uniform(0, 3_000, (16, nc))
        fs = rng.uniform(0.25, 1.0, (16, nc))
        # and the idle gaps lengthened (or shortened) per configuration, as idle_gaps.py does
        gs = rng.uniform(-0.5, 1.5, 16)
        for g in (None, gs):
            full = replay_sweep(
                eg.graph, durations(eg, fixed, var, mult, add, fs, g), parallel=False
            )
            merged = replay_sweep(
                cg.graph, cg.durations(fixed, var, mult, add, fs, g), parallel=False
            )
            np.testing.assert_array_equal(merged, full)


def test_gap_scale_lengthens_every_gap_by_hand():
    """`gscale` 0.5: every task carries half the idle gap traced before it; with a single
    chain the makespan grows by half the template's gaps (the end's included)."""
    tpl = _template()
    tpl.gap_ns[:] = 4
    s = Structure(layers=2)
    eg = build(tpl, s)
    nc = n_classes(1)
    one, half = np.ones((1, nc)), np.array([0.5])
    zero = np.zeros(tpl.n, np.int64)
    plain = durations(eg, zero, tpl.dur_ns, one, np.zeros((1, nc)))[0]
    longer = durations(eg, zero, tpl.dur_ns, one, np.zeros((1, nc)), gscale=half)[0]
    np.testing.assert_array_equal(longer - plain, eg.graph.delay_ns // 2)
    base_end = chain_replay(eg.graph, plain)[1].max()
    assert chain_replay(eg.graph, longer)[1].max() == base_end + eg.graph.delay_ns.sum() // 2


def test_optimizer_gaps_follow_the_parameter_tensors():
    """A for-loop optimizer's Python time between its per-tensor ops scales with the tensors the
    rank holds: by hand, layers 10 + 20 each, optimizer 5 ns after a 6 ns gap."""
    tpl = _template()
    tpl.gap_ns[-1] = 6
    _, _, _, end = _run(tpl, Structure(layers=2))
    assert end.max() == 2 * 30 + 6 + 5
    _, _, _, end = _run(tpl, Structure(layers=2, opt_scale=(1.5,)))
    assert end.max() == 2 * 30 + 9 + 5  # gap 6 * 1.5; the duration is scaled by its class
    eg, _, _, end = _run(tpl, Structure(layers=2, pp=2, opt_scale=(0.5, 2.0)))
    # stage 0 forward 0-10 -> stage 1 forward 10-20, backward 20-40, optimizer after 6 * 2;
    # stage 0 backward 40-60, optimizer after 6 * 0.5
    assert [int(end[eg.stage == s].max()) for s in (0, 1)] == [60 + 3 + 5, 40 + 12 + 5]


def _optimizer_template(elems, durs, names):
    n = len(elems)
    return Template(
        job="hand",
        block=np.full(n, BLOCK["opt"], np.int8),
        layer=np.full(n, -1, np.int64),
        mb=np.full(n, -1, np.int64),
        role=np.full(n, ROLE["opt"], np.int8),
        bwd=np.zeros(n, np.int8),
        dur_ns=np.array(durs, np.int64),
        gap_ns=np.zeros(n, np.int64),
        end_gap_ns=0,
        step_ns=np.array([sum(durs)], np.int64),
        names=list(names),
        elems=np.array(elems, np.int64),
    )


def test_optimizer_per_call_part_is_fitted_on_its_own_ops():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import split_fixed

    # mul_: 2000 ns + 1 ns per element on 1k, 10k and 100k-element tensors; item: scalars only
    elems = [1000, 10000, 100000, 0, 0]
    durs = [3000, 12000, 102000, 700, 900]
    names = ["aten::mul_"] * 3 + ["aten::item"] * 2
    elems[3:] = [1, 1]
    fixed, _ = split_fixed(_optimizer_template(elems, durs, names), ModelConfig(layers=1))
    assert fixed.tolist() == [2000, 2000, 2000, 700, 900]


def test_optimizer_without_shapes_keeps_the_token_overhead():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import split_fixed

    tpl = _optimizer_template([0, 0], [100, 200], ["aten::mul_", "aten::mul_"])
    fixed, fitted = split_fixed(tpl, ModelConfig(layers=1))
    assert fixed.tolist() == [
        min(round(fitted["token_fwd"]), 90),
        min(round(fitted["token_fwd"]), 180),
    ]


def test_parameter_tensor_counts():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import base_opt_tensors, stage_tensor_counts

    gpt = ModelConfig(layers=4, hidden=128, heads=4, seq=128, vocab=1024)
    # per block: qkv w b, out w b, up w b, down w b, 2 norms w b; + tokens, positions; + norm, head
    assert stage_tensor_counts(gpt) == [4 * 12 + 2 + 3]
    assert stage_tensor_counts(gpt.replace(pp=2)) == [2 * 12 + 2, 2 * 12 + 3]
    assert stage_tensor_counts(gpt.replace(gated_mlp=True)) == [4 * 11 + 5]
    assert stage_tensor_counts(gpt.replace(tp=4)) == stage_tensor_counts(gpt)  # shards
    assert base_opt_tensors(gpt.replace(pp=2)) == 2 * 12


def _layer_ops(rows, **extra) -> Template:
    """One layer of (role, bwd, ns) ops, in order; `extra` adds names or elems."""
    n = len(rows)
    return Template(
        job="hand",
        block=np.full(n, BLOCK["f_layer"], np.int8),
        layer=np.zeros(n, np.int64),
        mb=np.zeros(n, np.int64),
        role=np.array([ROLE[r] for r, _, _ in rows], np.int8),
        bwd=np.array([d for _, d, _ in rows], np.int8),
        dur_ns=np.array([round(t) for _, _, t in rows], np.int64),
        gap_ns=np.zeros(n, np.int64),
        end_gap_ns=0,
        step_ns=np.array([round(sum(t for _, _, t in rows))], np.int64),
        **extra,
    )


def test_attention_split_prices_its_flops_at_the_traces_gemm_rate():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import attention_compute_share, attention_ratio

    base = ModelConfig(layers=1, hidden=4, heads=1, seq=10, micro_batch=1)
    # QKV GEMM: 10 tokens x 4 x 12 = 480 MACs: 960 FLOPs forward in 96 ns (10 FLOP/ns), 1920
    # backward in 96 ns (20 FLOP/ns). Causal attention: 2 * 100 * 4 = 800 FLOPs forward (80 ns
    # at 10/ns), 2000 backward (100 ns at 20/ns): 180 of its 200 + 400 ns are compute.
    rows = [("gemm_qkv", 0, 96), ("attn", 0, 200), ("attn", 1, 400), ("gemm_qkv", 1, 96)]
    tpl = _layer_ops(rows)
    share = attention_compute_share(tpl, base, np.zeros(4))
    assert share == pytest.approx(180 / 600)
    # seq x2: the compute share x4 (s^2), the rest x2 (s)
    assert attention_ratio(base.replace(seq=20), base, share) == pytest.approx(0.3 * 4 + 0.7 * 2)
    assert attention_ratio(base.replace(tp=2), base, share) == pytest.approx(0.5)
    no_gemm = Template(**{**tpl.__dict__, "role": np.full(4, ROLE["attn"], np.int8)})
    assert attention_compute_share(no_gemm, base, np.zeros(4)) == 1.0


def test_unfused_attention_is_all_score_work():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import attention_compute_share

    base = ModelConfig(layers=1, hidden=4, heads=1, seq=10, micro_batch=1)
    rows = [("gemm_qkv", 0, 96), ("attn", 0, 200), ("attn", 1, 400), ("gemm_qkv", 1, 96)]

    def tpl(bwd_attn: str) -> Template:
        attn = "aten::scaled_dot_product_attention"
        return _layer_ops(rows, names=["aten::linear", attn, bwd_attn, "MmBackward0"])

    ev = "autograd::engine::evaluate_function: "
    # one fused backward node: the roofline split of the test above
    fused = tpl(ev + "ScaledDotProductFlashAttentionForCpuBackward0")
    assert attention_compute_share(fused, base, np.zeros(4)) == pytest.approx(180 / 600)
    # the math path's backward is nodes on the score matrix: every one follows s^2
    assert attention_compute_share(tpl(ev + "BmmBackward0"), base, np.zeros(4)) == 1.0


def test_gemm_overhead_is_fitted_on_the_ops_doing_the_multiplies():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import base_features, split_fixed

    base = ModelConfig(layers=1, hidden=64, heads=1, seq=16, micro_batch=1, vocab=256)
    x = base_features(base)
    # backward GEMMs: 20 ns + 1e-3 ns per feature unit; the head's role holds only 3 view
    # nodes of 4 ns, which must not bend the line
    roles = ["gemm_qkv", "gemm_out", "gemm_up", "gemm_down"]
    durs = [20 + x[ROLE[r]] * 1e-3 for r in roles]
    rows = [(r, 1, d) for r, d in zip(roles, durs, strict=True)] + [("gemm_head", 1, 4)] * 3
    _, fitted = split_fixed(_layer_ops(rows), base)
    assert fitted["gemm_bwd"] == pytest.approx(20, abs=1.0)


def test_token_ops_per_call_part_is_fitted_per_name():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import split_fixed

    # forward token ops: `mul` at 4700 ns + 0.1 ns per element on tokens x hidden (16k) and
    # tokens x FFN (44k); `log_softmax` on one shape only, so the family's fit applies to it.
    # The roles' own features (not the elements) put both muls far off the family's line.
    ops = [("tok_h", "aten::mul", 16384, 6338), ("tok_f", "aten::mul", 44032, 9103)]
    ops += [("tok_v", "aten::log_softmax", 128000, 250000)]
    tpl = _layer_ops(
        [(r, 0, t) for r, _, _, t in ops],
        names=[n for _, n, _, _ in ops],
        elems=np.array([e for _, _, e, _ in ops], np.int64),
    )
    base = ModelConfig(layers=1, hidden=128, ffn=344, heads=4, seq=64, micro_batch=2, vocab=1000)
    fixed, fitted = split_fixed(tpl, base)
    assert fixed[:2].tolist() == pytest.approx([4700, 4700], abs=2)
    assert fixed[2] == min(round(fitted["token_fwd"]), 225000)


def test_vocabulary_roles_split_over_tp_only_when_vocab_parallel():
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.retime import features, stage_param_counts

    cfg = ModelConfig(layers=2, hidden=64, ffn=256, heads=4, seq=16, micro_batch=2, vocab=1000)
    one, rep, vp = (
        features(c) for c in (cfg, cfg.replace(tp=2), cfg.replace(tp=2, vocab_parallel=True))
    )
    for role in ("gemm_head", "tok_v"):
        assert rep[ROLE[role]] == one[ROLE[role]]  # replicated head: all of it on every rank
        assert vp[ROLE[role]] == one[ROLE[role]] / 2
    assert rep[ROLE["gemm_qkv"]] == vp[ROLE["gemm_qkv"]] == one[ROLE["gemm_qkv"]] / 2
    # the optimizer's parameters: (1000 + 16)·64 tables, 2·64 + 1000·64 head, whole or halved
    layers = 2 * (4 * 64 * 64 + 2 * 64 * 256 + 3 * 64 + 256) / 2 + 2 * (64 + 64 + 4 * 64)
    assert stage_param_counts(cfg.replace(tp=2)) == [layers + 1016 * 64 + 128 + 64000]
    assert stage_param_counts(cfg.replace(tp=2, vocab_parallel=True)) == [
        layers + 516 * 64 + 128 + 32000
    ]
