"""Tensor parallelism, Megatron style, written by hand with `dist.all_reduce` in autograd
Functions (works on CPU with gloo; see the README for why not DTensor).

`TPContext.enter` is Megatron's f (identity forward, all-reduce backward) and goes before a
column-parallel linear; `TPContext.reduce` is g (all-reduce forward, identity backward) and goes
after a row-parallel linear. One block thus issues two all-reduces forward and two backward.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all-reduce of the input gradient across the TP group (Megatron's f)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce of the partial sums forward; identity backward (Megatron's g)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:  # type: ignore[override]
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad, None


class TPContext:
    """Which slice of the tensor-parallel group this rank holds; `group` None means no TP."""

    def __init__(self, size: int = 1, rank: int = 0, group: dist.ProcessGroup | None = None):
        self.size, self.rank, self.group = size, rank, group

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        return _CopyToTP.apply(x, self.group) if self.size > 1 else x

    def reduce(self, x: torch.Tensor) -> torch.Tensor:
        return _ReduceFromTP.apply(x, self.group) if self.size > 1 else x


def tp_groups(world_size: int, tp: int) -> list[list[int]]:
    """Consecutive ranks form a TP group: ranks [0..tp-1], [tp..2tp-1], ..."""
    return [list(range(s, s + tp)) for s in range(0, world_size, tp)]


def dp_groups(world_size: int, tp: int) -> list[list[int]]:
    """Ranks holding the same TP slice form a DP group: [0, tp, 2tp, ...], [1, tp+1, ...], ..."""
    return [list(range(t, world_size, tp)) for t in range(tp)]
