"""Pipeline parallelism with `torch.distributed.pipelining` (works on CPU over gloo): one stage per
rank, layers split evenly (earlier stages take the remainder), the embedding on the first stage
and the head and loss on the last, ScheduleGPipe or Schedule1F1B over `num_micro_batches`.

The stage's `forward_one_chunk` / `backward_one_chunk` are wrapped so every micro-batch's work
is annotated `forward_mb<m>` / `backward_mb<m>` in both schedules (GPipe adds its own
`Forward <m>` / `Backward <m>` around them; 1F1B adds none). Activations and gradients between
stages travel as gloo send/recv.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.profiler import record_function

from lumos.groundtruth.config import RunConfig
from lumos.groundtruth.model import batch, build, lm_loss


def stage_layers(layers: int, stages: int, stage: int) -> tuple[int, int]:
    """The [first, last) layer range of `stage` when `layers` are split over `stages`."""
    base, extra = divmod(layers, stages)
    first = stage * base + min(stage, extra)
    return first, first + base + (1 if stage < extra else 0)


def _annotated(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        with record_function(f"{label}_mb{chunk_id}"):
            return fn(chunk_id, *args, **kwargs)

    return wrapper


class PipelineTrainer:
    """One stage of a pp-stage pipeline (dp = tp = 1)."""

    def __init__(self, cfg: RunConfig, rank: int, world_size: int):
        self.cfg, self.rank = cfg, rank
        first, last = stage_layers(cfg.layers, cfg.pp, rank)
        self.module = build(cfg, first=first, last=last)
        stage = PipelineStage(self.module, rank, cfg.pp, torch.device("cpu"))
        stage.forward_one_chunk = _annotated(stage.forward_one_chunk, "forward")
        stage.backward_one_chunk = _annotated(stage.backward_one_chunk, "backward")
        kind = Schedule1F1B if cfg.pp_schedule == "1f1b" else ScheduleGPipe
        self.schedule = kind(stage, n_microbatches=cfg.num_micro_batches, loss_fn=lm_loss)
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=1e-3)

    def step(self, index: int) -> float:
        cfg = self.cfg
        x, y = batch(cfg, index, cfg.micro_batch * cfg.num_micro_batches)
        self.optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if self.rank == 0:
            self.schedule.step(x)
        elif self.rank == cfg.pp - 1:
            self.schedule.step(target=y, losses=losses)
        else:
            self.schedule.step()
        with record_function("optimizer"):
            self.optimizer.step()
        return float(sum(float(v) for v in losses) / len(losses)) if losses else float("nan")
