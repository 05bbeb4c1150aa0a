"""ZeRO / FSDP and vocabulary parallelism as collectives added to an edited GPU step graph.

`sharding_inserts` says where the collectives go that DDP and Megatron's plain tensor
parallelism do not have (`gpu_edit.add_collectives` places those, and turns them into ZeRO-2's
reduce-scatters and sequence parallelism's pairs); `add_parallel` adds both in one pass. What
each one is and why it sits there: docs/estimate-gpu.md, "The model, in one page".
"""

from __future__ import annotations

import numpy as np

from lumos.estimate.gpu_edit import Coll, EditedStep, Insert, _kernels, add_collectives
from lumos.estimate.gpu_step import GpuStep
from lumos.estimate.template import BLOCK, ROLE

__all__ = ["VP_LOSS_ALLREDUCES", "add_parallel", "sharding_inserts"]

# Megatron's vocabulary-parallel cross-entropy sums three per-token values over the TP group:
# the logits' maximum, the target's logit and the sum of the exponentials
VP_LOSS_ALLREDUCES = 3


def add_parallel(
    step: GpuStep,
    ed: EditedStep,
    *,
    tp: bool,
    dp: bool,
    zero: int = 0,
    sp: bool = False,
    vp: bool = False,
    embedding: bool = True,
) -> EditedStep:
    """`ed` with every collective of its parallel configuration: DDP's or ZeRO's gradient
    reductions and TP's (or sequence parallelism's) activations (`add_collectives`), ZeRO's
    parameter all-gathers and vocabulary parallelism's all-reduces (`sharding_inserts`)."""
    if not (tp or dp):
        return ed
    extra = sharding_inserts(step, ed, zero=zero if dp else 0, vp=vp and tp)
    return add_collectives(
        step, ed, tp=tp, dp=dp, embedding=embedding, zero=zero, sp=sp, extra=extra
    )


def sharding_inserts(step: GpuStep, ed: EditedStep, *, zero: int, vp: bool) -> list[Insert]:
    """The GPU tasks ZeRO (stage `zero`, 0 for none) and vocabulary parallelism (`vp`) add:

    - ZeRO >= 1: one all-gather of the parameters after the optimizer's last kernel, on DDP's
      gradient stream (the step ends when it has: the next forward needs them);
    - ZeRO-3: before each layer's first kernel of every forward and backward (the recomputed
      forward's, when there is one), an all-gather of its parameters on a stream of its own
      (FSDP's all-gather stream), issued with the layer's first CPU operator (FSDP's pre-forward
      and pre-backward hooks) and waited for by that kernel;
    - vocabulary parallelism: after each forward's last loss kernel the parallel cross-entropy's
      `VP_LOSS_ALLREDUCES`, after the embedding's last forward kernel its output's all-reduce,
      after the LM head's last backward GEMM its input gradient's all-reduce, all on the
      compute stream (synchronous, as Megatron's)."""
    b = ed.base
    kern = _kernels(step, ed)
    block, role = step.block[b], step.role[b]
    proc = np.asarray(ed.tasks.column("proc").to_numpy(), np.int64)
    out: list[Insert] = []
    if zero >= 1:
        opt = np.flatnonzero(kern & np.isin(block, (BLOCK["opt"], BLOCK["tail"])))
        anchor = opt if opt.size else np.flatnonzero(kern)
        if anchor.size:
            out.append(Insert(int(anchor.max()), Coll.ZERO_GATHER, proc=int(proc.max()) + 1))
    if zero >= 3:
        out += _layer_gathers(step, ed, kern, int(proc.max()) + 2)
    if vp:
        for code, blk, roles, n in (
            (Coll.VP_EMBED, "f_pre", ("emb",), 1),
            (Coll.VP_LOSS, "f_post", ("tok_v",), VP_LOSS_ALLREDUCES),
            (Coll.VP_HEAD, "b_post", ("gemm_head",), 1),
        ):
            sel = kern & (block == BLOCK[blk])
            for c in np.unique(ed.copy[sel]).tolist():
                mine = np.flatnonzero(sel & (ed.copy == c))
                by_role = mine[np.isin(role[mine], [ROLE[r] for r in roles])]
                at = int((by_role if by_role.size else mine).max())
                out += [Insert(at, code) for _ in range(n)]
    return out


def _layer_gathers(step: GpuStep, ed: EditedStep, kern: np.ndarray, gather: int) -> list[Insert]:
    """ZeRO-3's all-gather of a layer's parameters before its first kernel of each forward and
    backward section, on processor `gather`, after the first CPU task of that layer's piece."""
    cpu = ~step.is_gpu[ed.base]
    out: list[Insert] = []
    for kind, _, copies in ed.sections:
        code = Coll.Z3_GATHER_FWD if kind == "f" else Coll.Z3_GATHER_BWD
        seen: set[int] = set()
        for c in copies:  # in order: a recomputed forward comes before its layer's backward
            mine = ed.copy == c
            layer = ed.layer[mine & kern & (ed.layer >= 0)]
            if not layer.size or int(layer[0]) in seen:
                continue
            seen.add(int(layer[0]))
            first_kernel = int(np.flatnonzero(mine & kern & (ed.layer >= 0))[0])
            issue = np.flatnonzero(mine & cpu)
            after = int(issue[0]) if issue.size else -1
            out.append(
                Insert(first_kernel, code, proc=gather, before=True, after=after, then=first_kernel)
            )
    return out
