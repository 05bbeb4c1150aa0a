"""Record small real PyTorch CPU training traces the way a plain training script does: no
`record_function` annotations, one `ProfilerStep#N` per iteration. Variants exercise what real
trainers do and the ground-truth trainer does not: mixed precision (`torch.autocast`, which
records every autocast op twice, nested) and activation checkpointing (the forward replayed
inside the backward), of every block (`full`, and `reentrant` the older way) or of the
attention core only (`selective`), and
GPT-2's tanh GELU written out as element-wise ops (`tanh_gelu`: no op is named for it), and
GPT-2's Conv1D layers (`conv1d`: addmm on an [in, out] weight, only the LM head a linear).

Used by tests/test_infer_variants.py; torch is imported only when a trace is recorded.
`require_torch` is every torch test's guard.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# the model every variant trains: what inference must recover
# ffn is not 4 x hidden, so that inference must read it, not default to it
TRUTH = dict(layers=3, hidden=48, heads=4, ffn=160, seq=16, micro_batch=2, vocab=96)
VARIANTS = (
    "plain",
    "bf16",
    "full",
    "reentrant",
    "selective",
    "tanh_gelu",
    "conv1d",
    "math_attn",
    "gqa_full",
)
# reentrant: every block checkpointed the older way (use_reentrant=True: HuggingFace's default,
# Megatron's and DeepSpeed's CheckpointFunction), one autograd function per block around its
# forward, whose backward replays it and runs the block's backward nested inside
# gqa_full: grouped-query attention (Megatron's fused QKV projection, K and V for GQA_KV_HEADS
# heads: 1, multi-query, so that the fused width 72 is not the vocabulary's 96) with every block
# checkpointed
GQA_KV_HEADS = 1


# the ground-truth trainer's tiny GPT (`lumos groundtruth run`): two micro-batches, so that
# gradient accumulation, DDP's no_sync and the pipeline schedules all have something to do
TINY_GPT = dict(layers=2, hidden=32, heads=2, seq=16, micro_batch=2, num_micro_batches=2, vocab=64)


def require_torch() -> None:
    """Skip the calling test without torch, except under CI (`CI` set), where that fails."""
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("CI"):
            pytest.fail("torch is not installed; CI must install the train extra")
        pytest.skip("torch is not installed (pip install -e '.[train]')")


def record(
    variant: str, out: Path, steps: int = 4, record_shapes: bool = True, **dims: int
) -> Path:
    """Train the model for `steps` profiled iterations (after one warm-up) and write the trace
    to `out` (a directory); returns the file. `record_shapes=False` records no input dims, as
    the profiler's default does. `dims` override TRUTH's sizes (a larger model, whose ops
    outweigh Python's per-op overhead)."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.checkpoint import checkpoint

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (one of {VARIANTS})")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    size = {**TRUTH, **dims}
    h, nh, ffn, seq = size["hidden"], size["heads"], size["ffn"], size["seq"]
    mb, vocab = size["micro_batch"], size["vocab"]

    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # attention dropout (HuggingFace GPT-2 trains with it) sends the same call, at the same
        # shapes, down the math path: bmm and softmax on the scores, no fused kernel
        p = 0.1 if variant == "math_attn" else 0.0
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)

    class Conv1D(nn.Module):
        """GPT-2's linear: a [in, out] weight and a direct addmm (no aten::linear)."""

        def __init__(self, n_in: int, n_out: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
            self.bias = nn.Parameter(torch.zeros(n_out))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
            return y.view(*x.shape[:-1], -1)

    lin = Conv1D if variant == "conv1d" else nn.Linear

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.kvw = GQA_KV_HEADS * (h // nh) if variant == "gqa_full" else h
            self.qkv, self.proj = lin(h, h + 2 * self.kvw), lin(h, h)
            self.fc1, self.fc2 = lin(h, ffn), lin(ffn, h)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split([h, self.kvw, self.kvw], dim=-1)
            q = q.view(b, s, nh, h // nh).transpose(1, 2)
            kvh = self.kvw // (h // nh)
            k, v = (
                t.view(b, s, kvh, h // nh).transpose(1, 2).repeat_interleave(nh // kvh, dim=1)
                for t in (k, v)
            )
            if variant == "selective":
                a = checkpoint(core, q, k, v, use_reentrant=False)
            else:
                a = core(q, k, v)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            u = self.fc1(self.ln2(x))
            if variant == "tanh_gelu":  # GPT-2's GELU, written out: no op named gelu
                u = 0.5 * u * (1.0 + torch.tanh(0.7978845608 * (u + 0.044715 * torch.pow(u, 3))))
            else:
                u = F.gelu(u)
            return x + self.fc2(u)

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
            self.blocks = nn.ModuleList(Block() for _ in range(size["layers"]))
            self.ln_f, self.head = nn.LayerNorm(h), nn.Linear(h, vocab, bias=False)

        def forward(self, idx: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                if variant in ("full", "gqa_full", "reentrant"):
                    x = checkpoint(blk, x, use_reentrant=variant == "reentrant")
                else:
                    x = blk(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1))

    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{variant}.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=steps),
        record_shapes=record_shapes,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(steps + 1):
            idx = torch.randint(0, vocab, (mb, seq + 1))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "bf16"):
                loss = model(idx[:, :-1], idx[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    return path
