"""Kernel classes and work laws (lumos/estimate/kernel_work.py) on shapes as Kineto records them."""

from __future__ import annotations

import numpy as np

from lumos.estimate.config import ModelConfig
from lumos.estimate.kernel_work import (
    KClass,
    fit_gemm,
    gemm_flops,
    kernel_class,
    largest_tensor,
    named_sizes,
    size_ratio,
)


def test_classes_by_launching_operator():
    assert kernel_class("aten::mm") == KClass.GEMM
    assert kernel_class("aten::addmm") == KClass.GEMM
    assert kernel_class("aten::_cudnn_attention_forward") == KClass.ATTENTION
    assert kernel_class("aten::_flash_attention_backward") == KClass.ATTENTION
    assert kernel_class("aten::_foreach_mul_") == KClass.OPTIMIZER
    assert kernel_class("aten::mul") == KClass.OTHER
    assert kernel_class(None) == KClass.OTHER


def test_gemm_flops_from_input_dims():
    # llama_base's QKV projection: [8192, 1024] x [1024, 1024]
    assert gemm_flops("aten::mm", "[[8192, 1024], [1024, 1024]]") == 2 * 8192 * 1024 * 1024
    # addmm: bias first
    assert gemm_flops("aten::addmm", [[1024], [8192, 1024], [1024, 4096]]) == 2 * 8192 * 1024 * 4096
    # batched
    assert gemm_flops("aten::bmm", [[4, 16, 32], [4, 32, 8]]) == 2 * 4 * 16 * 32 * 8
    # shapes that do not multiply, or are missing
    assert gemm_flops("aten::mm", [[8, 3], [4, 5]]) == 0
    assert gemm_flops("aten::mm", None) == 0
    assert largest_tensor("[[8, 1024, 1024], [], [1024]]")[0] == 8 * 1024 * 1024


def test_size_ratio_names_the_tensor_or_refuses_to_guess():
    base = ModelConfig(layers=8, hidden=1024, heads=16, seq=1000, micro_batch=3, vocab=32000)
    wide = base.replace(hidden=2048, heads=32)
    b, t = named_sizes(base), named_sizes(wide)
    assert size_ratio(3 * 1000 * 1024, b, t) == 2.0  # tokens x hidden
    assert size_ratio(1024 * 1024, b, t) == 4.0  # a weight matrix
    assert size_ratio(3 * 1000, b, t) == 1.0  # per-token scalars
    # 4 x 2048 tokens x 1024 = 2 x 1024 x 4096, a gated MLP's weights: which one, the size
    # cannot tell
    other = base.replace(seq=2048, micro_batch=4, gated_mlp=True)
    assert (
        size_ratio(4 * 2048 * 1024, named_sizes(other), named_sizes(other.replace(hidden=2048)))
        is None
    )
    assert size_ratio(12345, b, t) is None
    # seq = hidden: a tensor of b*s*h and one of b*h*h have the same size and grow differently
    same = ModelConfig(layers=8, hidden=1024, heads=16, seq=1024, micro_batch=1, vocab=32000)
    wider = named_sizes(same.replace(hidden=2048))
    assert size_ratio(1024 * 1024, named_sizes(same), wider) is None
    # unless its dimensions say: an activation has three or more, a weight is a matrix
    assert size_ratio(1024 * 1024, named_sizes(same), wider, ndim=3) == 2.0
    assert size_ratio(1024 * 1024, named_sizes(same), wider, ndim=2) == 4.0
    # an ungated MLP has no fused gate and up: 2 x 1024 x 4096 is then tokens x hidden alone
    ungated = other.replace(gated_mlp=False)
    grown = named_sizes(ungated.replace(hidden=2048))
    assert size_ratio(4 * 2048 * 1024, named_sizes(ungated), grown, ndim=3) == 2.0
    # a bias follows its width: the fused projections' (3 x 1024) and the MLP's up (4096)
    assert size_ratio(3 * 1024, b, t, ndim=1) == 2.0
    assert size_ratio(base.ffn_size, b, named_sizes(base.replace(ffn=8192)), ndim=1) == 2.0


def test_fit_gemm_recovers_a_fixed_part_and_a_rate():
    rng = np.random.default_rng(0)
    flops = np.repeat([1e9, 5e9, 2e10, 8e10], 20)
    dur = 5_000 + flops / 800e12 * 1e9  # 5 µs + 800 TFLOP/s
    dur = dur * rng.uniform(0.98, 1.02, dur.size)
    op = np.arange(dur.size)
    fixed, per_flop = fit_gemm(dur, flops, op)
    assert abs(fixed - 5_000) < 500
    assert abs(1e9 / per_flop / 800e12 - 1) < 0.03
    # a stray tiny GEMM holding under 1 % of the time does not shape the fit
    dur2 = np.append(dur, 1_000.0)
    flops2 = np.append(flops, 1e6)
    assert abs(fit_gemm(dur2, flops2, np.arange(dur2.size))[0] - fixed) < 1
