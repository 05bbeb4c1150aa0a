"""The calibration jobs' GEMM curve (lumos/estimate/gemm_curve.py) on shapes whose answer is known by
hand; the curve on the real corpus is checked in tests/test_corpus.py."""

from __future__ import annotations

import math

import pytest

from lumos.estimate.config import ModelConfig
from lumos.estimate.gemm_curve import GemmCurve, parse_gemm, role_gemms


@pytest.mark.parametrize(
    ("name", "dims", "shape"),
    [
        ("aten::mm", "[[256, 128], [128, 384]]", (256, 128, 384)),
        ("aten::addmm", "[[384], [256, 128], [128, 384], [], []]", (256, 128, 384)),
        ("aten::bmm", "[[8, 64, 32], [8, 32, 16]]", (512, 32, 16)),
        ("aten::baddbmm", "[[8, 64, 16], [8, 64, 32], [8, 32, 16], [], []]", (512, 32, 16)),
        ("aten::mm", "[[256, 128], [64, 384]]", None),  # inner dims differ
        ("aten::mm", "[[256, 128]]", None),
        ("aten::mm", "not json", None),
        ("aten::mm", None, None),
    ],
)
def test_parse_gemm(name, dims, shape):
    assert parse_gemm(name, dims) == shape


def _rows(law, shapes):
    """op_samples.sql rows of one job measuring `law` at `shapes` (as aten::mm)."""
    return [("aten::mm", f"[[{m}, {k}], [{k}, {n}]]", "j", 10, law(m, k, n)) for m, k, n in shapes]


def test_curve_reproduces_a_power_law_between_its_samples():
    # time ∝ FLOPs^0.9 in m and n, proportional in k: a GEMM growing more efficient with size
    def law(m, k, n):
        return 5.0 * (m * n) ** 0.9 * k

    grid = [(m, k, n) for m in (64, 128, 256, 512) for k in (64, 128, 256) for n in (64, 256)]
    curve = GemmCurve.from_rows(_rows(law, grid))
    assert curve.usable
    for q in [(96, 96, 128), (300, 200, 100), (128, 128, 256)]:
        t, beyond = curve.time(q)
        assert not beyond
        assert t == pytest.approx(law(*q), rel=0.03)


def test_a_dimension_the_samples_never_vary_scales_with_flops():
    # every sample has k = 128: the curve has no evidence about k and doubles with it
    def law(m, k, n):
        return 3.0 * (m * n) ** 0.8 * k

    grid = [(m, 128, n) for m in (64, 128, 256) for n in (64, 128, 256)]
    curve = GemmCurve.from_rows(_rows(law, grid))
    t1, _ = curve.time((128, 128, 128))
    t2, _ = curve.time((128, 256, 128))
    assert t2 / t1 == pytest.approx(2.0, rel=1e-6)
    assert t1 == pytest.approx(law(128, 128, 128), rel=0.01)


def test_far_shapes_are_flagged_and_scale_from_the_nearest_sample():
    curve = GemmCurve.from_rows(_rows(lambda m, k, n: 1000.0, [(64, 64, 64), (128, 64, 64)]))
    _, near = curve.time((96, 64, 64))
    assert not near
    # 20 doublings away in n, which no sample varies: flagged, and n's slope is 1 (FLOPs)
    t, beyond = curve.time((64, 64, 64 << 20))
    assert beyond
    assert t == pytest.approx(1000.0 * 2**20, rel=0.1)
    t, beyond = curve.time((64, 64, 64 << 40))  # so far that no sample keeps any weight
    assert beyond
    assert t == pytest.approx(1000.0 * 2**40, rel=1e-6)


def test_empty_and_round_trip():
    empty = GemmCurve.from_rows([])
    assert not empty.usable and "FLOPs" in empty.notes[0]
    c = GemmCurve.from_rows(_rows(lambda m, k, n: m * k * n / 10, [(64, 64, 64), (128, 64, 64)]))
    back = GemmCurve.from_dict(c.to_dict())
    assert back.time((96, 64, 64)) == c.time((96, 64, 64))
    assert not GemmCurve.from_dict(None).usable


def test_role_gemms_are_the_linear_layers_of_one_rank():
    cfg = ModelConfig(layers=2, hidden=128, ffn=512, heads=4, seq=128, micro_batch=2, vocab=1000)
    g = role_gemms(cfg)
    t = 256
    assert g["gemm_qkv"].fwd == ((t, 128, 384),)
    # backward: input gradient (t, out) x (out, in), weight gradient (out, t) x (t, in)
    assert g["gemm_qkv"].bwd == ((t, 384, 128), (384, t, 128))
    assert g["gemm_down"].fwd == ((t, 512, 128),)
    assert g["gemm_head"].fwd == ((t, 128, 1000),)
    tp = role_gemms(cfg.replace(tp=2))
    assert tp["gemm_qkv"].fwd == ((t, 128, 192),)
    assert tp["gemm_out"].fwd == ((t, 64, 128),)
    gated = role_gemms(cfg.replace(gated_mlp=True))
    assert len(gated["gemm_up"].fwd) == 2
    flops = sum(2 * math.prod(s) for s in g["gemm_qkv"].fwd)
    assert flops == 2 * t * 128 * 384


@pytest.mark.parametrize(
    ("t1", "s1", "want"),
    [
        (600.0, (256, 256, 128), 400.0),  # grown 4x in FLOPs: at most 4x the base's time
        (300.0, (256, 256, 128), 300.0),  # within [1x, 4x]: the curve's time stands
        (80.0, (256, 256, 128), 100.0),  # a bigger multiply is never faster
        (10.0, (64, 64, 128), 25.0),  # shrunk to a quarter: at least a quarter of the time
        (150.0, (64, 128, 128), 100.0),  # and never slower
        (900.0, (256, 64, 256), 900.0),  # grown in one dimension, shrunk in another: unbounded
    ],
)
def test_a_curve_ratio_stays_between_unchanged_and_the_flops(t1, s1, want):
    from lumos.estimate.estimator import _within_flops

    assert _within_flops(100.0, t1, (128, 128, 128), s1) == pytest.approx(want)
