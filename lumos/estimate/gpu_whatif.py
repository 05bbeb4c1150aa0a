"""Speed-up what-ifs on a GPU trace whose model the estimator does not read.

A step whose layers are not found (not a transformer: a recommendation model, a vision model; a
torch.compile'd one) cannot be edited for another configuration, but its execution graph can
still answer "what if this kind of kernel ran N times faster": the step as it ran, one rank's,
replayed with the profiler's cost taken out and the chosen GPU tasks' durations divided
(`gpu_speedup`), its measured external waits kept, a collective's wait for peers that are not
traced scaled with the compute before it (`waits`). `lumos estimate --set speedup.<class>=N`
takes this path when the job's template cannot be built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lumos.estimate.gpu_estimate import GpuModel

__all__ = ["WhatIf", "whatif", "whatif_model"]


@dataclass
class WhatIf:
    """The base step without the profiler and with the speed-ups, and what it is made of."""

    job: str
    rank: int
    predicted_ns: int
    traced_ns: int  # the same graph with the profiler's cost kept
    base_ns: int  # the step as it ran, without the profiler, no speed-up
    breakdown: dict[str, int]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "job": self.job,
            "rank": self.rank,
            "predicted_ns": self.predicted_ns,
            "traced_ns": self.traced_ns,
            "base_ns": self.base_ns,
            "breakdown": dict(self.breakdown),
            "warnings": list(self.warnings),
        }


def whatif_model(root: str | Path, job: str, why: str) -> GpuModel:
    """The step graph of `job`'s first rank as it ran, for speed-ups only (`why`: the reason
    its configuration cannot change)."""
    from lumos.estimate.estimator import cached_whatif
    from lumos.estimate.gpu_estimate import GpuModel
    from lumos.estimate.gpu_step import first_rank, load_gpu_step
    from lumos.estimate.infer import infer_base
    from warehouse.handle import WarehouseHandle

    cached = cached_whatif(root, job)  # kept when its template was refused, until an ingest
    if cached is not None:
        return GpuModel(cached[0], cached[1], fixed=why)
    wh = WarehouseHandle.open(Path(root))
    step = load_gpu_step(wh, job, rank=first_rank(wh, job), structured=False)
    return GpuModel(step, infer_base(wh, job).config, fixed=why)


def whatif(root: str | Path, job: str, speedup: Mapping[str, float], why: str) -> WhatIf:
    """`job`'s first rank's step with `speedup` (class -> factor); `why` says why the
    configuration cannot change (the template's error), quoted in the warnings."""
    import numpy as np

    from kernels.graph import Kind
    from lumos.estimate.profiler_cost import PROFILER_EVENT_NS

    model = whatif_model(root, job, why)
    step, rank = model.step, model.step.rank
    base = model.explain(model.base)
    got = model.explain(model.base, dict(speedup))
    gpu = step.is_gpu
    waits = np.asarray(step.tasks.column("ext_wait_ns").fill_null(0).to_numpy(), np.int64)
    coll = gpu & (step.kind == int(Kind.COLLECTIVE))
    asked = ", ".join(f"{k} x{v:g}" for k, v in speedup.items()) or "none"
    return WhatIf(
        job=job,
        rank=rank,
        predicted_ns=got.predicted_ns,
        traced_ns=got.traced_ns,
        base_ns=base.predicted_ns,
        breakdown={
            "gpu_work": got.gpu_work_ns,
            "cpu_busy": got.cpu_busy_ns,
            "collectives_traced": int(step.dur_ns[coll].sum()),
            "external_waits_traced": int(waits[gpu].sum()),
            "traced_step": got.traced_ns,
            "profiler": got.traced_ns - got.predicted_ns,
        },
        warnings=[
            f"the step graph of rank {rank} as it ran ({why}): only speed-ups can be asked of it; "
            f"speed-ups ({asked}) divide the durations of the GPU tasks of each class "
            "(docs/estimate-gpu.md, 'Speed-ups on the graph')",
            f"predicted without the profiler ({PROFILER_EVENT_NS / 1e3:.1f} us per recorded CPU "
            f"event taken out): {base.predicted_ns / 1e6:.1f} ms without speed-ups; the traced "
            "step's external waits kept, a wait for peers that are not traced scaled with the "
            "compute before it",
            *([step.left_out] if step.left_out else []),
        ],
    )
