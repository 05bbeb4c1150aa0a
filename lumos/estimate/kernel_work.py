"""What a GPU kernel's time follows when the configuration changes: its class and its work.

A kernel is classed by the innermost CPU operator that launched it (`launch_ops.sql`): ``GEMM``
(its FLOPs above a fixed part, both fitted on the base's own GEMMs by `fit_gemm`), ``ATTENTION``
(its b·s²·h FLOPs), ``OPTIMIZER`` (the parameters it updates) and ``OTHER`` (memory-bound: the
elements of its operator's largest input, scaled as the configuration's named size of that count
scales). The classes come from `lumos_sql.taxonomy`. Details: docs/estimate-gpu.md,
"Module notes".
"""

from __future__ import annotations

import json
import math
from enum import IntEnum
from typing import Any

import numpy as np

from lumos.estimate.config import ModelConfig
from lumos.estimate.template import PATH
from lumos_sql.taxonomy import OpClass, op_class

__all__ = [
    "ATTENTION_FLOPS_PER_D",
    "KClass",
    "attention_head_factor",
    "fit_gemm",
    "gemm_flops",
    "kernel_class",
    "largest_tensor",
    "named_sizes",
    "size_ratio",
    "WEIGHT_SIZES",
]


class KClass(IntEnum):
    """A GPU task's class (`kernel_class`); NONE for CPU tasks."""

    NONE = -1
    OTHER = 0
    GEMM = 1
    ATTENTION = 2
    OPTIMIZER = 3


# a GEMM size below this share of the base's GEMM time does not shape the fit (`fit_gemm`)
GEMM_FIT_MIN_SHARE = 0.01
# the taxonomy's classes whose kernels have a law of their own
_KCLASS = {
    OpClass.GEMM: KClass.GEMM,
    OpClass.ATTENTION: KClass.ATTENTION,
    OpClass.OPTIMIZER: KClass.OPTIMIZER,
}


def kernel_class(op_name: str | None) -> KClass:
    """The class of a kernel launched inside operator `op_name` (None: launched outside any)."""
    return _KCLASS.get(op_class(op_name), KClass.OTHER)


def _shapes(input_dims: Any) -> list[list[int]]:
    if isinstance(input_dims, str):
        try:
            input_dims = json.loads(input_dims)
        except ValueError:
            return []
    return [
        s
        for s in input_dims or ()
        if isinstance(s, list) and all(isinstance(d, int) and d >= 0 for d in s)
    ]


def gemm_flops(op_name: str, input_dims: Any) -> float:
    """2·M·N·K of a matrix product from its operands' shapes (0 when they do not say)."""
    shapes = [s for s in _shapes(input_dims) if len(s) >= 2]
    if len(shapes) < 2:
        return 0.0
    a, b = shapes[-2], shapes[-1]  # addmm/baddbmm: the bias or input comes first
    if a[-1] != b[-2]:
        return 0.0
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def largest_tensor(input_dims: Any) -> tuple[int, int]:
    """Elements and dimensions of the operator's largest input tensor, a tensor list's
    (`aten::cat`'s) included ((0, 0) when none is recorded)."""
    if isinstance(input_dims, str):
        try:
            input_dims = json.loads(input_dims)
        except ValueError:
            return 0, 0
    lists = [s for s in input_dims or () if isinstance(s, list) and s and isinstance(s[0], list)]
    shapes = _shapes(input_dims) + [t for ts in lists for t in _shapes(ts)]
    return max(((math.prod(s), len(s)) for s in shapes), default=(0, 0))


def named_sizes(cfg: ModelConfig) -> dict[str, float]:
    """The element counts a rank's tensors have in `cfg` (one micro-batch), by name: with tensor
    parallelism a rank holds its share of the heads, of the FFN and (vocabulary-parallel) of the
    vocabulary, and the whole residual stream (tokens x hidden)."""
    tokens = cfg.micro_batch * cfg.seq
    tp = cfg.tp
    h, f, v = cfg.hidden, cfg.ffn_size / tp, max(cfg.vocab, 0) / cfg.vocab_tp
    hd = cfg.head_size
    heads = cfg.heads // tp
    kv_heads = max(cfg.kv_heads_n // tp, 1)
    kv = kv_heads * hd
    q = heads * hd
    out = {
        "tokens": tokens,
        "tok_h": tokens * h,
        "tok_q": tokens * q,  # queries and the attention's output (tokens x hidden unless head_dim)
        "tok_h_half": tokens * q / 2,  # rotary embedding's halves of the queries
        "tok_kv": tokens * kv,
        "tok_kv_half": tokens * kv / 2,
        "tok_qkv": tokens * (q + 2 * kv),
        "tok_heads": tokens * heads,  # per head and token: a Q norm's statistics
        "tok_kv_heads": tokens * kv_heads,
        "tok_f": tokens * f,
        "tok_v": tokens * v,
        "scores": cfg.micro_batch * heads * cfg.seq * cfg.seq,
        "hidden": h,
        "b_qkv": q + 2 * kv,  # the fused projections' bias
        "b_f": f,  # the MLP's up bias
        "w_hh": h * q,
        "w_kvh": h * kv,
        "w_qkvh": h * (q + 2 * kv),
        "w_fh": h * f,
        "w_vh": h * v,
    }
    if cfg.gated_mlp:  # a gated MLP's fused gate and up (not a size of an ungated one)
        out["tok_f2"] = tokens * 2 * f
        out["b_f2"] = 2 * f
        out["w_f2h"] = 2 * h * f
    return out


# the named sizes of weights (matrices and per-channel vectors); activations carry batch and
# sequence dimensions, and heads. At 8 x 1024 tokens, tokens x heads x 8 (a rotary slice) has a
# query weight's count and tokens x 512 an FFN weight's (`size_ratio` tells them apart)
WEIGHT_SIZES = frozenset(
    ("hidden", "b_qkv", "b_f", "b_f2", "w_hh", "w_kvh", "w_qkvh", "w_fh", "w_f2h", "w_vh")
)


# FLOPs per score (one query-key pair of one head) per unit of head size, in a fused attention
# kernel: forward Q·Kᵀ and P·V (4 d), backward (FlashAttention's) Q·Kᵀ again, dO·Vᵀ, Pᵀ·dO, dS·K
# and dSᵀ·Q (10 d); each pass also takes one exponential per score (the softmax, recomputed in the
# backward)
ATTENTION_FLOPS_PER_D = {"forward": 4.0, "backward": 10.0}


def attention_head_factor(
    d_base: float, d: float, *, backward: bool, peak_flops: float | None, exp_rate: float | None
) -> float:
    """What a fused attention kernel's FLOPs ratio is multiplied by when the head size goes
    from `d_base` to `d`: per score its time is ``k·d / peak + 1 / exp_rate`` (the matrix
    products on the tensor cores, the softmax's exponential on the special-function units), so
    it grows as ``d + x`` with ``x = peak / (k · exp_rate)``, not as ``d`` (on an H100, x = 63 in
    the forward: at head size 64 the exponentials take as long as the products). 1 where the
    device's rates are not known."""
    if not peak_flops or not exp_rate or d_base <= 0 or d <= 0 or d == d_base:
        return 1.0
    k = ATTENTION_FLOPS_PER_D["backward" if backward else "forward"]
    x = peak_flops / (k * exp_rate)
    return (d_base / d) * (d + x) / (d_base + x)


# the sizes of the queries' side and of the keys' and values' side of attention (in a
# multi-head base they and the residual stream's are equal)
_Q_SIZES = frozenset(("tok_q", "tok_h_half", "tok_heads", "w_hh"))
_KV_SIZES = frozenset(("tok_kv", "tok_kv_half", "tok_kv_heads", "w_kvh"))
_SIDE_ACTIVATIONS = frozenset(("tok_q", "tok_h_half", "tok_kv", "tok_kv_half"))


def _side_drops(path: int, ndim: int) -> frozenset[str]:
    """The named sizes a tensor of `ndim` dimensions on one side of attention (`path`, a
    `template.PATH` code) is not: none of the other side's; split into heads (four dimensions
    or more) not the residual stream; of three (a projection's input under autocast's cast) the
    residual stream, not a side's width."""
    if path == PATH["queries"]:
        other = _KV_SIZES
    elif path == PATH["keys_values"]:
        other = _Q_SIZES
    else:
        return frozenset()
    if ndim >= 4:
        return other | {"tok_h"}
    if ndim == 3:
        return other | _SIDE_ACTIVATIONS
    return other


# per-token widths a tensor of tokens x (a simple fraction of one of them) follows: a partial
# rotary embedding's rotated and passed-through parts of the queries (GPT-NeoX's quarter, Phi's
# share of each head), the keys', the MLP's
_WIDTHS = ("tok_q", "tok_kv", "tok_h", "tok_f")
# the simple fractions: width x p / _FRACTION for p = 1 .. _FRACTION**2
_FRACTION = 8


def size_ratio(
    elems: int, base: dict[str, float], target: dict[str, float], ndim: int = 0, path: int = 0
) -> float | None:
    """How a tensor of `elems` elements (`ndim` dimensions, 0: not known) in the base grows in
    the target: the ratio of the named size it equals, else of the per-token width it is a
    simple fraction of (tokens x q/4: a quarter of each head rotated); None when it is neither,
    or several that grow differently. Where a weight's size (`WEIGHT_SIZES`) and an activation's
    are equal, a tensor of three or more dimensions is the activation and a matrix or vector
    the weight. On a layer's queries' or keys' and values' side (`path`, `template.PATH`) it is
    none of the other side's sizes, nor the residual stream's."""
    if elems <= 0:
        return None
    drop = _side_drops(path, ndim)
    named = [k for k, n in base.items() if n == elems and n > 0 and k not in drop]
    weights = [k for k in named if k in WEIGHT_SIZES]
    if ndim >= 3:
        named = [k for k in named if k not in WEIGHT_SIZES]
    elif ndim > 0 and weights:
        named = weights
    ratios = {target[k] / base[k] for k in named}
    if not ratios:
        widths = [k for k in _WIDTHS if k not in drop]
        ratios = {target[k] / base[k] for k in widths if _simple_fraction(elems, base[k])}
    if len(ratios) != 1:
        return None
    return ratios.pop()


def _simple_fraction(elems: int, size: float) -> bool:
    """`elems` is `size` x p / _FRACTION for an integer p in 1 .. _FRACTION**2."""
    if size <= 0:
        return False
    p = elems * _FRACTION / size
    return p == int(p) and 1 <= p <= _FRACTION**2


def fit_gemm(dur_ns: np.ndarray, flops: np.ndarray, op: np.ndarray) -> tuple[float, float]:
    """``(fixed_ns, ns_per_flop)`` of ``T = fixed + flops · ns_per_flop`` over the base's GEMM
    operators (``T``: the summed time of an operator instance's kernels, `op`), each size's
    median, fitted for relative error (a 600 µs LM-head GEMM must not outweigh the 30 µs layer
    ones); the fixed part clipped to [0, the fastest size]. Sizes holding less than
    `GEMM_FIT_MIN_SHARE` of the GEMM time are left out (a stray 3 µs fp32 GEMM of a rotary
    embedding's positions is another kernel family). With fewer than two sizes: no fixed part,
    the mean rate."""
    ok = (flops > 0) & (op >= 0)
    if not ok.any():
        return 0.0, 0.0
    ids, at = np.unique(op[ok], return_inverse=True)
    t_op = np.bincount(at, weights=dur_ns[ok].astype(np.float64))
    f_op = np.zeros(ids.size)
    f_op[at] = flops[ok]
    sizes = np.unique(f_op)
    total = np.array([t_op[f_op == s].sum() for s in sizes])
    keep = total >= GEMM_FIT_MIN_SHARE * total.sum()
    x = sizes[keep]
    y = np.array([np.median(t_op[f_op == s]) for s in x])
    if x.size < 2:
        return 0.0, float(y.sum() / x.sum())
    w = 1.0 / y
    slope, fixed = np.polyfit(x, y, 1, w=w)
    if slope <= 0:
        return 0.0, float(y.sum() / x.sum())
    fixed = float(np.clip(fixed, 0.0, y.min()))
    return fixed, float(np.sum(w * w * (y - fixed) * x) / np.sum(w * w * x * x))
