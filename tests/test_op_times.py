"""The attention law learned from the calibration jobs (lumos/estimate/op_times.py), checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from lumos.estimate.op_times import (
    OpTimes,
    attention_terms,
    nnls,
    op_key,
    parse_attention,
)

SDPA = "aten::scaled_dot_product_attention"


def _rows(name, law, shapes):
    """op_samples.sql rows of one job measuring `law` at (b, h, s, d) shapes."""
    return [
        (name, f"[[{b}, {h}, {s}, {d}], [{b}, {h}, {s}, {d}]]", "j", 10, law(b * h, s, d))
        for b, h, s, d in shapes
    ]


def test_parse_attention_and_names():
    assert parse_attention("[[2, 4, 128, 32], [2, 4, 128, 32], [], []]") == (8, 128, 32)
    assert parse_attention("[[2, 128, 32]]") is None  # not [b, h, s, d]
    assert parse_attention("not json") is None
    assert parse_attention(None) is None
    assert op_key("autograd::engine::evaluate_function: FooBackward0") == "FooBackward0"
    assert op_key(SDPA) == SDPA


def test_nnls_recovers_a_nonnegative_solution_and_clamps_a_negative_one():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, size=(12, 4))
    x_true = np.array([1.0, 0.0, 2.5, 0.3])
    assert np.allclose(nnls(a, a @ x_true), x_true, atol=1e-9)
    # b = -col0 + 2 col1: unconstrained x0 = -1; constrained, x0 = 0 and the gradient there
    # points into the bound (KKT)
    a2 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b2 = -a2[:, 0] + 2 * a2[:, 1]
    x = nnls(a2, b2)
    assert x[0] == 0.0 and x[1] > 0
    grad = a2.T @ (b2 - a2 @ x)
    assert grad[0] <= 1e-12 and abs(grad[1]) < 1e-9


def test_attention_law_recovered_and_extrapolated_along_s_squared():
    # per call 20 us, 0.5 ns per Q/K/V/O element, 0.01 ns per score FLOP-unit
    def law(bh, s, d):
        return 20_000 + 0.5 * bh * s * d + 0.01 * bh * s * s * d

    shapes = [
        (2, 4, 64, 32),
        (2, 4, 128, 32),
        (2, 4, 256, 32),
        (2, 4, 128, 64),
        (4, 4, 128, 32),
        (2, 8, 128, 16),
    ]
    ops = OpTimes.from_rows(_rows(SDPA, law, shapes))
    assert ops.has_attention(SDPA)
    # hand-computed: bh 8, s 512, d 32 -> 20 us + 0.5*131072 + 0.01*67108864 = 756,625 ns
    assert ops.attention(SDPA, (8, 512, 32)) == pytest.approx(756_625, rel=1e-6)
    assert ops.attention(SDPA, (8, 128, 32)) == pytest.approx(law(8, 128, 32), rel=1e-6)
    # round trip through the cache's dict
    again = OpTimes.from_dict(ops.to_dict())
    assert again.attention(SDPA, (16, 300, 48)) == pytest.approx(
        ops.attention(SDPA, (16, 300, 48)), rel=1e-12
    )
    # a backward op is looked up under the autograd node's name
    bwd = OpTimes.from_rows(_rows("FooAttentionBackward0", law, shapes))
    assert bwd.has_attention("autograd::engine::evaluate_function: FooAttentionBackward0")


def test_attention_not_fitted_when_the_shapes_cannot_separate_the_terms():
    def law(bh, s, d):
        return 1_000 + bh * s * d

    fixed_seq = [
        (2, 4, 128, 16),
        (2, 4, 128, 32),
        (2, 4, 128, 64),
        (4, 4, 128, 32),
        (2, 8, 128, 32),
        (1, 4, 128, 32),
    ]
    ops = OpTimes.from_rows(_rows(SDPA, law, fixed_seq))
    assert not ops.has_attention(SDPA)
    assert "roofline" in " ".join(ops.notes)
    few = OpTimes.from_rows(_rows(SDPA, law, [(2, 4, 64, 32), (2, 4, 128, 64), (4, 4, 256, 16)]))
    assert not few.has_attention(SDPA)
    # GEMMs and other ops are not attention samples
    other = OpTimes.from_rows([("aten::mm", "[[2, 4], [4, 8]]", "j", 1, 100.0)])
    assert other.attn == {}


def test_attention_terms_are_the_physical_costs():
    assert attention_terms((8, 128, 32)).tolist() == [1.0, 1024.0, 32768.0, 131072.0, 4194304.0]
