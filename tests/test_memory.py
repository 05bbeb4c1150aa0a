"""Memory per rank (issue 5, item 4): the formulas on a small configuration against numbers worked
out by hand here, and the parameter count against the ground-truth trainer's real model."""

from __future__ import annotations

import pytest
from torch_traces import require_torch

from lumos.estimate.config import ModelConfig
from lumos.estimate.memory import (
    embedding_params,
    estimate_memory,
    head_params,
    in_flight,
    layer_activation_bytes,
    model_params,
    params_per_layer,
)

# h=8, f=32 (4h), a=2, s=4, b=1, v=16, 2 layers, 2-byte training.
SMALL = ModelConfig(layers=2, hidden=8, ffn=32, heads=2, seq=4, micro_batch=1, vocab=16)


def test_parameter_count_by_hand():
    # Block: QKV 3·64 + 24, out 64 + 8, fc1 256 + 32, fc2 256 + 8, two norms 2·16 = 872.
    assert params_per_layer(SMALL) == 872
    # Embedding (16 + 4)·8 = 160, final norm 16 + head 128 = 144.
    assert model_params(SMALL) == 2 * 872 + 160 + 144 == 2048


def test_vocabulary_split_only_when_vocab_parallel():
    tp2 = SMALL.replace(tp=2)
    # replicated: every TP rank holds the (16 + 4)·8 tables and the 16 + 16·8 head
    assert (embedding_params(tp2, 2), head_params(tp2, 2)) == (160, 144)
    vp = tp2.replace(vocab_parallel=True)
    assert (embedding_params(vp, 2), head_params(vp, 2)) == (8 * 8 + 4 * 8, 16 + 8 * 8)
    # the fp32 logits of the loss: 4·s·b·v, split by the vocabulary
    logits = estimate_memory(tp2).peak.activation_bytes - 2 * layer_activation_bytes(tp2)
    assert logits == 4 * 4 * 16
    assert estimate_memory(vp).peak.activation_bytes - 2 * layer_activation_bytes(vp) == 4 * 4 * 8


def test_activation_formula_by_hand():
    # Korthikanti et al.: s·b·h·(34 + 5·a·s/h) = 32 · (34 + 5) = 1248 bytes.
    assert layer_activation_bytes(SMALL) == 1248
    tp2 = SMALL.replace(tp=2)
    assert layer_activation_bytes(tp2) == 32 * (10 + 24 / 2 + 5 / 2)  # 784, no sequence parallel
    assert layer_activation_bytes(tp2.replace(sequence_parallel=True)) == 1248 / 2
    sel = tp2.replace(sequence_parallel=True, recompute="selective")
    assert layer_activation_bytes(sel) == 32 * 34 / 2
    assert layer_activation_bytes(SMALL.replace(recompute="full")) == 2 * 32
    # A fused (flash) attention kernel stores no scores: 32 · 34, with or without TP.
    assert layer_activation_bytes(SMALL.replace(flash_attention=True)) == 32 * 34
    assert layer_activation_bytes(tp2.replace(flash_attention=True)) == 32 * (10 + 24 / 2)
    # A wider MLP only grows the MLP's part: f = 8h gives 34 + 16 (4·f/h grows by 16).
    assert layer_activation_bytes(SMALL.replace(ffn=64)) == 32 * (34 + 16 + 5)
    assert layer_activation_bytes(SMALL.replace(dtype_bytes=4)) == 2 * 1248


def test_total_by_hand_and_feasibility():
    mem = estimate_memory(SMALL, device_memory=40_000)
    st = mem.peak
    assert (st.param_bytes, st.grad_bytes) == (4096, 4096)
    assert st.optimizer_bytes == 2048 * 12  # fp32 m, v and master copy
    assert st.activation_bytes == 2 * 1248 + 4 * 4 * 1 * 16  # layers + fp32 logits
    assert mem.memory_bytes == 35_520 and mem.fits is True
    assert estimate_memory(SMALL, device_memory=35_519).fits is False
    assert estimate_memory(SMALL).fits is None  # device memory unknown
    fp32 = estimate_memory(SMALL.replace(dtype_bytes=4)).peak
    assert fp32.optimizer_bytes == 2048 * 8  # no master copy in fp32 training


def test_zero_sharding_over_dp():
    base = SMALL.replace(dp=4)
    for stage, (p, g, o) in {
        0: (4096, 4096, 24576),
        1: (4096, 4096, 6144),
        2: (4096, 1024, 6144),
        3: (1024, 1024, 6144),
    }.items():
        st = estimate_memory(base.replace(zero_stage=stage)).peak
        assert (st.param_bytes, st.grad_bytes, st.optimizer_bytes) == (p, g, o), stage


def test_pipeline_micro_batches_held():
    cfg = SMALL.replace(layers=4, pp=2, num_micro_batches=4)
    assert [in_flight(cfg, s) for s in (0, 1)] == [2, 1]  # 1F1B: pp - stage
    gpipe = cfg.replace(pp_schedule="gpipe")
    assert [in_flight(gpipe, s) for s in (0, 1)] == [4, 4]
    assert in_flight(SMALL.replace(num_micro_batches=8), 0) == 1  # no pipeline: accumulation
    mem = estimate_memory(cfg)
    s0, s1 = mem.stages
    assert (s0.layers, s1.layers) == (2, 2)
    assert s0.params == 2 * 872 + 160 and s1.params == 2 * 872 + 144
    assert s0.activation_bytes == 2 * 1248 * 2
    assert s1.activation_bytes == 2 * 1248 * 1 + 256
    assert estimate_memory(gpipe).stages[0].activation_bytes == 2 * 1248 * 4


@pytest.fixture(scope="module")
def torch_gt():
    require_torch()
    import torch

    from lumos.groundtruth import model
    from lumos.groundtruth.config import make_config
    from lumos.groundtruth.parallel.tp import TPContext

    return torch, model, make_config, TPContext


@pytest.mark.parametrize("hidden,heads,ffn,layers", [(48, 4, 0, 3), (64, 4, 96, 5)])
def test_parameter_count_matches_groundtruth_model(torch_gt, hidden, heads, ffn, layers):
    torch, model, make_config, TPContext = torch_gt
    kw = dict(layers=layers, hidden=hidden, heads=heads, ffn=ffn, seq=16, vocab=64)
    gt = model.GPT(make_config(kw, name="m"))
    real = sum(p.numel() for p in gt.parameters())
    assert model_params(ModelConfig(**kw)) == real
    # One tensor-parallel rank's block: matrices and column-parallel biases split, rest replicated.
    block = model.Block(make_config({**kw, "tp": 2}, name="m"), 0, TPContext(size=2))
    assert params_per_layer(ModelConfig(**kw), tp=2) == sum(p.numel() for p in block.parameters())
    # The trainer replicates the embedding and LM head over TP ranks: vocab_parallel's default.
    tp_cfg = make_config({**kw, "tp": 2}, name="m")
    embed, head = model.Embed(tp_cfg), model.Head(tp_cfg)
    assert embedding_params(ModelConfig(**kw, tp=2), 2) == sum(
        p.numel() for p in embed.parameters()
    )
    assert head_params(ModelConfig(**kw, tp=2), 2) == sum(p.numel() for p in head.parameters())
