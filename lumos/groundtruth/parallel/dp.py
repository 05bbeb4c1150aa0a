"""The training step when every rank runs all layers: one rank, data parallel (DDP over gloo) and
tensor parallel (slices from `tp.py`, or DTensor's `parallelize_module`: `dtensor.py`), alone or
combined as dp × tp.

Ranks are laid out TP-innermost: rank = dp_index × tp + tp_index. Micro-batches are gradient
accumulation steps; DDP's gradient all-reduce runs only in the last one (`no_sync` before), as a
real trainer does.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function

from lumos.groundtruth.config import RunConfig
from lumos.groundtruth.model import batch, build, lm_loss
from lumos.groundtruth.parallel.tp import TPContext, dp_groups, tp_groups


def _my_group(groups: list[list[int]], rank: int) -> dist.ProcessGroup | None:
    """Create every group (all ranks must call new_group for each, in the same order)."""
    mine = None
    for ranks in groups:
        group = dist.new_group(ranks) if len(ranks) > 1 else None
        if rank in ranks:
            mine = group
    return mine


class DataParallelTrainer:
    """One rank of a dp × tp run (dp = tp = 1 is plain single-rank training)."""

    def __init__(self, cfg: RunConfig, rank: int, world_size: int):
        self.cfg = cfg
        self.dp_rank, tp_rank = divmod(rank, cfg.tp)
        tp_group = _my_group(tp_groups(world_size, cfg.tp), rank) if cfg.tp > 1 else None
        dp_group = _my_group(dp_groups(world_size, cfg.tp), rank) if cfg.dp > 1 else None
        if cfg.tp > 1 and cfg.tp_impl == "dtensor":
            from lumos.groundtruth.parallel.dtensor import build_dtensor

            model = build_dtensor(cfg, world_size)
        else:
            model = build(cfg, TPContext(cfg.tp, tp_rank, tp_group))
        if cfg.dp > 1:
            model = DistributedDataParallel(model, process_group=dp_group)
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(self, index: int) -> float:
        cfg, mb = self.cfg, self.cfg.micro_batch
        x, y = batch(cfg, index, mb * cfg.num_micro_batches, self.dp_rank)
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(cfg.num_micro_batches):
            last = m == cfg.num_micro_batches - 1
            sync = contextlib.nullcontext()
            if cfg.dp > 1 and not last:
                sync = self.model.no_sync()
            with sync:
                with record_function(f"forward_mb{m}"):
                    loss = lm_loss(self.model(x[m * mb : (m + 1) * mb]), y[m * mb : (m + 1) * mb])
                    loss = loss / cfg.num_micro_batches
                with record_function(f"backward_mb{m}"):
                    loss.backward()
            total += float(loss.detach())
        with record_function("optimizer"):
            self.optimizer.step()
        return total
