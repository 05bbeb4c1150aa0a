"""What the step-graph edit tests compare: a step's (or an edited step's) layer tasks of one
kind, in order, with their layer (GPU kernels of a GPU trace, operators of a CPU trace)."""

from __future__ import annotations

import numpy as np

from kernels.graph import Kind


def layer_tasks(step, ed=None, *, fwd: bool, kind: Kind = Kind.GPU_KERNEL) -> list:  # noqa: ANN001
    """(layer, name) of the layers' forward (or backward) tasks of `kind`, in task order."""
    from lumos.estimate.gpu_step import BLOCK_BWD, BLOCK_FWD

    base = np.arange(step.n) if ed is None else ed.base
    layer = step.layer[base] if ed is None else ed.layer
    names = np.array(step.tasks.column("name").to_pylist(), object)[base]
    blocks = BLOCK_FWD if fwd else BLOCK_BWD
    keep = (step.kind[base] == int(kind)) & np.isin(step.block[base], blocks) & (layer >= 0)
    return list(zip(layer[keep].tolist(), names[keep].tolist(), strict=True))
