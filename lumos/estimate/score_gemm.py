"""Attention written out as GEMMs (Megatron's local attention, eager attention, nanoGPT): no
operator is named for it, but its scores `Q·Kᵀ` are a batched GEMM of `[..., s, d]` by
`[..., d, s]`, a square product. Inference reads heads and sequence from it, the template
finds the layers by it, where a trace has no attention operator."""

from __future__ import annotations

import json

__all__ = ["SCORE_GEMMS", "score_shape"]

# the batched GEMMs attention written out runs
SCORE_GEMMS = ("aten::baddbmm", "aten::bmm", "aten::matmul")


def _tensor_shapes(input_dims: str | None) -> list[tuple[int, ...]]:
    """The tensor operands' shapes of a recorded `Input Dims` (scalars, `[]`, left out)."""
    try:
        dims = json.loads(input_dims) if input_dims else []
    except ValueError:
        return []
    return [
        tuple(d)
        for d in (dims if isinstance(dims, list) else [])
        if isinstance(d, list) and d and all(isinstance(v, int) and v > 0 for v in d)
    ]


def score_shape(name: str, input_dims: str | None) -> tuple[tuple[int, ...], int, int] | None:
    """(batch dims, s, head_dim) when the call is attention's score GEMM, else None."""
    if name not in SCORE_GEMMS:
        return None
    shapes = _tensor_shapes(input_dims)[-2:]  # baddbmm's first operand is the output buffer
    if len(shapes) != 2 or len(shapes[0]) < 3 or len(shapes[0]) != len(shapes[1]):
        return None
    a, k = shapes
    if a[:-2] != k[:-2] or a[-1] != k[-2] or a[-2] != k[-1]:
        return None
    return a[:-2], a[-2], a[-1]
