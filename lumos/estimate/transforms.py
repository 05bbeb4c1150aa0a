"""Graph transforms: from a base job's template to the task graph of another configuration.

`build(tpl, structure)` regenerates the step of `lumos.estimate.template`'s template for a target
*structure* (layers, pipeline degree and schedule, micro-batches, tensor-parallel degree) and
returns an `EditedGraph`: a `kernels.graph.ReplayGraph` plus, per task, the class its duration
follows. Durations that only depend on sizes are filled per configuration by `durations()`, so
many configurations of one structure replay in one batch. DP and TP replicas run the same
program, so one processor per pipeline stage is simulated (plus one for its DP all-reduces).
What each transform (layers, pp, micro-batches, recompute, tp, dp) does to the graph:
docs/estimate.md, "Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.graph import ReplayGraph, csr_from_edges
from lumos.estimate.config import RECOMPUTE
from lumos.estimate.memory import stage_layers
from lumos.estimate.template import BLOCK, ROLE, ROLES, Template

N_ROLES = len(ROLES)
SCHEDULES = ("1f1b", "gpipe")


# the largest step graph the estimator builds: ~300 bytes a task at its peak (arrays, the
# replay's state), so ~1.5 GB; 20M let `layers=140000` pass 6 GB. A 128-layer model
# with 32 micro-batches is ~2.5M tasks on a GPU step graph
MAX_TASKS = 5_000_000


class TransformError(ValueError):
    """The target structure cannot be built from the template (names what is missing)."""


@dataclass(frozen=True)
class Structure:
    """What changes the graph's shape (configurations sharing it replay in one batch)."""

    layers: int
    pp: int = 1
    num_micro_batches: int = 1
    pp_schedule: str = "1f1b"
    tp: int = 1
    dp: int = 1
    # activation checkpointing: "full" replays each layer's forward before its backward,
    # "selective" only its attention core (Megatron's); the template holds neither
    recompute: str = "none"
    cpu_scale: float = 1.0  # contention of the target's world vs the base's (scales CPU gaps)
    # per stage, the optimizer's parameter tensors vs the base's (scales the optimizer's gaps:
    # a for-loop optimizer's Python time between its per-tensor ops); empty: unchanged
    opt_scale: tuple[float, ...] = ()


def n_classes(pp: int) -> int:
    """Duration classes: roles, optimizer per stage, TP all-reduce, DP all-reduce of the last
    bucket per stage, p2p recv, p2p send, DP all-reduce of the earlier buckets per stage."""
    return N_ROLES + 3 * pp + 3


def cls_opt(stage: int) -> int:
    return N_ROLES + stage


def cls_tp_ar(pp: int) -> int:
    return N_ROLES + pp


def cls_dp_ar(pp: int, stage: int) -> int:
    return N_ROLES + pp + 1 + stage


def cls_recv(pp: int) -> int:
    return N_ROLES + 2 * pp + 1


def cls_send(pp: int) -> int:
    return N_ROLES + 2 * pp + 2


def cls_dp_early(pp: int, stage: int) -> int:
    return N_ROLES + 2 * pp + 3 + stage


@dataclass(frozen=True, eq=False)
class EditedGraph:
    """A regenerated graph; per task: template op (-1 for a new task), duration class, stage."""

    structure: Structure
    graph: ReplayGraph
    tpl_idx: np.ndarray
    cls: np.ndarray
    stage: np.ndarray
    phase: np.ndarray  # 0 forward, 1 backward, 2 optimizer, 3 communication, 4 other

    @property
    def n_tasks(self) -> int:
        return self.graph.n_tasks


PHASES = ("forward", "backward", "optimizer", "communication", "other")


class _Blocks:
    """Index arrays of the template's blocks, by micro-batch and layer."""

    def __init__(self, tpl: Template) -> None:
        self.tpl = tpl
        mbs = sorted({int(m) for m in tpl.mb[tpl.mb >= 0]})
        if not mbs:
            raise TransformError(f"{tpl.job}: the template has no micro-batch")
        self.mbs = mbs
        layers = sorted({int(x) for x in tpl.layer[tpl.block == BLOCK["f_layer"]]})
        if not layers:
            raise TransformError(f"{tpl.job}: the template has no annotated layer (layer_<i>)")
        self.layers = layers
        ids = np.arange(tpl.n)
        self._cache: dict[tuple[str, int, int], np.ndarray] = {}
        self._pieces: dict[tuple[str, int, int], tuple[list[np.ndarray], np.ndarray]] = {}
        for key in ("head", "opt", "tail"):
            self._cache[(key, -1, -1)] = ids[tpl.block == BLOCK[key]]
        for m in mbs:
            for key in ("f_pre", "f_post", "b_post", "b_pre"):
                self._cache[(key, m, -1)] = ids[(tpl.block == BLOCK[key]) & (tpl.mb == m)]
            for ly in layers:
                for key in ("f_layer", "b_layer"):
                    sel = (tpl.block == BLOCK[key]) & (tpl.mb == m) & (tpl.layer == ly)
                    self._cache[(key, m, ly)] = ids[sel]

    def get(self, key: str, mb: int = -1, layer: int = -1) -> np.ndarray:
        m = self.mbs[mb % len(self.mbs)] if mb >= 0 else -1
        ly = self.layers[layer % len(self.layers)] if layer >= 0 else -1
        return self._cache[(key, m, ly)]

    def attention(self, mb: int, layer: int) -> np.ndarray:
        """A layer's forward attention-core ops (what selective recomputation replays)."""
        ids = self.get("f_layer", mb, layer)
        return ids[self.tpl.role[ids] == ROLE["attn"]]

    def tp_split(self, key: str, mb: int, layer: int) -> tuple[list[np.ndarray], np.ndarray]:
        """A layer block cut after each GEMM a TP all-reduce follows (see `_layer_with_tp`):
        the pieces that end with such a GEMM, and the rest."""
        m, ly = self.mbs[mb % len(self.mbs)], self.layers[layer % len(self.layers)]
        got = self._pieces.get((key, m, ly))
        if got is None:
            ids = self._cache[(key, m, ly)]
            bwd = key == "b_layer"
            after = (
                (ROLE["gemm_qkv"], ROLE["gemm_up"])
                if bwd
                else (ROLE["gemm_out"], ROLE["gemm_down"])
            )
            cut = _run_ends(self.tpl.role[ids], after, transparent=(ROLE["param_l"],))
            starts = np.concatenate([[0], cut + 1])[: cut.size].astype(int)
            pieces = [ids[a : c + 1] for a, c in zip(starts, cut, strict=True)]
            rest = ids[cut[-1] + 1 :] if cut.size else ids
            got = self._pieces[(key, m, ly)] = (pieces, rest)
        return got


def _run_ends(role: np.ndarray, roles: tuple[int, ...], transparent: tuple[int, ...]) -> np.ndarray:
    """Positions of the last op of each run of one role in `roles`, where ops of a
    `transparent` role do not break a run. One linear's backward is such a run (view, addmm/mm,
    transpose backward, with the weight's AccumulateGrad interleaved): it takes one all-reduce."""
    ends: list[int] = []
    cur, last = -1, -1
    for i, r in enumerate(role.tolist()):
        if r in transparent:
            continue
        if r != cur and last >= 0:
            ends.append(last)
            last = -1
        cur = r
        if r in roles:
            last = i
    if last >= 0:
        ends.append(last)
    return np.array(ends, np.int64)


def _schedule(kind: str, stage: int, pp: int, m: int) -> list[tuple[str, int]]:
    """The order of forward ('F', mb) and backward ('B', mb) work on one pipeline stage."""
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if kind != "1f1b":
        raise TransformError(f"pp_schedule must be one of {SCHEDULES}, got {kind!r}")
    warm = min(pp - stage - 1, m)
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", i) for i in range(m - warm, m)]
    return order


_NEW = np.array([-1], np.int64)  # the template index of a task the transform adds


class _Stage:
    """Accumulates one stage's program (template id arrays or new tasks) in processor order.

    Segments are only recorded here (a few list appends each: a 50k-task graph has thousands);
    `_assemble` derives the per-task arrays in one vectorised pass."""

    def __init__(self) -> None:
        self.tpl: list[np.ndarray] = []
        self.seg_cls: list[int] = []  # a new task's class; for template ops: the optimizer class
        self.seg_phase: list[int] = []
        self.seg_comm: list[bool] = []  # on the stage's communication processor
        self.edges: list[tuple[int, int]] = []  # (src local, dst local) within the stage
        self.n = 0
        self.marks: dict[tuple[str, int], int] = {}  # ('send_F', mb) -> local index

    def add_tpl(self, ids: np.ndarray, phase: int, opt_cls: int) -> None:
        if ids.size == 0:
            return
        self.tpl.append(ids)
        self.seg_cls.append(opt_cls)
        self.seg_phase.append(phase)
        self.seg_comm.append(False)
        self.n += ids.size

    def add_new(self, cls: int, phase: int, comm: bool = False) -> int:
        self.tpl.append(_NEW)
        self.seg_cls.append(cls)
        self.seg_phase.append(phase)
        self.seg_comm.append(comm)
        self.n += 1
        return self.n - 1

    def add_comm(self, cls: int) -> int:
        """A task on the stage's communication processor that starts after the last task added
        so far (on the main processor)."""
        i = self.add_new(cls, 3, comm=True)
        if i > 0:
            self.edges.append((i - 1, i))
        return i


def _layer_with_tp(
    st: _Stage, b: _Blocks, key: str, mb: int, layer: int, tp: int, pp: int, phase: int
) -> None:
    """Add one layer's ops; with tp > 1 an all-reduce after the row-parallel forward GEMMs
    (out, down) or the column-parallel backward GEMMs (qkv, up)."""
    if tp <= 1:
        st.add_tpl(b.get(key, mb, layer), phase, -1)
        return
    pieces, rest = b.tp_split(key, mb, layer)
    ar = cls_tp_ar(pp)
    for piece in pieces:
        st.add_tpl(piece, phase, -1)
        st.add_new(ar, 3)
    st.add_tpl(rest, phase, -1)


def build(tpl: Template, s: Structure, *, blocks: _Blocks | None = None) -> EditedGraph:
    """The graph of one step of structure `s`, regenerated from the template."""
    if s.layers < s.pp:
        raise TransformError(f"layers {s.layers} fewer than pipeline stages {s.pp}")
    if s.pp_schedule not in SCHEDULES:
        raise TransformError(f"pp_schedule must be one of {SCHEDULES}, got {s.pp_schedule!r}")
    if s.recompute not in RECOMPUTE:
        raise TransformError(f"recompute must be one of {RECOMPUTE}, got {s.recompute!r}")
    b = blocks or _Blocks(tpl)
    per_layer = b.get("f_layer", 0, 0).size * (2 if s.recompute == "full" else 1)
    n_tasks = s.num_micro_batches * s.layers * (per_layer + b.get("b_layer", 0, 0).size)
    if n_tasks > MAX_TASKS:
        raise TransformError(
            f"the step of layers={s.layers} x num_micro_batches={s.num_micro_batches} would be a "
            f"graph of ~{n_tasks:,} tasks (the base's layer has "
            f"{per_layer + b.get('b_layer', 0, 0).size}); the estimator builds at most "
            f"{MAX_TASKS:,} (memory grows with it, ~300 bytes a task)"
        )
    counts = stage_layers(s.layers, s.pp)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    stages = [_Stage() for _ in range(s.pp)]
    # cross-stage edges: (src stage, src local, dst stage, dst local)
    xedges: list[tuple[int, int, int, int]] = []
    pending: dict[tuple[str, int, int], tuple[int, int]] = {}  # (dir, mb, dst stage) -> send
    recv_at: dict[tuple[str, int, int], tuple[int, int]] = {}
    M, P = s.num_micro_batches, s.pp
    for si, st in enumerate(stages):
        st.add_tpl(b.get("head"), 4, -1)
        order = _schedule(s.pp_schedule, si, P, M)
        last_b = max(k for k, (kind, _) in enumerate(order) if kind == "B")
        for k, (kind, mb) in enumerate(order):
            if kind == "F":
                if si > 0:
                    recv_at[("F", mb, si)] = (si, st.add_new(cls_recv(P), 3))
                if si == 0:
                    st.add_tpl(b.get("f_pre", mb), 0, -1)
                for j in range(first[si], first[si] + counts[si]):
                    _layer_with_tp(st, b, "f_layer", mb, j, s.tp, P, 0)
                if si == P - 1:
                    st.add_tpl(b.get("f_post", mb), 0, -1)
                else:
                    pending[("F", mb, si + 1)] = (si, st.add_new(cls_send(P), 3))
            else:
                if si < P - 1:
                    recv_at[("B", mb, si)] = (si, st.add_new(cls_recv(P), 3))
                if si == P - 1:
                    st.add_tpl(b.get("b_post", mb), 1, -1)
                for j in reversed(range(first[si], first[si] + counts[si])):
                    if s.recompute == "full":
                        _layer_with_tp(st, b, "f_layer", mb, j, s.tp, P, 1)
                    elif s.recompute == "selective":
                        st.add_tpl(b.attention(mb, j), 1, -1)
                    _layer_with_tp(st, b, "b_layer", mb, j, s.tp, P, 1)
                    if s.dp > 1 and k == last_b and j == first[si] + counts[si] - 1:
                        st.add_comm(cls_dp_early(P, si))  # buckets but the last
                if si == 0:
                    st.add_tpl(b.get("b_pre", mb), 1, -1)
                else:
                    pending[("B", mb, si - 1)] = (si, st.add_new(cls_send(P), 3))
        if s.dp > 1:
            last = st.add_comm(cls_dp_ar(P, si))  # the last bucket, exposed
            st.edges.append((last, last + 1))  # the optimizer (or the step's end) waits
        st.add_tpl(b.get("opt"), 2, cls_opt(si))
        st.add_tpl(b.get("tail"), 4, -1)
        end = st.add_new(ROLE["const"], 4)  # the idle end of the step (delay only)
        st.marks[("end", 0)] = end
    for key, (src_stage, src_local) in pending.items():
        dst_stage, dst_local = recv_at[key]
        xedges.append((src_stage, src_local, dst_stage, dst_local))
    return _assemble(tpl, s, stages, xedges)


def _assemble(
    tpl: Template, s: Structure, stages: list[_Stage], xedges: list[tuple[int, int, int, int]]
) -> EditedGraph:
    off = np.concatenate([[0], np.cumsum([st.n for st in stages])]).astype(np.int64)
    n = int(off[-1])
    tpl_idx = np.concatenate([a for st in stages for a in st.tpl]).astype(np.int64)
    seg_len = np.array([a.size for st in stages for a in st.tpl], np.int64)
    seg_cls = np.repeat(np.array([c for st in stages for c in st.seg_cls], np.int64), seg_len)
    phase = np.repeat(np.array([p for st in stages for p in st.seg_phase], np.int8), seg_len)
    has = tpl_idx >= 0
    role = np.where(has, tpl.role[np.maximum(tpl_idx, 0)], 0).astype(np.int64)
    # template ops follow their role's class; the optimizer's follow their stage's; new tasks
    # carry theirs
    cls = np.where(has, role, seg_cls)
    cls = np.where(has & (phase == 2) & (role == ROLE["opt"]), seg_cls, cls)
    stage = np.repeat(np.arange(len(stages), dtype=np.int64), np.diff(off))
    on_comm = np.repeat(np.array([c for st in stages for c in st.seg_comm], bool), seg_len)
    n_procs = len(stages) * (2 if on_comm.any() else 1)
    proc = stage + len(stages) * on_comm
    gap = np.where(tpl_idx >= 0, tpl.gap_ns[np.maximum(tpl_idx, 0)], 0).astype(np.float64)
    if s.opt_scale:
        gap = np.where(has & (phase == 2), gap * np.asarray(s.opt_scale)[stage], gap)
    delay = np.rint(gap * s.cpu_scale).astype(np.int64)
    for si, st in enumerate(stages):
        delay[off[si] + st.marks[("end", 0)]] = round(tpl.end_gap_ns * s.cpu_scale)
    xedges = xedges + [(si, a, si, d) for si, st in enumerate(stages) for a, d in st.edges]
    if xedges:
        x = np.array(xedges, np.int64)
        src = off[x[:, 0]] + x[:, 1]
        dst = off[x[:, 2]] + x[:, 3]
    else:
        src = dst = np.zeros(0, np.int64)
    ptr, dsrc, dlat = csr_from_edges(n, src, dst)
    graph = ReplayGraph.build(
        proc=proc,
        dur_ns=np.zeros(n, np.int64),
        proc_device=np.full(n_procs, -1, np.int64),
        dep_ptr=ptr,
        dep_src=dsrc,
        dep_lat_ns=dlat,
        delay_ns=delay,
        source=f"{tpl.job} -> {s}",
    )
    return EditedGraph(s, graph, tpl_idx.astype(np.int64), cls.astype(np.int64), stage, phase)


def durations(
    eg: EditedGraph,
    fixed: np.ndarray,
    var: np.ndarray,
    mult: np.ndarray,
    add: np.ndarray,
    fscale: np.ndarray | None = None,
    gscale: np.ndarray | None = None,
) -> np.ndarray:
    """Task durations for C configurations:
    ``fixed * fscale[c, cls] + var * mult[c, cls] + add[c, cls] + delay * gscale[c]``.

    ``fixed``/``var`` are per template op; ``mult``/``add``/``fscale`` are (C, n_classes(pp));
    ``gscale`` (C,) lengthens the idle gap before each task by that share of its traced delay
    (`idle_gaps`): the gap's change is carried by the task after it, which ends at the same
    moment either way.
    """
    t = eg.tpl_idx
    has = t >= 0
    f = np.where(has, fixed[np.maximum(t, 0)], 0).astype(np.float64)
    v = np.where(has, var[np.maximum(t, 0)], 0).astype(np.float64)
    fs = 1.0 if fscale is None else fscale[:, eg.cls]
    out = f[None, :] * fs + v[None, :] * mult[:, eg.cls] + add[:, eg.cls]
    if gscale is not None:
        out = out + eg.graph.delay_ns.astype(np.float64)[None, :] * gscale[:, None]
    return to_ns(out)


def to_ns(out: np.ndarray) -> np.ndarray:
    """Durations (configurations x tasks, float ns) as int64 ns, rounded, at least 0. A replay
    adds a step's durations up in int64: a duration beyond 2^62 / tasks (a size or a speed-up
    extrapolated far out of range, or not finite) raises instead of wrapping around."""
    limit = float(1 << 62) / max(out.shape[-1], 1)
    if not (np.isfinite(out) & (out < limit)).all():
        worst = float(np.nanmax(np.where(np.isfinite(out), out, np.inf)))
        raise TransformError(
            f"a task would last {worst:.3g} ns, more than the {limit:.3g} ns a step of "
            f"{out.shape[-1]:,} tasks can add up to: the configuration is out of range "
            "(its sizes or speed-ups)"
        )
    return np.ascontiguousarray(np.maximum(np.rint(out), 0).astype(np.int64))
