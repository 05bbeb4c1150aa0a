"""A GPT-style decoder: token + position embedding, N pre-LN blocks (causal attention, GELU MLP),
final layer norm, LM head and cross-entropy.

Tensor parallelism is Megatron's: the QKV projection and the first MLP linear are split by output
(column parallel, each rank keeps `heads / tp` heads and `ffn / tp` units), the attention output
projection and the second MLP linear by input (row parallel), followed by one all-reduce each in
the forward pass; the matching all-reduces of the backward pass sit before the column-parallel
linears. Embedding, layer norms and LM head are replicated (Megatron splits the vocabulary too;
here the LM head is small). Each block's forward is annotated `layer_<i>` (global index) so the
estimator can group the trace's operators into layers.

Weights are always drawn as the full model from `seed` and then sliced for a TP rank, so a TP run
computes the same function as the single-rank run with the same seed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from lumos.groundtruth.config import RunConfig
from lumos.groundtruth.parallel.tp import TPContext


class Attention(nn.Module):
    def __init__(self, cfg: RunConfig, tp: TPContext):
        super().__init__()
        self.tp = tp
        self.head_dim = cfg.hidden // cfg.heads
        self.local_heads = cfg.heads // tp.size
        local = self.local_heads * self.head_dim
        self.qkv = nn.Linear(cfg.hidden, 3 * local)
        # Row parallel: the bias is added once, after the all-reduce.
        self.proj = nn.Linear(local, cfg.hidden, bias=False)
        self.proj_bias = nn.Parameter(torch.zeros(cfg.hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.tp.enter(x)).split(self.local_heads * self.head_dim, dim=-1)
        q, k, v = (t.view(b, s, self.local_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)
        return self.tp.reduce(self.proj(y)) + self.proj_bias


class MLP(nn.Module):
    def __init__(self, cfg: RunConfig, tp: TPContext):
        super().__init__()
        self.tp = tp
        local = cfg.ffn_size // tp.size
        self.fc1 = nn.Linear(cfg.hidden, local)
        self.fc2 = nn.Linear(local, cfg.hidden, bias=False)
        self.fc2_bias = nn.Parameter(torch.zeros(cfg.hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(self.tp.enter(x)))
        return self.tp.reduce(self.fc2(h)) + self.fc2_bias


class Block(nn.Module):
    def __init__(self, cfg: RunConfig, index: int, tp: TPContext):
        super().__init__()
        self.index = index
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg, tp)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MLP(cfg, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function(f"layer_{self.index}"):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))


class Embed(nn.Module):
    def __init__(self, cfg: RunConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq, cfg.hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        with record_function("embedding"):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            return self.tok(tokens) + self.pos(pos)


class Head(nn.Module):
    def __init__(self, cfg: RunConfig):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("lm_head"):
            return self.out(self.ln(x))


class GPT(nn.Module):
    """Layers `first..last-1` of the decoder, with the embedding if `first == 0` and the head if
    `last == cfg.layers`: the whole model, or one pipeline stage."""

    def __init__(self, cfg: RunConfig, tp: TPContext | None = None, first: int = 0, last: int = -1):
        super().__init__()
        tp = tp or TPContext()
        last = cfg.layers if last < 0 else last
        self.embed = Embed(cfg) if first == 0 else None
        self.blocks = nn.ModuleList(Block(cfg, i, tp) for i in range(first, last))
        self.head = Head(cfg) if last == cfg.layers else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        if self.head is not None:
            x = self.head(x)
        return x


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    with record_function("loss"):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def full_state(cfg: RunConfig) -> dict[str, torch.Tensor]:
    """The full (unsharded) model's weights drawn from `cfg.seed`, GPT-2 style init."""
    torch.manual_seed(cfg.seed)
    model = GPT(cfg)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            nn.init.normal_(
                p, std=0.02 / (math.sqrt(2 * cfg.layers) if "proj" in name or "fc2" in name else 1)
            )
    return model.state_dict()


def _shard(
    name: str, full: torch.Tensor, local_shape: torch.Size, cfg: RunConfig, tp: TPContext
) -> torch.Tensor:
    if full.shape == local_shape:
        return full
    r, n = tp.rank, tp.size
    if ".qkv." in name:
        # [q; k; v] stacked by output: take this rank's heads from each of the three.
        parts = full.chunk(3, dim=0)
        return torch.cat([p.chunk(n, dim=0)[r] for p in parts], dim=0)
    if ".fc1." in name:
        return full.chunk(n, dim=0)[r]
    if name.endswith("proj.weight") or name.endswith("fc2.weight"):
        return full.chunk(n, dim=1)[r]
    raise ValueError(
        f"no TP slicing rule for parameter {name} {tuple(full.shape)} -> {tuple(local_shape)}"
    )


def build(cfg: RunConfig, tp: TPContext | None = None, first: int = 0, last: int = -1) -> GPT:
    """The model (or stage) with the weights of the full seeded model, sliced for the TP rank."""
    tp = tp or TPContext()
    model = GPT(cfg, tp, first, last)
    full = full_state(cfg)
    local = model.state_dict()
    # A stage's block i is stored as blocks.<i - first>; the full model has blocks.<i>.
    state = {}
    for key, tensor in local.items():
        src = key
        if key.startswith("blocks."):
            _, idx, rest = key.split(".", 2)
            src = f"blocks.{int(idx) + first}.{rest}"
        state[key] = _shard(src, full[src], tensor.shape, cfg, tp).clone()
    model.load_state_dict(state)
    return model


def batch(
    cfg: RunConfig, step: int, rows: int, dp_rank: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic random tokens and next-token targets for one step of one DP replica."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step * 1009 + dp_rank)
    data = torch.randint(0, cfg.vocab, (rows, cfg.seq + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()
