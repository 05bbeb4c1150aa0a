"""Each operator's work in a target, as the GPU re-timing grows it, against the target's own trace.

A base and a target of one structure (the same layers, micro-batches and recomputation) launch
the same operators in the same order, so their operators that launch GPU work line up one to
one. A GEMM's work is its FLOPs and another kernel's its operator's largest input
(`kernel_work`); the re-timing's growth is `GpuModel.work_ratio`. No timing enters: a row that
disagrees is a size the re-timing reads wrongly. Used by the tests and by
`bench/estimate_gpu.py --work`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lumos.estimate.config import ModelConfig
from lumos.estimate.gpu_step import GpuStep
from lumos.estimate.kernel_work import KClass

if TYPE_CHECKING:
    from lumos.estimate.gpu_estimate import GpuModel

__all__ = ["WorkRow", "work_rows"]


@dataclass(frozen=True)
class WorkRow:
    """One operator instance's first kernel: its task in the base step, and its work's growth
    as predicted and as the target traced it."""

    task: int
    predicted: float
    traced: float

    @property
    def agrees(self) -> bool:
        return abs(self.predicted / self.traced - 1) <= 1e-9 if self.traced else False


def _op_firsts(step: GpuStep, tasks: np.ndarray) -> list[int]:
    """Positions in `tasks` (ids of `step`) of the first kernel of each operator instance that
    launched GPU work, in order."""
    out: list[int] = []
    last = None
    for k, i in enumerate(tasks):
        if step.is_gpu[i] and step.k_op[i] >= 0 and step.k_op[i] != last:
            out.append(k)
            last = step.k_op[i]
    return out


def work_rows(model: GpuModel, target: ModelConfig, traced: GpuStep) -> list[WorkRow]:
    """Rows for the GEMMs and element-wise kernels (those with a recorded size) of `model`'s
    edited step for `target`, against `traced`, the target's own step. Raises
    ValueError where the two do not launch the same number of operators (another structure)."""
    ed, _ = model.graph(model.structure(target))
    r = model.work_ratio(ed, target)
    st, b = model.step, ed.base
    mine, theirs = _op_firsts(st, b), _op_firsts(traced, np.arange(traced.n))
    if len(mine) != len(theirs):
        raise ValueError(
            f"{traced.job}: {len(theirs)} operators launch GPU work, the edited {st.job} "
            f"{len(mine)}: not one structure"
        )
    out = []
    for k, t in zip(mine, theirs, strict=True):
        i = int(b[k])
        if st.k_class[i] == int(KClass.GEMM) and st.k_flops[i] > 0:
            want = traced.k_flops[t] / st.k_flops[i]
        elif st.k_class[i] == int(KClass.OTHER) and st.k_elems[i] > 0:
            want = traced.k_elems[t] / st.k_elems[i]
        else:
            continue
        out.append(WorkRow(i, float(r[k]), float(want)))
    return out
