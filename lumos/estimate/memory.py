"""Memory per rank of a training configuration, and whether the busiest rank fits on the device.

Parameters, gradients, optimizer state (AdamW, with ZeRO sharding) and activations
(Korthikanti et al. 2022, generalised to other FFN sizes, grouped-query attention, tensor and
sequence parallelism and recomputation) for each pipeline stage; under `autocast` the figure is
`torch.cuda.max_memory_allocated()`, the largest of the bytes alive at three moments of a step.
Every formula, with the tensors it counts: docs/estimate-base.md, "Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lumos.estimate.config import ModelConfig

__all__ = [
    "MemoryEstimate",
    "StageMemory",
    "autocast_layer_activation_bytes",
    "cast_params_per_layer",
    "embedding_params",
    "estimate_memory",
    "head_params",
    "layer_activation_bytes",
    "params_per_layer",
    "model_params",
    "stage_layers",
    "in_flight",
]


def params_per_layer(cfg: ModelConfig, tp: int = 1) -> int:
    """Parameters of one transformer block held by one tensor-parallel rank."""
    h, f = cfg.hidden, cfg.ffn_size
    mlp_mats = 3 if cfg.gated_mlp else 2
    # Q and out weights, Q bias and the MLP split over tp; K and V (weights and biases) are the
    # rank's key/value heads: h wide without grouped-query attention, at least one head a rank
    q = cfg.q_width()
    split = (2 * h * q + q + mlp_mats * h * f + (0 if cfg.gated_mlp else f)) // tp
    split += (h + 1) * (cfg.qkv_width(tp) - cfg.q_width(tp))
    replicated = h + (0 if cfg.gated_mlp else h) + 4 * h  # row-parallel biases, two norms
    return split + replicated


def tensors_per_layer(cfg: ModelConfig) -> int:
    """Parameter tensors of one transformer block, in `params_per_layer`'s layout (a rank holds a
    shard of each, so tensor parallelism does not change the count): QKV and attention-out weight
    and bias, the MLP's weights (gate and up when gated) and, ungated, their biases, two norms'
    weight and bias."""
    return 4 + (3 if cfg.gated_mlp else 4) + 4


# tokens and positions; final norm's weight and bias and the LM head
EMBEDDING_TENSORS = 2
HEAD_TENSORS = 3


def _vocab_rows(cfg: ModelConfig, tp: int) -> int:
    """Vocabulary rows one of `tp` ranks holds (all of them unless `vocab_parallel`)."""
    return cfg.vocab // (tp if cfg.vocab_parallel else 1)


def embedding_params(cfg: ModelConfig, tp: int = 1) -> int:
    """Token and position tables held by one of `tp` ranks."""
    return _vocab_rows(cfg, tp) * cfg.hidden + cfg.seq * cfg.hidden


def head_params(cfg: ModelConfig, tp: int = 1, *, with_embedding: bool = False) -> int:
    """Final norm and LM head held by one of `tp` ranks; a head tied to the token embedding
    held on the same rank (`with_embedding`) has no weight of its own."""
    tied = cfg.tied_embeddings and with_embedding
    return 2 * cfg.hidden + (0 if tied else _vocab_rows(cfg, tp) * cfg.hidden)


def model_params(cfg: ModelConfig) -> int:
    """Parameters of the whole (unsharded) model."""
    head = head_params(cfg, with_embedding=True)
    return cfg.layers * params_per_layer(cfg) + embedding_params(cfg) + head


def stage_layers(layers: int, pp: int) -> list[int]:
    """Blocks per pipeline stage: contiguous, equal, the first stages take the remainder."""
    q, r = divmod(layers, pp)
    return [q + (1 if i < r else 0) for i in range(pp)]


def in_flight(cfg: ModelConfig, stage: int) -> int:
    """Micro-batches whose activations stage `stage` holds at its peak."""
    m = cfg.num_micro_batches
    if cfg.pp == 1:
        return 1  # gradient accumulation: each backward frees its micro-batch before the next
    if cfg.pp_schedule == "gpipe":
        return m
    return min(cfg.pp - stage, m)


def layer_activation_bytes(cfg: ModelConfig) -> int:
    """Activation bytes of one block for one micro-batch on one tensor-parallel rank."""
    s, b, h, a, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, cfg.tp
    f = cfg.ffn_size
    sbh = s * b * h
    if cfg.recompute == "full":
        return sbh * 2 // (t if cfg.sequence_parallel else 1) * cfg.dtype_bytes // 2
    # Korthikanti et al.: 10 (per-rank-replicated) + 24 (split) with f = 4h; MLP 3 + 4f/h. Of
    # the split part, K and V (2 each) shrink with grouped-query attention's key/value heads.
    kv_share = cfg.kv_heads_n / cfg.heads
    split = 24 - 16 + 4 * f / h - 4 * (1 - kv_share)
    attn_sq = 0.0 if cfg.recompute == "selective" or cfg.flash_attention else 5 * a * s / h
    if cfg.sequence_parallel or t == 1:
        per = sbh * (10 + split + attn_sq) / t
    else:
        per = sbh * (10 + split / t + attn_sq / t)
    return int(round(per * cfg.dtype_bytes / 2))


def autocast_layer_activation_bytes(cfg: ModelConfig) -> int:
    """Saved activation bytes of one block for one micro-batch under `autocast` (see the module
    docstring), on one tensor-parallel rank, without recomputation."""
    s, b, h, t, w = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.tp, cfg.dtype_bytes
    tok, f = s * b, cfg.ffn_size
    kv, q = cfg.kv_heads_n * cfg.head_size, cfg.q_width()
    norms = 2 * (4 + (4 if cfg.unfused_norm else 0)) * tok * h
    if cfg.fused_qkv:
        proj = w * tok * h + w * tok * (q + 2 * kv)
        v = 0  # a view of the fused output
    else:
        proj = 3 * w * tok * h
        v = w * tok * kv
    attn = proj + w * tok * (q + kv) + v + w * tok * q
    if not (cfg.flash_attention or cfg.recompute == "selective"):
        attn += 5 * cfg.heads * s * s * b
    if cfg.gated_mlp:
        mlp = 2 * w * tok * h + 4 * w * tok * f
    else:
        mlp = w * tok * h + 2 * w * tok * f
    return norms // (t if cfg.sequence_parallel else 1) + (attn + mlp) // t


def cast_params_per_layer(cfg: ModelConfig, tp: int = 1) -> int:
    """Parameters of one block that autocast copies to the compute type: all but the norms'."""
    return params_per_layer(cfg, tp) - 4 * cfg.hidden


def _autocast_stage(
    cfg: ModelConfig, stage: int, n_layers: int, params: int, held: int
) -> tuple[int, int, int, int]:
    """(param, grad, optimizer, activation) bytes of one stage's rank under `autocast`, at the
    moment of its step where their sum is largest (module docstring)."""
    t, dp, z = cfg.tp, cfg.dp, cfg.zero_stage
    last = stage == cfg.pp - 1
    tok, h = cfg.seq * cfg.micro_batch, cfg.hidden
    w = cfg.dtype_bytes
    weights = 4 * params // (dp if z >= 3 else 1)
    grads = 4 * params // (dp if z >= 2 else 1)
    moments = 8 * params // (dp if z >= 1 else 1)
    # gradients alive during a backward: left by an earlier micro-batch
    grads_bwd = grads if cfg.num_micro_batches > 1 else 0
    head_cast = _vocab_rows(cfg, t) * h if last and cfg.vocab else 0
    layer_cast = n_layers * cast_params_per_layer(cfg, t)
    full = autocast_layer_activation_bytes(cfg.replace(recompute="none"))
    norm_in = 4 * tok * h // (t if cfg.sequence_parallel else 1)
    moments_list = []
    # 1. the loss's backward (or, on a stage without the head, the start of its backward)
    if cfg.recompute == "full":
        saved = n_layers * norm_in * held
        copies = head_cast
    else:
        saved = n_layers * autocast_layer_activation_bytes(cfg) * held
        copies = layer_cast + head_cast
    if last and cfg.vocab:
        saved += norm_in * (2 if cfg.unfused_norm else 1) + w * tok * h
        saved += 12 * tok * _vocab_rows(cfg, t)
    moments_list.append((weights + w * copies, grads_bwd, moments, saved))
    # 2. full recomputation: the last block's backward, rebuilt with its weight copies
    if cfg.recompute == "full" and n_layers:
        rebuilt = n_layers * norm_in * held + full
        copy = w * (cast_params_per_layer(cfg, t) + head_cast)
        moments_list.append((weights + copy, grads_bwd, moments, rebuilt))
    # 3. the optimizer step: foreach AdamW's temporary of sqrt(second moments)
    moments_list.append((weights, grads, moments + 4 * params // (dp if z >= 1 else 1), 0))
    return max(moments_list, key=sum)


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layers: int
    params: int  # count, per rank
    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    micro_batches_held: int

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.activation_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "layers": self.layers,
            "params": self.params,
            "param_bytes": self.param_bytes,
            "grad_bytes": self.grad_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activation_bytes": self.activation_bytes,
            "micro_batches_held": self.micro_batches_held,
            "total_bytes": self.total_bytes,
        }


@dataclass(frozen=True)
class MemoryEstimate:
    stages: list[StageMemory]
    device_memory: int  # 0: unknown
    model_params: int
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda st: st.total_bytes)

    @property
    def memory_bytes(self) -> int:
        """Bytes on the busiest rank."""
        return self.peak.total_bytes

    @property
    def fits(self) -> bool | None:
        """None when the device memory is unknown."""
        return None if not self.device_memory else self.memory_bytes <= self.device_memory

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_bytes": self.memory_bytes,
            "device_memory": self.device_memory or None,
            "fits": self.fits,
            "model_params": self.model_params,
            "peak_stage": self.peak.stage,
            "stages": [st.to_dict() for st in self.stages],
            "notes": list(self.notes),
        }


def estimate_memory(cfg: ModelConfig, device_memory: int | None = None) -> MemoryEstimate:
    """Memory of every pipeline stage's rank for `cfg` (device memory: argument, else the
    config's `device_memory`, else unknown)."""
    cfg.validate()
    t, dp, z = cfg.tp, cfg.dp, cfg.zero_stage
    mixed = cfg.dtype_bytes < 4
    # AdamW: m and v in fp32, plus the fp32 master weights under mixed precision.
    opt_per_param = 8 + (4 if mixed else 0)
    act_layer = layer_activation_bytes(cfg)
    stages = []
    per_stage = stage_layers(cfg.layers, cfg.pp)
    for i, n_layers in enumerate(per_stage):
        params = n_layers * params_per_layer(cfg, t)
        if i == 0:
            params += embedding_params(cfg, t)
        if i == cfg.pp - 1:
            params += head_params(cfg, t, with_embedding=i == 0)
        held = in_flight(cfg, i)
        if cfg.autocast:
            p_b, g_b, o_b, a_b = _autocast_stage(cfg, i, n_layers, params, held)
            stages.append(StageMemory(i, n_layers, params, p_b, g_b, o_b, a_b, held))
            continue
        act = n_layers * act_layer * held
        if cfg.recompute == "full":
            full = layer_activation_bytes(cfg.replace(recompute="none"))
            act += full  # one block's activations rebuilt during its backward
        if i == cfg.pp - 1 and cfg.vocab:
            act += 4 * cfg.seq * cfg.micro_batch * cfg.vocab // cfg.vocab_tp * held
        stages.append(
            StageMemory(
                stage=i,
                layers=n_layers,
                params=params,
                param_bytes=params * cfg.dtype_bytes // (dp if z >= 3 else 1),
                grad_bytes=params * cfg.dtype_bytes // (dp if z >= 2 else 1),
                optimizer_bytes=params * opt_per_param // (dp if z >= 1 else 1),
                activation_bytes=act,
                micro_batches_held=held,
            )
        )
    if cfg.autocast:
        notes = [
            "autocast over fp32 weights: fp32 weights, gradients and AdamW moments (16 bytes/"
            "parameter), autocast's weight copies and the fp32 loss over the vocabulary; the "
            "largest of the loss's backward, a recomputed block's backward and the optimizer step",
        ]
    else:
        notes = [
            "activations: Korthikanti et al. 2022, s·b·h·(34 + 5·a·s/h) per layer (2-byte, no TP), "
            "MLP term generalised to 3 + 4·f/h",
            f"optimizer: AdamW, {opt_per_param} bytes/parameter"
            + (" (fp32 moments + master copy)" if mixed else " (fp32 moments)"),
        ]
    if cfg.vocab == 0:
        notes.append("vocab unknown (0): embedding, LM head and logits not counted")
    dev = device_memory if device_memory is not None else cfg.device_memory
    return MemoryEstimate(stages, int(dev or 0), model_params(cfg), notes)
