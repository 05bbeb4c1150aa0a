"""Edit a GPU base step's graph for another layer count and number of micro-batches.

The step is read as sections (head, per micro-batch forward and backward, optimizer, tail); a
forward or backward section is a prefix, one run of tasks per layer and a suffix. The target's
step is made of copies of those pieces: target layer j copies base layer ``j * L // L'``, target
micro-batch m copies base micro-batch ``min(m, M - 1)``, and a GPU task goes wherever its launch
call goes. Edges inside a copied piece are copied; an edge between pieces joins each copy of its
destination to the latest copy of its source placed before it. Full rules: docs/estimate-gpu.md,
"Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import pyarrow as pa

from kernels.graph import Kind, Rt
from lumos.estimate.gpu_recompute import RecomputeError, recomputed_tasks
from lumos.estimate.gpu_step import BLOCK_BWD, BLOCK_FWD, GpuStep
from lumos.estimate.template import BLOCK, LAYER_BLOCKS, ROLE
from lumos.estimate.transforms import MAX_TASKS

__all__ = [
    "Coll",
    "EditedStep",
    "add_collectives",
    "edit_step",
    "identity_edit",
    "layer_map",
    "recomputation",
]

_OPT = (BLOCK["opt"], BLOCK["tail"])


class EditError(ValueError):
    """The base step cannot be edited as asked (names the job and why)."""


@dataclass
class EditedStep:
    """The target's tasks as copies of base tasks: ``base`` (base task id of each new task, in
    new id order), ``copy`` (the piece instance it belongs to), ``tasks`` and ``deps`` tables
    ready for `lumos.replay.build.build_graph`, each new task's target ``layer`` (-1 for a task
    outside every layer, such as an op between two layers that travels with the layer before
    it) and ``piece`` (`Piece` code: a checkpointed layer's forward, its recomputation, else
    plain). ``back``: the copies that make up each micro-batch's backward, in order. ``coll``:
    the `Coll` code of each task (a collective `add_collectives` made; NONE for the others),
    None when there are none. ``sections``: each forward (`f`) and backward (`b`) placed, with
    its micro-batch and copies, in order. ``stage``: each task's pipeline stage (None: one)."""

    base: np.ndarray
    copy: np.ndarray
    layer: np.ndarray
    tasks: pa.Table
    deps: pa.Table
    piece: np.ndarray
    back: list[list[int]] = field(default_factory=list)
    coll: np.ndarray | None = None
    sections: list[tuple[str, int, list[int]]] = field(default_factory=list)
    stage: np.ndarray | None = None


class Piece(IntEnum):
    """What a copied piece of the step is (`EditedStep.piece`)."""

    PLAIN = 0
    CHECKPOINTED = 1  # a layer's forward under activation checkpointing
    RECOMPUTED = 2  # that forward run again before the layer's backward
    UNCHECKPOINTED = 3  # a checkpointed base layer's forward, in a step without checkpointing


@dataclass
class Stage:
    """One pipeline stage's part of the step: target layers ``lo..hi-1``, whether it holds the
    embedding's side (``first``) and the head and loss (``last``), and its ``order`` of forward
    (`f`) and backward (`b`) passes per micro-batch (`pipeline_order`)."""

    lo: int
    hi: int
    first: bool
    last: bool
    order: list[tuple[str, int]]


def pipeline_order(
    schedule: str, stage: int, stages: int, micro_batches: int
) -> list[tuple[str, int]]:
    """The passes a stage runs, in order: GPipe all forwards then all backwards; 1F1B
    ``stages - stage - 1`` forwards to fill the pipe, then one forward and one backward in
    turn, then the backwards left."""
    if schedule == "gpipe":
        return [("f", m) for m in range(micro_batches)] + [("b", m) for m in range(micro_batches)]
    warm = min(stages - stage - 1, micro_batches)
    out = [("f", m) for m in range(warm)]
    f = warm
    for b in range(micro_batches):
        if f < micro_batches:
            out.append(("f", f))
            f += 1
        out.append(("b", b))
    return out


class Coll(IntEnum):
    """A collective `add_collectives` puts in the step (`EditedStep.coll`)."""

    NONE = -1
    TP = 0  # tensor parallelism's all-reduce of a layer's activations (or their gradients)
    DP_HEAD = 1  # DDP's all-reduce of the gradients of the parts after the layers (LM head)
    DP_LAYER = 2  # ... of one layer's gradients
    DP_EMBED = 3  # ... of the parts before the layers (the embedding)
    PP = 4  # a pipeline stage's activations (or their gradients) sent to the next (previous)
    RS_HEAD = 5  # ZeRO >= 2: DP_HEAD's gradients reduce-scattered instead of all-reduced
    RS_LAYER = 6  # ... DP_LAYER's
    RS_EMBED = 7  # ... DP_EMBED's
    ZERO_GATHER = 8  # ZeRO: the updated parameters all-gathered after the optimizer
    Z3_GATHER_FWD = 9  # ZeRO-3: a layer's parameters all-gathered before its forward
    Z3_GATHER_BWD = 10  # ... and again before its backward
    SP_RS = 11  # sequence parallelism: TP's all-reduce as a reduce-scatter ...
    SP_AG = 12  # ... and an all-gather
    VP_LOSS = 13  # vocabulary parallelism: the parallel cross-entropy's small all-reduces
    VP_EMBED = 14  # ... the embedding's output summed over the vocabulary's shards
    VP_HEAD = 15  # ... the LM head's input gradient summed (a column-parallel linear)


# the code of a piece's gradient reduce-scatter under ZeRO >= 2
RS_OF = {Coll.DP_HEAD: Coll.RS_HEAD, Coll.DP_LAYER: Coll.RS_LAYER, Coll.DP_EMBED: Coll.RS_EMBED}


# Megatron's tensor parallelism: a row-parallel linear's output is summed over the group in the
# forward (attention's output projection, the MLP's down projection), a column-parallel one's
# input gradient in the backward (Q/K/V, the MLP's up and gate projections)
TP_SUM_FORWARD = (ROLE["gemm_out"], ROLE["gemm_down"])
TP_SUM_BACKWARD = (ROLE["gemm_qkv"], ROLE["gemm_up"])
TP_NAME = "AllReduce (tensor parallel, modelled)"
PP_NAME = "SendRecv (pipeline stages, modelled)"
# the largest edited step graph built (as `transforms.MAX_TASKS` bounds the CPU template's)
MAX_GRAPH_TASKS = MAX_TASKS
DP_NAME = "AllReduce (DDP gradients, modelled)"
RS_NAME = "ReduceScatter (ZeRO gradients, modelled)"


def layer_map(base_layers: int, layers: int) -> list[int]:
    """The base layer each target layer copies."""
    return [j * base_layers // layers for j in range(layers)]


def _sections(step: GpuStep) -> tuple[list[int], dict[tuple[str, int], list[int]], list[int]]:
    """CPU tasks of the step split into head, per (f|b, micro-batch) and tail, each in task
    order. A task outside forward and backward between micro-batches (the loop's bookkeeping)
    goes with the next forward."""
    gpu = step.is_gpu
    cpu = np.flatnonzero(~gpu)
    head: list[int] = []
    tail: list[int] = []
    sec: dict[tuple[str, int], list[int]] = {}
    pending: list[int] = []
    seen_fwd = False
    for t in cpu:
        b, m = int(step.block[t]), int(step.mb[t])
        if b in BLOCK_FWD and m >= 0:
            seen_fwd = True
            sec.setdefault(("f", m), []).extend(pending)
            pending = []
            sec.setdefault(("f", m), []).append(int(t))
        elif b in BLOCK_BWD and m >= 0:
            sec.setdefault(("b", m), []).append(int(t))
        elif b in _OPT:
            tail.extend(pending)
            pending = []
            tail.append(int(t))
        elif not seen_fwd:
            head.append(int(t))
        elif tail:
            tail.append(int(t))
        else:
            pending.append(int(t))
    tail = pending + tail if not tail else tail + pending
    return head, sec, tail


def identity_edit(step: GpuStep) -> EditedStep:
    """The base step as it ran, every task once and every edge kept: the graph of a what-if
    that changes no structure (a step whose layers are not found, a multi-rank base)."""
    n = step.n
    return EditedStep(
        base=np.arange(n, dtype=np.int64),
        copy=np.zeros(n, np.int64),
        layer=np.asarray(step.layer, np.int64).copy(),
        tasks=step.tasks,
        deps=step.deps,
        piece=np.full(n, int(Piece.PLAIN), np.int64),
    )


def recomputation(step: GpuStep) -> np.ndarray:
    """Mask over the tasks of a base that recomputes: each layer's forward run again in its
    backward, in every micro-batch (`gpu_recompute`); EditError where it is not found."""
    _, sec, _ = _sections(step)
    out = np.zeros(step.n, bool)
    for kind, m in sec:
        if kind != "b":
            continue
        runs = {}
        for k in "fb":
            _, r, ids, _ = _layer_runs(sec.get((k, m), []), step)
            runs[k] = dict(zip(ids, r, strict=True))
        try:
            out |= recomputed_tasks(step, runs["f"], runs["b"], f"micro-batch {m}")
        except RecomputeError as exc:
            raise EditError(str(exc)) from exc
    return out


def _layer_runs(
    tasks: list[int], step: GpuStep
) -> tuple[list[int], list[list[int]], list[int], list[int]]:
    """A section's prefix, its runs of one layer each (in section order), their base layers and
    its suffix. The runs end at the first task of the model's ends (embedding, head, loss:
    outside every layer, its block not a layer's) after a layer's: the embedding's backward
    runs before the first layer's last AccumulateGrad, and a run is copied once per target
    layer it stands for, the model's ends once."""
    lay = [int(step.layer[t]) for t in tasks]
    first = next((i for i, x in enumerate(lay) if x >= 0), None)
    if first is None:
        return tasks, [], [], []
    ends = (
        i
        for i in range(first, len(tasks))
        if lay[i] < 0 and int(step.block[tasks[i]]) not in LAYER_BLOCKS
    )
    cut = next(ends, len(tasks))
    last = max(i for i in range(first, cut) if lay[i] >= 0)
    runs: list[list[int]] = []
    ids: list[int] = []
    for i in range(first, last + 1):
        if lay[i] >= 0 and (not ids or lay[i] != ids[-1]):
            runs.append([])
            ids.append(lay[i])
        runs[-1].append(tasks[i])
    return tasks[:first], runs, ids, tasks[last + 1 :]


def edit_step(
    step: GpuStep,
    layers: int,
    micro_batches: int,
    base_layers: int,
    base_mbs: int,
    *,
    recompute: bool | str = False,
    base_recompute: bool = False,
    stage: Stage | None = None,
) -> EditedStep:
    """The target step's graph: `layers` per micro-batch, `micro_batches` forward+backward
    passes, from a base of `base_layers` and `base_mbs`. `recompute` (True or "full": full
    activation checkpointing): each layer's forward runs again on the backward's thread right
    before that layer's backward; "selective" (Megatron's): only its attention operators do,
    the rest of the forward kept as it ran. `stage`: one pipeline stage's part of it (its
    layers, the model's ends it holds, its schedule's order of forwards and backwards); the
    whole step if None."""
    selective = recompute == "selective"
    recompute = recompute not in (False, "none")
    if layers < 1 or micro_batches < 1:
        raise EditError(f"{step.job}: layers and micro-batches must be >= 1")
    # a base that recomputes (fully), for a step that does not or recomputes only attention:
    # its recomputation left out (and the attention's added back, as from a plain base)
    drop = recomputation(step) if base_recompute and (not recompute or selective) else None
    recompute = recompute and (not base_recompute or selective)
    # refused before anything is built: the edit's lists and the replay grow with the graph
    in_layers = int(np.count_nonzero(step.layer >= 0))
    per_layer = in_layers / max(base_layers * base_mbs, 1) * (1.5 if recompute else 1.0)
    n_tasks = int(step.n + per_layer * (layers * micro_batches - base_layers * base_mbs))
    if n_tasks > MAX_GRAPH_TASKS:
        raise EditError(
            f"{step.job}: layers={layers} x micro-batches={micro_batches} would be a step graph "
            f"of ~{n_tasks:,} tasks ({per_layer:,.0f} per layer and micro-batch); the estimator "
            f"builds at most {MAX_GRAPH_TASKS:,} (memory grows with it, ~300 bytes a task)"
        )
    head, sec, tail = _sections(step)
    mbs = sorted({m for _, m in sec})
    if not mbs or ("b", mbs[0]) not in sec:
        raise EditError(f"{step.job}: the base step has no forward and backward to repeat")
    cpu_seq: list[int] = []
    copy_of: list[int] = []
    lay_of: list[int] = []
    moved: list[int] = []  # per placed task: the thread it is moved to, -1 to stay
    piece_of: list[int] = []  # per copy: its Piece
    back_from: list[list[int]] = []  # the copies that make up each backward section
    n_copy = 0

    proc = np.asarray(step.tasks.column("proc").to_numpy(), np.int64)

    def place(
        tasks: list[int], layer: int = -1, to_proc: int = -1, piece: Piece = Piece.PLAIN
    ) -> None:
        nonlocal n_copy
        piece_of.append(int(piece))
        cpu_seq.extend(tasks)
        copy_of.extend([n_copy] * len(tasks))
        lay_of.extend([layer if step.layer[t] >= 0 else -1 for t in tasks])
        moved.extend([to_proc] * len(tasks))
        n_copy += 1

    st = stage or Stage(0, layers, True, True, [(k, m) for m in range(micro_batches) for k in "fb"])
    sections: list[tuple[str, int, list[int]]] = []

    def place_section(
        tasks: list[int],
        backward: bool,
        again: dict[int, list[int]] | None = None,
        piece: Piece = Piece.PLAIN,
    ) -> list[int]:
        first = n_copy
        pre, runs, ids, post = _layer_runs(tasks, step)
        # the parts before and after the layers: the embedding's side (the forward's prefix,
        # the backward's suffix) is the first stage's, the head and loss the last stage's
        if st.last if backward else st.first:
            place(pre)
        if runs:
            by_layer = dict(zip(ids, runs, strict=True))
            targets = list(range(st.lo, st.hi))
            order = [layer_map(base_layers, layers)[j] for j in targets]
            if backward or (len(ids) > 1 and ids[0] > ids[-1]):  # backward: last layer first
                order, targets = order[::-1], targets[::-1]
            for j, b in zip(targets, order, strict=True):
                if b not in by_layer:
                    raise EditError(f"{step.job}: base layer {b} has no tasks in a section")
                if again is not None and b in again:
                    place(again[b], j, int(proc[by_layer[b][0]]), Piece.RECOMPUTED)
                place(by_layer[b], j, piece=piece)
        if st.first if backward else st.last:
            place(post)
        return list(range(first, n_copy))

    place(head)
    for kind, m in st.order:
        src = mbs[-1] if m == micro_batches - 1 else mbs[min(m, len(mbs) - 1)]
        fwd = sec.get(("f", src), [])
        if kind == "f":
            piece = Piece.CHECKPOINTED if recompute and not selective else Piece.PLAIN
            piece = Piece.UNCHECKPOINTED if drop is not None else piece
            sections.append(("f", m, place_section(fwd, False, piece=piece)))
            continue
        again = None
        if recompute:
            _, runs, ids, _ = _layer_runs(fwd, step)
            if selective:
                runs = [[t for t in r if step.role[t] == ROLE["attn"]] for r in runs]
            again = dict(zip(ids, runs, strict=True))
        bwd = sec.get(("b", src), [])
        if drop is not None:
            bwd = [t for t in bwd if not drop[t]]
        copies = place_section(bwd, True, again)
        back_from.append(copies)
        sections.append(("b", m, copies))
    place(tail)
    return _assemble(
        step,
        np.array(cpu_seq, np.int64),
        np.array(copy_of, np.int64),
        np.array(lay_of, np.int64),
        np.array(moved, np.int64),
        back_from,
        np.array(piece_of, np.int64),
        sections,
    )


def _assemble(
    step: GpuStep,
    cpu_seq: np.ndarray,
    copy_of: np.ndarray,
    lay_of: np.ndarray,
    moved: np.ndarray,
    back_from: list[list[int]],
    piece_of: np.ndarray,
    sections: list[tuple[str, int, list[int]]],
) -> EditedStep:
    gpu = step.is_gpu
    launch = step.launch_src
    # GPU tasks follow their launch call (several GPU tasks of one call keep their order)
    kids: dict[int, list[int]] = {}
    orphans: list[int] = []
    for g in np.flatnonzero(gpu):
        (kids.setdefault(int(launch[g]), []) if launch[g] >= 0 else orphans).append(int(g))
    base, copy, lay, to_proc = [], [], [], []
    rows = zip(cpu_seq.tolist(), copy_of.tolist(), lay_of.tolist(), moved.tolist(), strict=True)
    for t, c, ly, mv in rows:
        base.append(t)
        copy.append(c)
        lay.append(ly)
        to_proc.append(mv)
        for g in kids.get(t, ()):
            base.append(g)
            copy.append(c)
            lay.append(ly)
            to_proc.append(-1)
    # a GPU task with no launch in the step (issued before it) stays once, first
    base = orphans + base
    copy = [-1] * len(orphans) + copy
    lay = [-1] * len(orphans) + lay
    to_proc = [-1] * len(orphans) + to_proc
    base_a = np.array(base, np.int64)
    copy_a = np.array(copy, np.int64)
    n = base_a.shape[0]
    # new ids must keep every stream's and thread's order: stable sort by processor is implied,
    # since a processor's tasks appear in sequence order
    t = step.tasks.take(pa.array(base_a))
    # a recomputed forward runs on the backward's thread
    mv = np.array(to_proc, np.int64)
    proc = np.asarray(t.column("proc").to_numpy(), np.int64)
    proc = np.where(mv >= 0, mv, proc)
    tid_of = dict(
        zip(
            step.tasks.column("proc").to_pylist(), step.tasks.column("tid").to_pylist(), strict=True
        )
    )
    t = _set(t, "proc", proc)
    t = _set(
        t,
        "tid",
        np.array([tid_of[p] if tid_of[p] is not None else -1 for p in proc.tolist()], np.int64),
    )
    deps = _edges(step, base_a, copy_a, back_from, cpu_seq, proc)
    t = _set(t, "task", np.arange(n, dtype=np.int64))
    pos = {(int(b), int(c)): i for i, (b, c) in enumerate(zip(base_a, copy_a, strict=True))}
    every = np.arange(n, dtype=np.int64)
    t = _set(t, "launch_src", _remap_ids(launch, base_a, copy_a, pos, every))
    # an event wait names its record task by id: the record of its own copy, else the one
    # outside every copy
    mode = np.asarray(t.column("rt_mode").to_numpy(), np.int64)
    base_arg = np.asarray(step.tasks.column("rt_arg").fill_null(-1).to_numpy(), np.int64)
    arg = base_arg[base_a]
    event = np.flatnonzero(mode == int(Rt.EVENT))
    arg[event] = _remap_ids(base_arg, base_a, copy_a, pos, event)
    t = _set(t, "rt_arg", arg)
    piece = np.where(copy_a >= 0, piece_of[np.maximum(copy_a, 0)], int(Piece.PLAIN))
    return EditedStep(
        base_a, copy_a, np.array(lay, np.int64), t, deps, piece, back_from, sections=sections
    )


def _set(t: pa.Table, name: str, values: np.ndarray) -> pa.Table:
    i = t.schema.get_field_index(name)
    return t.set_column(i, t.schema.field(i), pa.array(values, t.schema.field(i).type))


def _remap_ids(
    ids: np.ndarray,
    base: np.ndarray,
    copy: np.ndarray,
    pos: dict[tuple[int, int], int],
    rows: np.ndarray,
) -> np.ndarray:
    """For the edited step's tasks `rows`, the base task id each one's base task holds (`ids`:
    a launch call, an event's record) as an id of the edited step: the task of the same copy,
    else the one outside every copy, else -1. `pos`: (base id, copy) -> edited id."""
    out = np.full(rows.shape[0], -1, np.int64)
    for k, i in enumerate(rows.tolist()):
        src = int(ids[base[i]])
        if src >= 0:
            out[k] = pos.get((src, int(copy[i])), pos.get((src, -1), -1))
    return out


def _edges(
    step: GpuStep,
    base: np.ndarray,
    copy: np.ndarray,
    back_from: list[list[int]],
    cpu_seq: np.ndarray,
    new_proc: np.ndarray,
) -> pa.Table:
    d = step.deps
    src = np.asarray(d.column("src").to_numpy(), np.int64)
    dst = np.asarray(d.column("dst").to_numpy(), np.int64)
    kind = d.column("kind").to_pylist()
    # positions of every copy of each base task, in new order
    order = np.argsort(base, kind="stable")
    sb = base[order]
    starts = np.searchsorted(sb, np.arange(step.n), "left")
    ends = np.searchsorted(sb, np.arange(step.n), "right")
    proc = np.asarray(step.tasks.column("proc").to_numpy(), np.int64)
    main = int(proc[cpu_seq[0]]) if cpu_seq.size else -1
    # the backward thread's return to the main thread: re-made after every backward copy
    back_src = {
        int(s)
        for s, t, k in zip(src, dst, kind, strict=True)
        if k == "thread" and proc[s] != main and proc[t] == main
    }
    out_s: list[int] = []
    out_d: list[int] = []
    out_k: list[str] = []
    for s, t, k in zip(src.tolist(), dst.tolist(), kind, strict=True):
        if k == "thread" and s in back_src:
            continue
        s_pos = order[starts[s] : ends[s]]
        for p in order[starts[t] : ends[t]]:
            same = s_pos[copy[s_pos] == copy[p]]
            if same.size:
                q = int(same[0])
            else:
                before = s_pos[s_pos < p]
                if not before.size:
                    continue
                q = int(before.max())
            out_s.append(q)
            out_d.append(int(p))
            out_k.append(k)
    # each backward copy's last task off the main thread -> the next main-thread task after it
    gpu = step.is_gpu[base]
    into = set(out_d)
    for copies in back_from:
        members = np.flatnonzero(np.isin(copy, copies) & ~gpu & (new_proc != main))
        if not members.size:
            continue
        first = int(members.min())
        before = np.flatnonzero((np.arange(base.shape[0]) < first) & (new_proc == main) & ~gpu)
        if first not in into and before.size:
            # a backward whose caller is not in the step (a pipeline stage without the loss:
            # its `backward(grads)` call is the training loop's): started by the main thread
            out_s.append(int(before.max()))
            out_d.append(first)
            out_k.append("thread")
        last = int(members.max())
        nxt = np.flatnonzero((np.arange(base.shape[0]) > last) & (new_proc == main))
        if nxt.size and new_proc[last] != main:
            out_s.append(last)
            out_d.append(int(nxt[0]))
            out_k.append("thread")
    return pa.table(
        {
            "src": pa.array(out_s, pa.int64()),
            "dst": pa.array(out_d, pa.int64()),
            "kind": pa.array(out_k, pa.string()),
        }
    )


def add_collectives(
    step: GpuStep,
    ed: EditedStep,
    *,
    tp: bool,
    dp: bool,
    embedding: bool = True,
    zero: int = 0,
    sp: bool = False,
    extra: list[Insert] | None = None,
) -> EditedStep:
    """`ed` with the collectives of tensor and data parallelism as GPU tasks.

    - `tp`: an all-reduce on the compute stream after the last kernel of each row-parallel
      linear of every layer forward (recomputed ones too) and of each column-parallel linear of
      every layer backward (`TP_SUM_FORWARD`, `TP_SUM_BACKWARD`): the stream waits for it, as
      Megatron's synchronous all-reduce makes it.
    - `dp`: DistributedDataParallel's gradient all-reduces in the last micro-batch's backward
      (the earlier ones accumulate under `no_sync`) on a stream of their own, one per piece of
      the backward (the LM head's, each layer's, the embedding's: `embedding` says whether the
      step holds it, a later pipeline stage does not) after that piece's last kernel; the first
      GPU task after the backward waits for the last of them (DDP's end-of-backward wait
      before the optimizer). With `zero` >= 2 (ZeRO-2/3, FSDP) each is a reduce-scatter.
    - `sp` (sequence parallelism, with `tp`): each TP all-reduce is a reduce-scatter followed
      by an all-gather at the same place.
    - `extra`: more GPU tasks to insert in the same pass (`gpu_sharding`).

    Each collective takes its prototype kernel's row (device) with the collective's kind and
    name and no launch call (it waits for the prototype through an edge; the CPU time of
    issuing it is not modelled); its duration comes from the communication model
    (`GpuModel.durations`)."""
    b = ed.base
    kern = _kernels(step, ed)
    role, block = step.role[b], step.block[b]
    adds: list[Insert] = []
    if tp:
        last: dict[tuple[int, int], int] = {}
        for i in np.flatnonzero(kern & (ed.layer >= 0)).tolist():
            fwd = int(block[i]) in BLOCK_FWD
            if int(role[i]) in (TP_SUM_FORWARD if fwd else TP_SUM_BACKWARD):
                last[(int(ed.copy[i]), int(role[i]))] = i
        for i in last.values():
            adds += [Insert(i, Coll.SP_RS), Insert(i, Coll.SP_AG)] if sp else [Insert(i, Coll.TP)]
    if dp and ed.back:
        proc = np.asarray(ed.tasks.column("proc").to_numpy(), np.int64)
        comm = int(proc.max()) + 1  # DDP's communication stream: a processor of its own
        dp_adds: list[Insert] = []
        seen_layer = False
        for c in ed.back[-1]:
            idx = np.flatnonzero((ed.copy == c) & kern & (ed.piece != int(Piece.RECOMPUTED)))
            if not idx.size:
                continue
            if (ed.layer[idx] >= 0).any():
                code, seen_layer = Coll.DP_LAYER, True
            else:
                code = Coll.DP_EMBED if seen_layer else Coll.DP_HEAD
            dp_adds.append(Insert(int(idx.max()), code, proc=comm))
        if embedding and dp_adds and not any(a.code == Coll.DP_EMBED for a in dp_adds):
            # the embedding's backward ran inside the last layer's piece: its bucket goes last
            dp_adds.append(Insert(dp_adds[-1].at, Coll.DP_EMBED, proc=comm))
        if dp_adds:
            # the first GPU task after the backward waits for the last bucket
            after = np.flatnonzero(kern & (np.arange(b.shape[0]) > dp_adds[-1].at))
            dp_adds[-1].then = int(after[0]) if after.size else -1
        if zero >= 2:
            for a in dp_adds:
                a.code = RS_OF[a.code]
        adds += dp_adds
    adds += extra or []
    return insert_tasks(step, ed, adds)


@dataclass
class Insert:
    """A GPU task `insert_tasks` adds: a collective of kind `code` placed right after task `at`
    (right before it with `before`), waiting for `at` (or for `after` when given), on `at`'s
    processor or `proc`; `then`: a task that waits for it."""

    at: int
    code: Coll
    proc: int = -1
    before: bool = False
    after: int = -1
    then: int = -1


def _kernels(step: GpuStep, ed: EditedStep) -> np.ndarray:
    """Which tasks of `ed` are kernels (collectives included)."""
    b = ed.base
    return step.is_gpu[b] & np.isin(step.kind[b], (int(Kind.GPU_KERNEL), int(Kind.COLLECTIVE)))


_COLL_NAMES = {
    Coll.TP: TP_NAME,
    Coll.DP_HEAD: DP_NAME,
    Coll.DP_LAYER: DP_NAME,
    Coll.DP_EMBED: DP_NAME,
    Coll.PP: PP_NAME,
    Coll.RS_HEAD: RS_NAME,
    Coll.RS_LAYER: RS_NAME,
    Coll.RS_EMBED: RS_NAME,
    Coll.ZERO_GATHER: "AllGather (ZeRO parameters, modelled)",
    Coll.Z3_GATHER_FWD: "AllGather (ZeRO-3 layer parameters, modelled)",
    Coll.Z3_GATHER_BWD: "AllGather (ZeRO-3 layer parameters, modelled)",
    Coll.SP_RS: "ReduceScatter (sequence parallel, modelled)",
    Coll.SP_AG: "AllGather (sequence parallel, modelled)",
    Coll.VP_LOSS: "AllReduce (vocab-parallel cross-entropy, modelled)",
    Coll.VP_EMBED: "AllReduce (vocab-parallel embedding, modelled)",
    Coll.VP_HEAD: "AllReduce (vocab-parallel LM head gradient, modelled)",
}


def insert_tasks(step: GpuStep, ed: EditedStep, adds: list[Insert]) -> EditedStep:
    """`ed` with the GPU tasks `adds` describe. Each takes its anchor's row (device, stream)
    with the collective kind, the name of its `Coll` and no launch call; ids are renumbered so
    that every processor keeps its order."""
    if not adds:
        return ed
    n = ed.base.shape[0]
    # each add's position: after its anchor (before the next task), or before it
    key = sorted(range(len(adds)), key=lambda k: (adds[k].at + (0 if adds[k].before else 1), k))
    src_row: list[int] = []
    coll: list[int] = []
    which: list[int] = []  # per new row: the add it is, -1 for an old task
    new_of_old = np.empty(n, np.int64)
    j = 0
    for i in range(n + 1):
        while j < len(key) and adds[key[j]].at + (0 if adds[key[j]].before else 1) == i:
            a = adds[key[j]]
            src_row.append(a.at)
            coll.append(int(a.code))
            which.append(key[j])
            j += 1
        if i < n:
            new_of_old[i] = len(src_row)
            src_row.append(i)
            coll.append(int(Coll.NONE) if ed.coll is None else int(ed.coll[i]))
            which.append(-1)
    rows = np.array(src_row, np.int64)
    coll_a = np.array(coll, np.int64)
    which_a = np.array(which, np.int64)
    new = np.flatnonzero(which_a >= 0)
    t = ed.tasks.take(pa.array(rows))
    old_launch = np.asarray(ed.tasks.column("launch_src").to_numpy(zero_copy_only=False))
    launch = old_launch[rows]
    # an added task has no launch call of its own in the graph (a call launches one GPU task):
    # it follows its anchor through an edge
    launch = np.where((launch >= 0) & (which_a < 0), new_of_old[np.maximum(launch, 0)], -1)
    proc = np.array(t.column("proc").to_numpy(), np.int64)
    stream = np.array(t.column("stream").fill_null(-1).to_numpy(), np.int64)
    kind = np.array(t.column("kind").to_numpy(), np.int64)
    ts = np.array(t.column("ts_ns").to_numpy(), np.int64)
    names = t.column("name").to_pylist()
    streams = {int(p): int(st) for p, st in zip(proc, stream, strict=True)}
    for r in new.tolist():
        a = adds[int(which_a[r])]
        if a.proc >= 0:
            proc[r] = a.proc
            stream[r] = streams.get(a.proc, int(stream.max()) + 1)
            streams[a.proc] = int(stream[r])
        kind[r] = int(Kind.COLLECTIVE)
        ts[r] = 0  # no traced time to start from
        names[r] = _COLL_NAMES[a.code]
    t = _set(t, "task", np.arange(rows.shape[0], dtype=np.int64))
    t = _set(t, "launch_src", launch)
    # an event sync names its record task by id: renumbered too
    mode = np.asarray(t.column("rt_mode").to_numpy(), np.int64)
    arg = np.asarray(t.column("rt_arg").fill_null(-1).to_numpy(), np.int64)
    event = (mode == int(Rt.EVENT)) & (arg >= 0)
    t = _set(t, "rt_arg", np.where(event, new_of_old[np.maximum(arg, 0)], arg))
    t = _set(t, "proc", proc)
    t = _set(t, "stream", stream)
    t = _set(t, "kind", kind)
    t = _set(t, "ts_ns", ts)
    if "ext_wait_ns" in t.column_names:
        # a modelled collective waits for nothing outside the graph (not its anchor's wait)
        waits = np.asarray(t.column("ext_wait_ns").fill_null(0).to_numpy(), np.int64)
        t = _set(t, "ext_wait_ns", np.where(which_a >= 0, 0, waits))
        i = t.schema.get_field_index("wait_cause")
        old = t.column(i).to_pylist()
        causes = [None if w >= 0 else c for w, c in zip(which_a, old, strict=True)]
        t = t.set_column(i, t.schema.field(i), pa.array(causes, t.schema.field(i).type))
    i = t.schema.get_field_index("name")
    t = t.set_column(i, t.schema.field(i), pa.array(names, t.schema.field(i).type))
    d = ed.deps
    e_s = new_of_old[np.asarray(d.column("src").to_numpy(), np.int64)].tolist()
    e_d = new_of_old[np.asarray(d.column("dst").to_numpy(), np.int64)].tolist()
    e_k = d.column("kind").to_pylist()
    for r in new.tolist():
        a = adds[int(which_a[r])]
        src = a.after if a.after >= 0 else a.at
        if not (a.before and a.after < 0):  # placed before its anchor, it waits for nothing
            e_s.append(int(new_of_old[src]))
            e_d.append(r)
            e_k.append("stream_wait")
        if a.then >= 0:
            e_s.append(r)
            e_d.append(int(new_of_old[a.then]))
            e_k.append("stream_wait")
    deps = pa.table(
        {
            "src": pa.array(e_s, pa.int64()),
            "dst": pa.array(e_d, pa.int64()),
            "kind": pa.array(e_k, pa.string()),
        }
    )
    return EditedStep(
        ed.base[rows],
        ed.copy[rows],
        ed.layer[rows],
        t,
        deps,
        ed.piece[rows],
        ed.back,
        coll_a,
        ed.sections,
        None if ed.stage is None else ed.stage[rows],
    )
