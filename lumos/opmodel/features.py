"""Shape features per operator: FLOPs, bytes moved, and the derived shapes a kernel's time follows.

Each operator of the `../shared/opbench` format (the file name's operator part) maps to an
operator class and a function of its shape columns. The GEMM shapes follow the estimator's own
mapping (see `../shared/opbench/README.md`); fp16 operands, so 2 bytes per element.

The features returned are all strictly positive so the models can work in log space:

- `flops`, `bytes`: the work and the minimum memory traffic;
- `flops_eff`: FLOPs divided by the wave-quantisation efficiency of the kernel's tiles over the
  device's SMs (a 109-tile GEMM on 108 SMs runs two waves, the second nearly empty);
- `extra`: named shape quantities (M, K, N, elements, head dim, ...) the residual model may use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "COLLECTIVES",
    "OPERATORS",
    "SHAPE_COLUMNS",
    "Features",
    "OpSpec",
    "compute",
    "op_class",
    "required_columns",
]

# Canonical shape columns (the warehouse's `opbench` columns) and their spellings in the CSVs.
SHAPE_COLUMNS: dict[str, str] = {
    "mp": "mp",
    "b": "b",
    "h": "h",
    "l": "l",
    "dim": "dim",
    "encoders": "encoders",
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "param_tensors": "param_tensors",
    "params": "params",
    "shape": "shape",
    "nodes": "nodes",
    "GPUsPerNode": "gpus_per_node",
}

VOCAB = 50257  # GPT-2 vocabulary, padded per tensor-parallel rank to a multiple of 128
BYTES = 2.0  # fp16
GEMM_TILE = 128  # a typical cuBLAS/CUTLASS tile edge on Ampere/Hopper for large fp16 GEMMs
ATTN_BLOCK = 128  # FlashAttention-2 query block


@dataclass(frozen=True)
class Features:
    flops: np.ndarray
    bytes: np.ndarray
    flops_eff: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    # kernel launches beyond the first (a non-fused optimizer runs a few kernels per tensor);
    # None when the operator is one kernel
    launches: np.ndarray | None = None


Cols = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class OpSpec:
    op_class: str
    columns: tuple[str, ...]
    fn: Callable[[Cols, int], Features]


def _wave_eff(tiles: np.ndarray, sms: int) -> np.ndarray:
    waves = np.ceil(tiles / sms)
    return tiles / (waves * sms)


def _padded_vocab(mp: np.ndarray) -> np.ndarray:
    return np.ceil(VOCAB / (128 * mp)) * 128


def _gemm(m: np.ndarray, k: np.ndarray, n: np.ndarray, batch: np.ndarray, sms: int) -> Features:
    tiles = np.ceil(m / GEMM_TILE) * np.ceil(n / GEMM_TILE) * batch
    eff = _wave_eff(tiles, sms)
    flops = 2.0 * batch * m * k * n
    nbytes = BYTES * batch * (m * k + k * n + m * n)
    # K not a multiple of 64 leaves part of the last k-tile idle (tensor-core MMA granularity)
    k_eff = k / (np.ceil(k / 64) * 64)
    extra = {"M": m, "K": k, "N": n, "wave_eff": eff, "k_eff": k_eff}
    if np.any(batch != 1):
        extra["batch"] = batch
    return Features(flops, nbytes, flops / (eff * k_eff), extra)


def _linear(which: str) -> Callable[[Cols, int], Features]:
    def fn(c: Cols, sms: int) -> Features:
        mp, d = c["mp"], c["dim"]
        m = c["l"] * c["b"]
        k, n = {
            "linear1": (d, 3 * d / mp),
            "linear2": (d / mp, d),
            "linear3": (d, 4 * d / mp),
            "linear4": (4 * d / mp, d),
            "linear_final": (d, _padded_vocab(mp)),
        }[which]
        return _gemm(m, k, n, np.ones_like(m), sms)

    return fn


def _attn_bmm(c: Cols, sms: int) -> Features:
    # scores = Q·Kᵀ per (batch, head): [l × d/h] @ [d/h × l]
    batch = c["b"] * c["h"] / c["mp"]
    hd = c["dim"] / c["h"]
    return _gemm(c["l"], hd, c["l"], batch, sms)


def _flash(c: Cols, sms: int) -> Features:
    bh = c["b"] * c["h"] / c["mp"]
    seq = c["l"]
    hd = c["dim"] / c["h"]
    # kernels are compiled for head dims in steps of 32: a head dim of 80 runs the 96 kernel
    hd_pad = np.ceil(hd / 32) * 32
    blocks = bh * np.ceil(seq / ATTN_BLOCK)
    eff = _wave_eff(blocks, sms)
    flops = 4.0 * bh * seq * seq * hd
    nbytes = BYTES * 4 * bh * seq * hd  # q, k, v in; o out
    extra = {"bh": bh, "seq": seq, "hd": hd, "hd_eff": hd / hd_pad, "wave_eff": eff}
    return Features(flops, nbytes, flops * (hd_pad / hd) / eff, extra)


def _scores_elementwise(c: Cols, sms: int) -> Features:
    # softmax / mask fill over the [b, h/mp, l, l] score matrix: read and write each element
    mp = c["mp"] if "mp" in c else 1.0
    rows = c["b"] * c["h"] / mp * c["l"]
    elems = rows * c["l"]
    return Features(5.0 * elems, 2 * BYTES * elems, 5.0 * elems, {"rows": rows, "row_len": c["l"]})


def _tokens_elementwise(width: Callable[[Cols], np.ndarray], passes: float):
    def fn(c: Cols, sms: int) -> Features:
        tokens = c["b"] * c["l"]
        w = width(c)
        elems = tokens * w
        return Features(
            5.0 * elems, passes * BYTES * elems, 5.0 * elems, {"tokens": tokens, "width": w}
        )

    return fn


def _embedding(c: Cols, sms: int) -> Features:
    tokens = c["b"] * c["l"]
    elems = tokens * c["dim"]
    table = _padded_vocab(c["mp"]) * c["dim"]
    # forward gathers rows; backward also zeroes and scatters into the whole table
    return Features(elems, BYTES * (2 * elems + table), elems, {"tokens": tokens, "table": table})


def _cross_entropy(c: Cols, sms: int) -> Features:
    tokens = c["b"] * c["l"]
    vocab = _padded_vocab(c["mp"])
    elems = tokens * vocab
    return Features(5.0 * elems, 2 * BYTES * elems, 5.0 * elems, {"tokens": tokens, "vocab": vocab})


def _stage_optimizer(embeddings: float):
    def fn(c: Cols, sms: int) -> Features:
        d, mp = c["dim"], c["mp"]
        layer = c["encoders"] * 12 * d * d / mp
        params = layer + embeddings * _padded_vocab(mp) * d
        # a transformer layer holds 12 weight and bias tensors (qkv, proj, 2 MLP, 2 norms)
        tensors = c["encoders"] * 12 + 2 * embeddings
        # Adam with fp32 master weights: ~16 bytes read and written per parameter
        return Features(
            10.0 * params, 16.0 * params, 10.0 * params, {"params": params}, launches=tensors
        )

    return fn


def _optimizer(c: Cols, sms: int) -> Features:
    params = c["params"]
    return Features(
        10.0 * params,
        16.0 * params,
        10.0 * params,
        {"params": params, "tensors": c["param_tensors"]},
        launches=c["param_tensors"],
    )


def _collective(c: Cols, sms: int) -> Features:
    nbytes = BYTES * c["shape"]
    group = c["nodes"] * c["gpus_per_node"]
    return Features(
        np.ones_like(nbytes),  # no arithmetic worth modelling; kept positive for log space
        nbytes,
        np.ones_like(nbytes),
        {"group": group, "nodes": c["nodes"]},
    )


_GEMM = ("mp", "b", "l", "dim")
_ATTN = ("mp", "b", "h", "l", "dim")

OPERATORS: dict[str, OpSpec] = {
    "linear1": OpSpec("gemm", _GEMM, _linear("linear1")),
    "linear2": OpSpec("gemm", _GEMM, _linear("linear2")),
    "linear3": OpSpec("gemm", _GEMM, _linear("linear3")),
    "linear4": OpSpec("gemm", _GEMM, _linear("linear4")),
    "linear_final": OpSpec("gemm", _GEMM, _linear("linear_final")),
    "bmm": OpSpec("bmm", _ATTN, _attn_bmm),
    "baddbmm": OpSpec("bmm", _ATTN, _attn_bmm),
    "flash_atten": OpSpec("attention", _ATTN, _flash),
    "softmax": OpSpec("softmax", ("mp", "b", "h", "l"), _scores_elementwise),
    "ScaledUpperTriangMaskedSoftmax": OpSpec("softmax", ("b", "h", "l"), _scores_elementwise),
    "fillmask": OpSpec("softmax", _ATTN, _scores_elementwise),
    "layernorm": OpSpec("norm", ("b", "l", "dim"), _tokens_elementwise(lambda c: c["dim"], 3)),
    "RMSlayernorm": OpSpec("norm", ("b", "l", "dim"), _tokens_elementwise(lambda c: c["dim"], 3)),
    "res_add": OpSpec("elementwise", ("b", "l", "dim"), _tokens_elementwise(lambda c: c["dim"], 3)),
    "gelu": OpSpec("elementwise", _GEMM, _tokens_elementwise(lambda c: 4 * c["dim"] / c["mp"], 2)),
    "RoPE": OpSpec("elementwise", _ATTN, _tokens_elementwise(lambda c: c["dim"] / c["mp"], 2)),
    "embedding": OpSpec("embedding", _GEMM, _embedding),
    "parallel_cross_entropy_128": OpSpec("loss", ("mp", "b", "l"), _cross_entropy),
    "firstStage_optimizer": OpSpec("optimizer", ("mp", "dim", "encoders"), _stage_optimizer(1.0)),
    "middleStage_optimizer": OpSpec("optimizer", ("mp", "dim", "encoders"), _stage_optimizer(0.0)),
    "lastStage_optimizer": OpSpec("optimizer", ("mp", "dim", "encoders"), _stage_optimizer(1.0)),
    "optimizer": OpSpec(
        "optimizer", ("num_layers", "hidden_size", "param_tensors", "params"), _optimizer
    ),
}

# Collective files (nccl/): one curve per layout (nodes × GPUs per node).
_COLL_COLUMNS = ("shape", "nodes", "gpus_per_node")
COLLECTIVES: dict[str, OpSpec] = {
    name: OpSpec("collective", _COLL_COLUMNS, _collective)
    for name in (
        "allreduce",
        "allreduce_large",
        "allgather",
        "allgather_large",
        "reducescatter",
        "reducescatter_large",
        "alltoall",
        "broadcast",
        "p2p",
    )
}


def _spec(operator: str) -> OpSpec:
    spec = OPERATORS.get(operator) or COLLECTIVES.get(operator)
    if spec is None:
        known = ", ".join(sorted(OPERATORS) + sorted(COLLECTIVES))
        raise KeyError(f"unknown operator {operator!r} (known: {known})")
    return spec


def op_class(operator: str) -> str:
    """The operator class (gemm, bmm, attention, softmax, norm, ..., collective)."""
    return _spec(operator).op_class


def required_columns(operator: str) -> tuple[str, ...]:
    """The canonical shape columns an operator's rows must carry."""
    return _spec(operator).columns


def compute(operator: str, cols: Cols, sms: int) -> Features:
    """Features of rows of one operator; `cols` maps canonical column names to float arrays."""
    spec = _spec(operator)
    arrays = {k: np.asarray(cols[k], dtype=np.float64) for k in spec.columns}
    return spec.fn(arrays, sms)
