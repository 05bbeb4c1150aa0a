"""Tensor parallelism with PyTorch's own DTensor API (`parallelize_module`, `tp_impl: dtensor`):
what a trainer that does not write its collectives by hand records (torchtitan's way).

Each block's QKV and fc1 are column-parallel, its output projection and fc2 row-parallel, as in
`tp.py`; DTensor issues the all-reduces as functional collectives and waits for each where its
output is first read (`_c10d_functional::wait_tensor`), and every op on a DTensor is recorded
twice: on the DTensor (global shapes), and on the local shard under a `PythonSubclass` frame.
The fused QKV weight's rows are regrouped so that the contiguous shard `Shard(0)` gives a rank
its own heads of Q, K and V, the slices `model._shard` gives a Megatron rank: both compute the
single rank's losses.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

from lumos.groundtruth.config import RunConfig
from lumos.groundtruth.model import GPT, build

PLAN = {
    "attn.qkv": ColwiseParallel(),
    "attn.proj": RowwiseParallel(),
    "mlp.fc1": ColwiseParallel(),
    "mlp.fc2": RowwiseParallel(),
}


def _by_rank(t: torch.Tensor, n: int) -> torch.Tensor:
    """[q; k; v] stacked by output -> [q_0; k_0; v_0; q_1; k_1; v_1; ...] for n ranks."""
    parts = [p.chunk(n, dim=0) for p in t.chunk(3, dim=0)]
    return torch.cat([parts[j][r] for r in range(n) for j in range(3)], dim=0)


def build_dtensor(cfg: RunConfig, world_size: int) -> GPT:
    """The full model on every rank, its blocks split over a TP mesh of `cfg.tp` ranks (dp 1)."""
    model = build(cfg)
    mesh = init_device_mesh("cpu", (world_size // cfg.tp, cfg.tp), mesh_dim_names=("dp", "tp"))
    with torch.no_grad():
        for block in model.blocks:
            qkv = block.attn.qkv
            qkv.weight.copy_(_by_rank(qkv.weight, cfg.tp))
            qkv.bias.copy_(_by_rank(qkv.bias, cfg.tp))
            block.attn.local_heads = cfg.heads // cfg.tp
            parallelize_module(block, mesh["tp"], PLAN)
    return model
