"""Pipeline parallelism as an edit of a GPU step graph: one stage per GPU, joined by transfers.

Each stage is the base step edited for its own layers (`gpu_edit.Stage`: the first stage holds
the embedding, the last the final norm, the LM head and the loss) with its schedule's order of
forward and backward passes (`gpu_edit.pipeline_order`: 1F1B or GPipe), on a CPU thread, streams
and a device of its own. A forward's activations go to the next stage, a backward's gradients
to the previous one, each as a transfer task (`Coll.PP`) on the receiving stage's compute
stream, right before the pass that needs it and after the sending pass's last kernel: the
receiving CPU thread goes on issuing (NCCL's receive makes the stream wait, not the thread).
Every stage runs the training loop's head and tail and its optimizer over its own parameters.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa

from kernels.graph import Rt
from lumos.estimate.gpu_edit import (
    Coll,
    EditedStep,
    Insert,
    Stage,
    _kernels,
    _set,
    edit_step,
    insert_tasks,
    pipeline_order,
)
from lumos.estimate.gpu_sharding import add_parallel
from lumos.estimate.gpu_step import GpuStep
from lumos.estimate.memory import stage_layers
from lumos.replay.constants import DeviceConstants

__all__ = ["DEVICE_STRIDE", "pipeline_constants", "pipeline_step"]

# stage s's GPU is the base's device id + s * DEVICE_STRIDE (ids no trace uses)
DEVICE_STRIDE = 1 << 20


def pipeline_step(
    step: GpuStep,
    layers: int,
    micro_batches: int,
    base_layers: int,
    base_mbs: int,
    *,
    stages: int,
    schedule: str = "1f1b",
    recompute: bool | str = False,
    base_recompute: bool = False,
    tp: bool = False,
    dp: bool = False,
    zero: int = 0,
    sp: bool = False,
    vp: bool = False,
) -> EditedStep:
    """The step of `stages` pipeline stages (each edited from the base step, with its TP, DP,
    ZeRO and sequence / vocabulary parallelism's collectives when asked) joined into one graph by the transfers between them."""
    eds: list[EditedStep] = []
    lo = 0
    for s, n in enumerate(stage_layers(layers, stages)):
        order = pipeline_order(schedule, s, stages, micro_batches)
        stage = Stage(lo, lo + n, s == 0, s == stages - 1, order)
        ed = edit_step(
            step,
            layers,
            micro_batches,
            base_layers,
            base_mbs,
            recompute=recompute,
            base_recompute=base_recompute,
            stage=stage,
        )
        ed = add_parallel(step, ed, tp=tp, dp=dp, zero=zero, sp=sp, vp=vp, embedding=s == 0)
        eds.append(ed)
        lo += n
    joined = _join(eds)
    return insert_tasks(step, joined, _transfers(step, joined, stages, micro_batches))


def pipeline_constants(consts: list[DeviceConstants], stages: int) -> list[DeviceConstants]:
    """The replay constants of every stage's GPU: the base device's, under each stage's id."""
    return [replace(c, device=c.device + s * DEVICE_STRIDE) for s in range(stages) for c in consts]


def _join(eds: list[EditedStep]) -> EditedStep:
    """The stages' graphs side by side: ids, copies, processors and devices offset per stage."""
    n_proc = 1 + max(int(np.max(e.tasks.column("proc").to_numpy())) for e in eds)
    n_dev = 1 + max(int(np.max(e.tasks.column("dev").fill_null(0).to_numpy())) for e in eds)
    tables, deps, copies, sections, back = [], [], [], [], []
    id_off = copy_off = 0
    for s, e in enumerate(eds):
        t = e.tasks
        n = t.num_rows
        gpu = np.asarray(t.column("is_gpu").to_numpy(zero_copy_only=False), bool)
        launch = np.asarray(t.column("launch_src").to_numpy(zero_copy_only=False), np.int64)
        t = _set(t, "task", np.arange(n, dtype=np.int64) + id_off)
        t = _set(t, "launch_src", np.where(launch >= 0, launch + id_off, -1))
        t = _set(t, "proc", np.asarray(t.column("proc").to_numpy(), np.int64) + s * n_proc)
        dev = np.asarray(t.column("dev").fill_null(-1).to_numpy(), np.int64)
        t = _set(t, "dev", np.where(gpu, dev + s * n_dev, dev))
        device = np.asarray(t.column("device").fill_null(-1).to_numpy(), np.int64)
        t = _set(t, "device", np.where(gpu, device + s * DEVICE_STRIDE, device))
        # a sync's argument names a processor, a device or a task: the stage's own
        mode = np.asarray(t.column("rt_mode").to_numpy(), np.int64)
        arg = np.asarray(t.column("rt_arg").fill_null(-1).to_numpy(), np.int64)
        shift = np.select(
            [
                np.isin(mode, (int(Rt.STREAM), int(Rt.RECORD))),
                mode == int(Rt.DEVICE),
                mode == int(Rt.EVENT),
            ],
            [s * n_proc, s * n_dev, id_off],
            0,
        )
        t = _set(t, "rt_arg", np.where(arg >= 0, arg + shift, arg))
        tables.append(t)
        d = e.deps
        deps.append(
            pa.table(
                {
                    "src": pa.array(np.asarray(d.column("src").to_numpy()) + id_off, pa.int64()),
                    "dst": pa.array(np.asarray(d.column("dst").to_numpy()) + id_off, pa.int64()),
                    "kind": d.column("kind"),
                }
            )
        )
        copies.append(np.where(e.copy >= 0, e.copy + copy_off, -1))
        sections += [(k, m, [c + copy_off for c in cs]) for k, m, cs in e.sections]
        back += [[c + copy_off for c in cs] for cs in e.back]
        id_off += n
        copy_off += int(e.copy.max()) + 1 if e.copy.size else 0
    cat = np.concatenate
    coll = cat(
        [e.coll if e.coll is not None else np.full(e.base.shape[0], int(Coll.NONE)) for e in eds]
    )
    return EditedStep(
        cat([e.base for e in eds]),
        cat(copies),
        cat([e.layer for e in eds]),
        pa.concat_tables(tables),
        pa.concat_tables(deps),
        cat([e.piece for e in eds]),
        back,
        coll,
        sections,
        cat([np.full(e.base.shape[0], s, np.int64) for s, e in enumerate(eds)]),
    )


def _transfers(step: GpuStep, ed: EditedStep, stages: int, micro_batches: int) -> list[Insert]:
    """A forward's activations to the next stage, a backward's gradients to the previous one:
    after the sending pass's last kernel, before the receiving pass's first."""
    kern = _kernels(step, ed)
    where: dict[tuple[str, int, int], np.ndarray] = {}
    assert ed.stage is not None
    for kind, m, copies in ed.sections:
        idx = np.flatnonzero(np.isin(ed.copy, copies) & kern)
        if idx.size:  # a section's copies are all of one stage
            where[(kind, m, int(ed.stage[idx[0]]))] = idx
    out: list[Insert] = []
    for m in range(micro_batches):
        for s in range(stages - 1):
            for kind, src_s, dst_s in (("f", s, s + 1), ("b", s + 1, s)):
                src, dst = where.get((kind, m, src_s)), where.get((kind, m, dst_s))
                if src is None or dst is None:
                    continue
                out.append(Insert(int(dst.min()), Coll.PP, before=True, after=int(src.max())))
    return out
