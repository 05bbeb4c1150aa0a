"""Re-time operators for a new shape: each role's duration follows one shape feature.

A template op of role r with traced duration t is split into a fixed part and a variable part:
``t_new = fixed + (t - fixed) * feature_r(new) / feature_r(base)``. The fixed part is fitted on the
base trace's own operators (``t = c0 + a * feature`` per family and direction), clipped to
[0, 0.9·t]; roles with a single shape in the base take the GEMM overhead. The optimizer scales with
the parameter tensors the rank holds. The table of roles and features: docs/estimate.md,
"Module notes".
"""

from __future__ import annotations

import numpy as np

from lumos.estimate.config import ModelConfig
from lumos.estimate.memory import (
    EMBEDDING_TENSORS,
    HEAD_TENSORS,
    embedding_params,
    head_params,
    params_per_layer,
    stage_layers,
    tensors_per_layer,
)
from lumos.estimate.template import ROLE, ROLES, Template
from lumos_sql.taxonomy import is_attention

GEMM_ROLES = ("gemm_qkv", "gemm_out", "gemm_up", "gemm_down", "gemm_head")
TOKEN_ROLES = ("tok_h", "tok_f", "tok_v", "emb")


def features(cfg: ModelConfig, stage_params: float | None = None) -> np.ndarray:
    """The feature of every role (indexed by ROLE code) for one configuration."""
    t = float(cfg.micro_batch * cfg.seq)
    h, f, tp = float(cfg.hidden), float(cfg.ffn_size), float(cfg.tp)
    v = float(max(cfg.vocab, 1)) / cfg.vocab_tp
    gated = 2.0 if cfg.gated_mlp else 1.0
    out = np.ones(len(ROLES))
    q = float(cfg.q_width(cfg.tp))  # one rank's query heads x their head size
    out[ROLE["gemm_qkv"]] = t * h * cfg.qkv_width(cfg.tp)  # K and V narrower under GQA
    out[ROLE["gemm_out"]] = t * q * h
    out[ROLE["gemm_up"]] = gated * t * h * f / tp
    out[ROLE["gemm_down"]] = t * f * h / tp
    out[ROLE["gemm_head"]] = t * h * v
    out[ROLE["attn"]] = cfg.micro_batch * float(cfg.seq) ** 2 * q
    out[ROLE["tok_h"]] = t * h
    out[ROLE["tok_f"]] = t * f / tp
    out[ROLE["tok_v"]] = t * v
    out[ROLE["emb"]] = t * h
    out[ROLE["param_l"]] = float(params_per_layer(cfg, cfg.tp))
    if stage_params is None:
        stage_params = max(stage_layers(cfg.layers, cfg.pp)) * params_per_layer(cfg, cfg.tp)
    out[ROLE["opt"]] = float(stage_params)
    return out


def base_features(base: ModelConfig) -> np.ndarray:
    """`features` of the template's own configuration: its optimizer holds the whole model, or
    one stage's layers when the base itself is pipelined."""
    return features(base, stage_param_counts(base)[0] if base.pp == 1 else None)


def stage_param_counts(cfg: ModelConfig) -> list[float]:
    """Parameters held by one rank of each pipeline stage (embedding first, head last)."""
    per_layer = params_per_layer(cfg, cfg.tp)
    counts = [float(n * per_layer) for n in stage_layers(cfg.layers, cfg.pp)]
    counts[0] += embedding_params(cfg, cfg.tp)
    counts[-1] += head_params(cfg, cfg.tp, with_embedding=cfg.pp == 1)
    return counts


def stage_tensor_counts(cfg: ModelConfig) -> list[float]:
    """Parameter tensors held by one rank of each pipeline stage: a for-loop optimizer (PyTorch's
    default on the CPU, and `foreach=False` anywhere) runs the same ops once per tensor, so its
    per-call costs and the Python time between them scale with this count."""
    per_layer = tensors_per_layer(cfg)
    counts = [float(n * per_layer) for n in stage_layers(cfg.layers, cfg.pp)]
    counts[0] += EMBEDDING_TENSORS
    counts[-1] += HEAD_TENSORS - (1 if cfg.tied_embeddings and cfg.pp == 1 else 0)
    return counts


def base_opt_tensors(base: ModelConfig) -> float:
    """The template's optimizer tensors: the whole model's, or one stage's layers when the base
    itself is pipelined (as `features` counts its parameters)."""
    if base.pp == 1:
        return stage_tensor_counts(base)[0]
    return float(max(stage_layers(base.layers, base.pp)) * tensors_per_layer(base))


def _fit_c0(t: np.ndarray, x: np.ndarray) -> float | None:
    """Intercept of t = c0 + a·x on ops of several shapes (None when the shapes do not differ)."""
    if t.size < 2 or np.unique(np.round(x)).size < 2:
        return None
    a_mat = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(a_mat, t.astype(float), rcond=None)
    if coef[1] <= 0:
        return None
    return float(max(coef[0], 0.0))


def _time_median(dur: np.ndarray) -> float:
    """The duration at which the ops shorter than it hold half of the time."""
    if dur.size == 0:
        return 0.0
    d = np.sort(dur)
    return float(d[np.searchsorted(np.cumsum(d), 0.5 * d.sum())])


def split_fixed(tpl: Template, base: ModelConfig) -> tuple[np.ndarray, dict[str, float]]:
    """Fixed (shape-independent) part of every template op; the overheads fitted, by family."""
    x = base_features(base)[tpl.role.astype(np.int64)]
    dur = tpl.dur_ns.astype(float)
    fixed = np.zeros(tpl.n)
    fitted: dict[str, float] = {}
    const = tpl.role == ROLE["const"]
    fixed[const] = dur[const]
    for fam, roles in (("gemm", GEMM_ROLES), ("token", TOKEN_ROLES)):
        for d in (0, 1):
            m = np.isin(tpl.role, [ROLE[r] for r in roles]) & (tpl.bwd == d)
            # the intercept is fitted on the ops that do the family's work: a role's backward
            # also holds its views' and transposes' nodes (a few us each at the role's full
            # FLOPs), which as points drag the slope down and the intercept up (GPT-2's
            # backward GEMMs read as 145 us fixed of 170 us, so they barely grew with hidden)
            heavy = m & (dur >= 0.1 * _time_median(dur[m]))
            c0 = _fit_c0(dur[heavy], x[heavy])
            if c0 is None:  # one shape only: the family's overhead from the const ops
                c0 = float(np.median(dur[const])) if const.any() else 0.0
            fitted[f"{fam}_{'bwd' if d else 'fwd'}"] = c0
            fixed[m] = np.minimum(c0, 0.9 * dur[m])
    for role in ("attn", "param_l", "opt"):
        m = tpl.role == ROLE[role]
        for d in (0, 1):
            c0 = (
                fitted[f"gemm_{'bwd' if d else 'fwd'}"]
                if role == "attn"
                else fitted[f"token_{'bwd' if d else 'fwd'}"]
            )
            md = m & (tpl.bwd == d)
            fixed[md] = np.minimum(c0, 0.9 * dur[md])
    _per_name_fixed(tpl, dur, fixed, np.flatnonzero(tpl.role == ROLE["opt"]))
    token = np.isin(tpl.role, [ROLE[r] for r in TOKEN_ROLES])
    _per_name_fixed(tpl, dur, fixed, np.flatnonzero(token & (tpl.bwd == 0)))
    _small_call_floor(tpl, dur, fixed, np.flatnonzero(token))
    return np.rint(fixed).astype(np.int64), fitted


# A call this many times smaller than an op does little of the op's work: what it costs is
# (nearly) the per-call part of the op.
SMALL_CALL = 4
# Tensors this small (16 KB of float32) are in L1 on any CPU: their ops are nearly all per-call.
SMALL_CALL_ELEMS = 4096


def _small_call_floor(tpl: Template, dur: np.ndarray, fixed: np.ndarray, ops: np.ndarray) -> None:
    """Raise the per-call part of `ops` to what the same op (name and direction) costs on
    tensors at least `SMALL_CALL` times smaller, where the step has such calls: a model calls
    `mul` on its rotary tables (2k elements: 5 us) and on tokens x hidden (16k: 9 us), and its
    backward functions on the same tensors (their forward op's sizes). The fits above follow
    the large calls, whose cost per element grows past the caches, and put that overhead near 0;
    then doubling the tokens doubled ops that in fact grew 1.2-1.4x (HF LLaMA, Mistral, Qwen)."""
    if ops.size == 0:
        return
    names = np.array([tpl.names[i] for i in ops], dtype=object)
    x = tpl.elems[ops]
    for key in set(zip(names.tolist(), tpl.bwd[ops].tolist(), strict=True)):
        same = ops[(names == key[0]) & (tpl.bwd[ops] == key[1]) & (x > 0)]
        if same.size < 2:
            continue
        sizes = tpl.elems[same]
        for i in same:
            small = same[sizes * SMALL_CALL <= tpl.elems[i]]
            if small.size:
                floor = float(np.median(dur[small]))
                fixed[i] = max(fixed[i], min(floor, 0.9 * dur[i]))
    # ops whose name has no small call: the direction's small calls of any name say what a call
    # costs on this host (an element-wise forward op 4-5 us), a floor for each of them
    for d in (0, 1):
        mine = ops[(tpl.bwd[ops] == d) & (x > 0)]
        if mine.size == 0:
            continue
        small = mine[tpl.elems[mine] <= SMALL_CALL_ELEMS]
        if small.size < 2:
            continue
        floor = float(np.median(dur[small]))
        big = mine[tpl.elems[mine] >= SMALL_CALL * SMALL_CALL_ELEMS]
        fixed[big] = np.maximum(fixed[big], np.minimum(floor, 0.9 * dur[big]))


def _per_name_fixed(tpl: Template, dur: np.ndarray, fixed: np.ndarray, ops: np.ndarray) -> None:
    """The per-call part of `ops`, fitted per op name where the trace recorded the name on
    several shapes. A for-loop optimizer calls each op once per parameter tensor (norm weights,
    biases, matrices, embeddings); a model calls `mul` and `add` on tokens x hidden, x FFN and
    on rotary tables: per name the intercept of ``t = c0 + k·elements`` is well determined,
    where the role family's fit mixes cheap adds with softmaxes and can come out 0 (LLaMA: a
    16k-element `mul` is 7.0 us of which 4.7 us is per call, and hidden x2 made its tokens x
    hidden ops 1.46x slower, not 2x). Calls that only ever see scalars (the optimizer's step
    counter) are all per-call. Other ops keep the family's overhead set by the caller."""
    if ops.size == 0 or not (tpl.elems[ops] > 0).any():
        return
    names = np.array([tpl.names[i] for i in ops], dtype=object)
    for name in set(names.tolist()):
        ids = ops[names == name]
        x = tpl.elems[ids].astype(float)
        c0 = _fit_c0(dur[ids], x)
        if c0 is not None:
            fixed[ids] = np.minimum(c0, 0.9 * dur[ids])
        elif x.max() <= 1:
            fixed[ids] = dur[ids]


def gemm_throughput(tpl: Template, feat: np.ndarray, var: np.ndarray) -> tuple[float, float]:
    """FLOP/ns the template's GEMMs achieve in their variable part, forward and backward (a
    backward computes the input's and the weight's gradients: twice the forward's FLOPs), with
    `feat` the base's `base_features`. 0 when the template has no GEMM."""
    out = []
    for d, per_mac in ((0, 2.0), (1, 4.0)):
        flops = busy = 0.0
        for r in GEMM_ROLES:
            code = ROLE[r]
            n_linear = int(np.count_nonzero((tpl.role == code) & (tpl.bwd == 0)))
            flops += per_mac * feat[code] * n_linear
            busy += float(var[(tpl.role == code) & (tpl.bwd == d)].sum())
        out.append(flops / busy if flops > 0 and busy > 0 else 0.0)
    return out[0], out[1]


def _attention_flops(cfg: ModelConfig) -> tuple[float, float]:
    """Causal attention FLOPs of one call (decoder LLMs): scores and weighted values, each
    b·s²·h MACs halved by the mask, forward; backward 2.5x (dQ, dK, dV and the recomputed
    scores of memory-efficient kernels)."""
    fwd = 2.0 * cfg.micro_batch * float(cfg.seq) ** 2 * cfg.hidden / cfg.tp
    return fwd, 2.5 * fwd


def _unfused_attention(tpl: Template) -> bool:
    """True when the backward of the template's attention is a chain of autograd nodes on the
    score matrix (the math path of scaled_dot_product_attention, or attention written out:
    bmm, softmax, masking), not one fused attention node. Every one of those ops reads or
    writes the b·heads·s² scores, so all of their variable time follows s²; a fused kernel
    keeps the scores in registers and part of its time is Q, K, V and O traffic."""
    bwd = np.flatnonzero((tpl.role == ROLE["attn"]) & (tpl.bwd == 1))
    if bwd.size == 0 or len(tpl.names) != len(tpl.role):
        return False
    return not any(is_attention(tpl.names[i]) for i in bwd)


def attention_compute_share(tpl: Template, base: ModelConfig, fixed: np.ndarray) -> float:
    """The share of attention's variable time that is its s² FLOPs, priced at the throughput the
    trace's own GEMMs achieve (a roofline split: the device's measured compute rate, not a
    datasheet peak). The rest — reading Q, K, V, writing O, per-row softmax statistics — scales
    with b·s·h. 1 (all s²) when the template has no GEMM to price it with."""
    if _unfused_attention(tpl):
        return 1.0
    m = tpl.role == ROLE["attn"]
    var = tpl.dur_ns.astype(float) - fixed
    busy = float(var[m].sum())
    rate_f, rate_b = gemm_throughput(tpl, base_features(base), var)
    if busy <= 0 or rate_f <= 0 or rate_b <= 0:
        return 1.0
    calls = int(np.count_nonzero(m & (tpl.bwd == 0)))
    fwd, bwd = _attention_flops(base)
    return float(min(1.0, calls * (fwd / rate_f + bwd / rate_b) / busy))


def attention_ratio(cfg: ModelConfig, base: ModelConfig, share: float) -> float:
    """How much longer cfg's attention runs than the base's: the compute share follows b·s²·h,
    the rest b·s·h (per rank)."""

    def growth(s_power: int) -> float:
        def per_rank(c: ModelConfig) -> float:
            return c.micro_batch * float(c.seq) ** s_power * c.hidden / c.tp

        return per_rank(cfg) / per_rank(base)

    return share * growth(2) + (1 - share) * growth(1)


def extrapolation(ratio: np.ndarray, used: np.ndarray) -> list[str]:
    """Warnings for roles scaled far beyond the base's shapes (ratio outside [1/4, 4])."""
    out = []
    for code in np.flatnonzero(used):
        r = float(ratio[code])
        if r > 4 or r < 0.25:
            out.append(f"{ROLES[code]} durations extrapolated {r:.2f}x beyond the base's shapes")
    return out
