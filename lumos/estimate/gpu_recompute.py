"""The tasks of a recomputing base's backward that run a layer's forward again.

Under activation checkpointing each layer's backward starts by running the layer's forward
again (PyTorch's non-reentrant checkpoint: inside the first backward operator that needs a
saved tensor, on the backward's thread). Those tasks are found by their GPU work: the layer's
forward launches a sequence of GPU tasks, and its recomputation launches the same sequence, or
a prefix of it (the checkpoint stops once every tensor the backward needs is back: the layer's
last operators are not re-run), contiguously inside the layer's backward. An estimate without
recomputation leaves those tasks out (`gpu_edit.edit_step`).
"""

from __future__ import annotations

import numpy as np

from lumos.estimate.gpu_step import GpuStep

__all__ = ["MIN_RECOMPUTED_SHARE", "RecomputeError", "recomputed_tasks"]

# the least share of a layer's forward GPU tasks that its recomputation must repeat, in order,
# to be taken for it (PyTorch's early stop leaves out the last few operators, not half)
MIN_RECOMPUTED_SHARE = 0.5


class RecomputeError(ValueError):
    """The base's backward does not show its layers' recomputation (names the job and layer)."""


def _launched(step: GpuStep) -> dict[int, list[int]]:
    """GPU tasks by their launch call, in task order."""
    out: dict[int, list[int]] = {}
    launch = step.launch_src
    for g in np.flatnonzero(step.is_gpu):
        if launch[g] >= 0:
            out.setdefault(int(launch[g]), []).append(int(g))
    return out


def _longest_prefix(seq: list[str], prefix: list[str]) -> tuple[int, int]:
    """(start, length) of the longest prefix of `prefix` found contiguously in `seq`."""
    best = (-1, 0)
    for i in range(len(seq)):
        n = 0
        while n < len(prefix) and i + n < len(seq) and seq[i + n] == prefix[n]:
            n += 1
        if n > best[1]:
            best = (i, n)
    return best


def recomputed_tasks(
    step: GpuStep, forward: dict[int, list[int]], backward: dict[int, list[int]], where: str
) -> np.ndarray:
    """Mask over the step's tasks: the recomputation in one micro-batch's backward. `forward`
    and `backward`: each base layer's CPU tasks in that micro-batch's forward and backward
    sections, in order; `where` names the section in errors. The CPU tasks from the first to
    the last launch of the repeated GPU tasks are the recomputation's, with those GPU tasks."""
    names = step.tasks.column("name").to_pylist()
    kids = _launched(step)
    out = np.zeros(step.n, bool)
    for layer, run in backward.items():
        fwd = [g for t in forward.get(layer, []) for g in kids.get(t, [])]
        bwd = [(t, g) for t in run for g in kids.get(t, [])]
        start, n = _longest_prefix([names[g] for _, g in bwd], [names[g] for g in fwd])
        if not fwd or n < MIN_RECOMPUTED_SHARE * len(fwd):
            raise RecomputeError(
                f"{step.job}: the backward of layer {layer} ({where}) repeats {n} of its "
                f"forward's {len(fwd)} GPU tasks in order (at least "
                f"{MIN_RECOMPUTED_SHARE:.0%} needed): its recomputation is not found, so an "
                "estimate without it cannot be made from this base"
            )
        first, last = bwd[start][0], bwd[start + n - 1][0]
        at = {t: i for i, t in enumerate(run)}
        out[run[at[first] : at[last] + 1]] = True
        out[[g for _, g in bwd[start : start + n]]] = True
    return out
