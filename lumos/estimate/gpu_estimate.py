"""Estimate a GPU training step from its trace's execution graph: edit, re-time, replay.

1. The base step (`gpu_step.load_gpu_step`): one traced step's graph with its labels.
2. The edit (`gpu_edit.edit_step`): layers and micro-batches added or removed as whole pieces of
   the graph (CPU operators, their launches and their kernels).
3. Re-timing: CPU tasks keep their traced durations less the profiler's cost
   (`profiler_cost.PROFILER_EVENT_NS` per event recorded inside them); a GPU task of role r
   scales its variable part with the role's shape feature (`retime.features`: FLOPs for GEMMs,
   tokens x width for element-wise work, parameters for the optimizer), above a fixed part per
   kernel (`KERNEL_FIXED_QUANTILE` of the step's kernel durations: launch-bound kernels do not
   shrink).
4. Replay (`kernels.replay`): the step is the makespan of the edited graph; the regime
   (CPU-issue-bound, GPU-bound, mixed) falls out of the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.graph import Kind
from lumos.estimate.config import ModelConfig
from lumos.estimate.gpu_edit import EditedStep, edit_step
from lumos.estimate.gpu_step import GpuStep
from lumos.estimate.profiler_cost import PROFILER_EVENT_NS, unprofiled_cpu_ns
from lumos.estimate.retime import features
from lumos.replay.build import build_graph

__all__ = ["GpuEstimate", "estimate_step", "KERNEL_FIXED_QUANTILE"]

# the share of a kernel's duration that does not scale with its shapes: the step's lower decile
# of kernel durations (a kernel that short is launch- and tail-bound, whatever its size)
KERNEL_FIXED_QUANTILE = 0.1


@dataclass
class GpuEstimate:
    """One configuration's predicted step (unprofiled) and what it is made of."""

    predicted_ns: int
    traced_ns: int  # the same graph with the profiler's cost kept
    gpu_work_ns: int
    cpu_busy_ns: int
    n_tasks: int
    edited: EditedStep

    @property
    def profiler_share(self) -> float:
        """The share of the traced step that is the profiler's cost."""
        return 1.0 - self.predicted_ns / self.traced_ns if self.traced_ns else 0.0


def kernel_ratio(step: GpuStep, base: ModelConfig, cfg: ModelConfig) -> np.ndarray:
    """Per role code: the target's feature over the base's (1 where the base's is 0)."""
    fb, ft = features(base), features(cfg)
    return np.where(fb > 0, ft / np.where(fb > 0, fb, 1.0), 1.0)


def retimed(
    step: GpuStep,
    ed: EditedStep,
    base: ModelConfig,
    cfg: ModelConfig,
    *,
    event_ns: float = PROFILER_EVENT_NS,
) -> tuple[np.ndarray, np.ndarray]:
    """Durations and CPU delays of the edited step's tasks (with the profiler's cost taken out
    when `event_ns` > 0)."""
    b = ed.base
    gpu = step.is_gpu[b]
    dur = step.dur_ns[b].astype(np.float64)
    cpu_dur = unprofiled_cpu_ns(dur, step.n_events[b], event_ns)
    kinds = step.kind[b]
    kernels = step.is_gpu & (step.kind != int(Kind.GPU_WAIT))
    fixed_cap = (
        float(np.quantile(step.dur_ns[kernels], KERNEL_FIXED_QUANTILE)) if kernels.any() else 0.0
    )
    ratio = kernel_ratio(step, base, cfg)
    role = step.role[b]
    r = np.where(role >= 0, ratio[np.maximum(role, 0)], 1.0)
    fixed = np.minimum(dur, fixed_cap)
    gpu_dur = fixed + (dur - fixed) * r
    gpu_dur = np.where(kinds == int(Kind.GPU_WAIT), dur, gpu_dur)
    out = np.where(gpu, gpu_dur, cpu_dur)
    gap = step.gap_ns[b].astype(np.float64)
    return np.rint(out).astype(np.int64), np.rint(gap).astype(np.int64)


def estimate_step(
    step: GpuStep,
    base: ModelConfig,
    cfg: ModelConfig,
    *,
    event_ns: float = PROFILER_EVENT_NS,
) -> GpuEstimate:
    """Predict `cfg`'s step (without the profiler) from the base step of configuration `base`."""
    from kernels.replay import replay

    ed = edit_step(
        step,
        cfg.layers,
        cfg.num_micro_batches,
        base.layers,
        base.num_micro_batches,
        recompute=cfg.recompute != "none",
        base_recompute=base.recompute != "none",
    )
    g = build_graph(ed.tasks, ed.deps, step.constants, mode="model", source=step.job)
    n = ed.tasks.num_rows
    gpu = step.is_gpu[ed.base]
    out = []
    for cost in (event_ns, 0.0):
        dur, gap = retimed(step, ed, base, cfg, event_ns=cost)
        delay = g.delay_ns.copy()
        delay[:n] = np.where(gpu, delay[:n], gap)
        s = replay(g, dur_ns=dur, delay_ns=delay)
        out.append((int(s.end_ns.max() - s.start_ns.min()), dur))
    (pred, dur), (traced, _) = out
    busy = gpu & (step.kind[ed.base] != int(Kind.GPU_WAIT))
    return GpuEstimate(
        predicted_ns=pred,
        traced_ns=traced,
        gpu_work_ns=int(dur[busy].sum()),
        cpu_busy_ns=int(dur[~gpu].sum()),
        n_tasks=n,
        edited=ed,
    )
