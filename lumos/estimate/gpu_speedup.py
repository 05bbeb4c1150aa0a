"""``speedup.<class>=N`` on a GPU step graph: which GPU tasks a class names, and their divisor.

The classes are the CPU template's (`template.ROLES` and the families ``gemm``, ``token``,
``comm``, ``all``), mapped onto the graph's GPU tasks by their kernel class (`kernel_work`)
and the role of the operator that launched them; CPU tasks never change. The table of what
each class covers: docs/estimate-gpu.md, "Speed-ups on the graph".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.graph import Kind
from lumos.estimate.gpu_edit import EditedStep
from lumos.estimate.gpu_step import GpuStep
from lumos.estimate.kernel_work import KClass
from lumos.estimate.retime import GEMM_ROLES, TOKEN_ROLES
from lumos.estimate.template import ROLE

__all__ = ["speedup_divisor", "speedup_mask"]


def speedup_mask(step: GpuStep, ed: EditedStep, cls: str) -> np.ndarray:
    """The tasks of `ed` that ``speedup.<cls>`` divides: ``all`` every GPU task but a wait
    (copies and memsets included); ``comm`` the collectives (traced and added); ``gemm`` the
    GEMM kernels; a GEMM role the GEMM kernels its operators launch; ``token`` the kernels of
    the token roles; any other role the other kernels of operators of that role (``attn``:
    the attention's fused kernels, by their class where the step is unlabelled, and its
    element-wise ones, ``opt``: the optimizer step's)."""
    b = ed.base
    kind = step.kind[b]
    gpu = step.is_gpu[b] & (kind != int(Kind.GPU_WAIT))
    coll = kind == int(Kind.COLLECTIVE)
    if ed.coll is not None:
        coll = coll | (ed.coll >= 0)
    if cls == "all":
        return gpu
    if cls == "comm":
        return gpu & coll
    # the classes below are kernels' (not copies, memsets or collectives)
    kern = step.is_gpu[b] & (kind == int(Kind.GPU_KERNEL)) & ~coll
    gemm = kern & (step.k_class[b] == int(KClass.GEMM))
    if cls == "gemm":
        return gemm
    role = step.role[b]
    if cls in GEMM_ROLES:
        return gemm & (role == ROLE[cls])
    roles = TOKEN_ROLES if cls == "token" else (cls,)
    mask = kern & ~gemm & np.isin(role, [ROLE[r] for r in roles])
    if cls == "attn":
        # a fused attention kernel by its class too: a step left unlabelled has no roles
        mask |= kern & (step.k_class[b] == int(KClass.ATTENTION))
    return mask


def speedup_divisor(step: GpuStep, ed: EditedStep, speed: Mapping[str, float]) -> np.ndarray:
    """Per task of `ed`, what its duration is divided by: the product of the factors of every
    class in `speed` it belongs to (1 for the others)."""
    out = np.ones(ed.base.shape[0])
    for cls, f in speed.items():
        out[speedup_mask(step, ed, cls)] *= f
    return out
