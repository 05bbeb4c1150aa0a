"""Estimate a GPU training step from its trace's execution graph: edit, re-time, replay.

1. The base step (`gpu_step.load_gpu_step`): one traced step's graph with its labels.
2. The edit (`gpu_edit.edit_step`): layers, micro-batches and recomputation as graph pieces.
3. Re-timing: CPU tasks keep their traced durations less the profiler's cost (`profiler_cost`);
   a GPU task follows its class (`kernel_work`).
4. Replay (`kernels.replay`): the step is the makespan of the edited graph.

`GpuModel` keeps one edited graph per structure, so a sweep replays every configuration of a
structure in one batch. Details: docs/estimate-gpu.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from kernels.graph import Kind, ReplayGraph
from lumos.estimate.comm import CommModel
from lumos.estimate.config import ModelConfig
from lumos.estimate.gpu_edit import Coll, EditedStep, EditError, Piece, edit_step, identity_edit
from lumos.estimate.gpu_pipeline import pipeline_constants, pipeline_step
from lumos.estimate.gpu_sharding import add_parallel
from lumos.estimate.gpu_speedup import speedup_divisor
from lumos.estimate.gpu_step import BLOCK_BWD, GpuStep
from lumos.estimate.kernel_work import (
    KClass,
    attention_head_factor,
    fit_gemm,
    named_sizes,
    size_ratio,
)
from lumos.estimate.memory import embedding_params, head_params, params_per_layer, stage_layers
from lumos.estimate.profiler_cost import CPU_EVENT_NS, PROFILER_EVENT_NS, unprofiled_cpu_ns
from lumos.estimate.retime import features, stage_param_counts, stage_tensor_counts
from lumos.estimate.template import BLOCK, PATH, ROLE
from lumos.estimate.throughput import exp_rate_of, peak_flops_of
from lumos.estimate.waits import ScaledWaits, has_peer_waits, scaled_waits
from lumos.replay.build import build_graph

__all__ = ["GpuEstimate", "GpuModel", "KERNEL_FIXED_QUANTILE", "estimate_step"]

# the share of a kernel's duration that does not scale with its shapes: the step's lower decile
# of kernel durations (a kernel that short is launch- and tail-bound, whatever its size)
KERNEL_FIXED_QUANTILE = 0.1

# a checkpointed layer's forward costs this many times its plain forward's CPU time (ops and
# the Python between them): torch.utils.checkpoint's saved-tensor hooks and bookkeeping, learned
# from the two recompute runs of the H100 corpus (docs/estimate-gpu.md)
CHECKPOINT_FORWARD_CPU = 2.0

# layers, micro-batches, recompute ("none", "selective", "full"), TP, DP, pipeline stages,
# pipeline schedule, ZeRO stage (0 without DP), sequence parallelism and vocabulary parallelism
# (False without TP)
Structure = tuple[int, int, str, bool, bool, int, str, int, bool, bool]


# how much slower another process of the same host runs a CPU thread than the traced one, 8 in
# 10 times at most (and as much faster): the 90th percentile of the ratio of two runs' thread
# speeds (each thread's operators against the same operators' median over the runs), over the
# ordered pairs of the GPU corpus's runs of one family without recomputation (the ratios are
# symmetric, so the 10th is its inverse). A prediction's interval is the step replayed with its
# CPU tasks and idle gaps that much faster and slower (docs/estimate-gpu.md, "The interval").
THREAD_SPEED_SPREAD = 1.33
# the rows a configuration is replayed as: (profiler's cost taken out, CPU speed); the step
# without the profiler, with it, and the interval's two ends
_ROWS = ((1.0, 1.0), (0.0, 1.0), (1.0, 1.0 / THREAD_SPEED_SPREAD), (1.0, THREAD_SPEED_SPREAD))


@dataclass
class GpuEstimate:
    """One configuration's predicted step (unprofiled) and what it is made of."""

    predicted_ns: int
    traced_ns: int  # the same graph with the profiler's cost kept
    gpu_work_ns: int  # kernels, copies, memsets: on the busiest GPU (pipeline stage)
    cpu_busy_ns: int  # CPU tasks: on the busiest stage's threads
    n_tasks: int
    edited: EditedStep
    comm_ns: int = 0  # the collectives' time on the busiest GPU (overlapped or not)
    # the unprofiled step with the CPU threads THREAD_SPEED_SPREAD faster and slower
    interval_ns: tuple[int, int] = (0, 0)

    @property
    def profiler_share(self) -> float:
        """The share of the traced step that is the profiler's cost."""
        return 1.0 - self.predicted_ns / self.traced_ns if self.traced_ns else 0.0


class GpuModel:
    """Predicts configurations of one base from its GPU step (`base`: the step's configuration)."""

    def __init__(
        self,
        step: GpuStep,
        base: ModelConfig,
        *,
        event_ns: float | None = None,
        checkpoint_cpu: float = CHECKPOINT_FORWARD_CPU,
        comm: CommModel | None = None,
        fixed: str = "",
        device: str | None = None,
    ):
        self.step = step
        self.base = base
        # the device's tensor-core peak and exponential rate: a fused attention kernel's time
        # per score (`kernel_work.attention_head_factor`); None each where it is not known
        self.rates = (peak_flops_of(device), exp_rate_of(device))
        # why only the base's own structure can be predicted (its step as it ran, speed-ups
        # and the profiler's cost aside): a step whose layers are not found; "" edits freely
        self.fixed = fixed
        self.comm = comm or CommModel.default("gpu")
        # the profiler's cost per recorded event: with CUDA activity, or CPU activity alone (a
        # CPU trace's step: no GPU task)
        if event_ns is None:
            event_ns = PROFILER_EVENT_NS if step.is_gpu.any() else CPU_EVENT_NS
        self.event_ns = event_ns
        self.checkpoint_cpu = checkpoint_cpu
        kernels = step.is_gpu & (step.kind != int(Kind.GPU_WAIT))
        self._fixed_cap = (
            float(np.quantile(step.dur_ns[kernels], KERNEL_FIXED_QUANTILE))
            if kernels.any()
            else 0.0
        )
        gemm = step.k_class == int(KClass.GEMM)
        self.gemm_fixed_ns, self.gemm_ns_per_flop = fit_gemm(
            step.dur_ns[gemm], step.k_flops[gemm], step.k_op[gemm]
        )
        # a GEMM operator's fixed part, shared over its kernels by their time
        op_t = np.zeros(max(int(step.k_op.max()) + 1, 1) if step.n else 1)
        has = step.k_op >= 0
        np.add.at(op_t, step.k_op[has], step.dur_ns[has])
        share = np.where(has, step.dur_ns / np.maximum(op_t[np.maximum(step.k_op, 0)], 1), 1.0)
        # fused attention kernels are tensor-core matrix products too: the same fixed part
        mm = gemm | (step.k_class == int(KClass.ATTENTION))
        self._gemm_fixed = np.where(mm, self.gemm_fixed_ns * share, 0.0)
        self._base_feat = _features(base)
        self._base_sizes = named_sizes(base)
        # the distinct input sizes of the kernels that follow their operator's input
        self._sized = step.is_gpu & (step.k_class == int(KClass.OTHER)) & (step.k_elems > 0)
        # the distinct (elements, dimensions, attention side) of their inputs, each sized once
        # per configuration
        path = np.maximum(step.path, 0)
        keys, at = np.unique(
            np.stack([step.k_elems, step.k_ndim, path], axis=1), axis=0, return_inverse=True
        )
        self._elems = [(int(e), int(d), int(p)) for e, d, p in keys]
        self._elems_at = at.reshape(-1)
        # the separate Q, K and V projections' GEMMs, each by its own width (grouped-query
        # attention narrows K and V only)
        qkv = (step.k_class == int(KClass.GEMM)) & (step.role == ROLE["gemm_qkv"])
        self._q_gemm = qkv & (step.path == PATH["queries"])
        self._kv_gemm = qkv & (step.path == PATH["keys_values"])
        # the layers' residual-stream kernels (norms, residual adds, dropout: element-wise, under a
        # tokens x hidden operator) that sequence parallelism runs on seq / tp tokens
        resid = (
            self._sized
            & (step.layer >= 0)
            & (step.role == ROLE["tok_h"])
            & (step.path <= PATH["none"])  # not a head-split tensor (a rotary embedding's)
        )
        self._seq_tok_h = resid & (step.k_elems == self._base_sizes["tok_h"])
        self._seq_tokens = resid & (step.k_elems == self._base_sizes["tokens"])
        self._graphs: dict[Structure, tuple[EditedStep, ReplayGraph]] = {}
        self._scaled: dict[Structure, ScaledWaits | None] = {}
        self._cpu_f: dict[Structure, np.ndarray] = {}

    def _cpu_factor(self, ed: EditedStep, s: Structure) -> np.ndarray:
        """Per task of structure `s`'s edited step, the factor on its CPU time and idle gap:
        checkpointing's (`_checkpoint_factor`) and the optimizer's. The optimizer's CPU (its
        foreach ops and their launches, the per-parameter Python of its step) runs over the
        parameter tensors the rank updates, so it grows as their count does (per pipeline
        stage, `retime.stage_tensor_counts`); its kernels follow the parameters' bytes."""
        got = self._cpu_f.get(s)
        if got is None:
            counts = stage_tensor_counts(replace(self.base, layers=s[0], pp=s[5]))
            ratio = np.array(counts) / stage_tensor_counts(self.base)[0]
            stage = ed.stage if ed.stage is not None else np.zeros(ed.base.shape[0], np.int64)
            st = self.step
            opt = ~st.is_gpu[ed.base] & (st.block[ed.base] == BLOCK["opt"])
            got = self._cpu_f[s] = self._checkpoint_factor(ed) * np.where(opt, ratio[stage], 1.0)
        return got

    def _checkpoint_factor(self, ed: EditedStep) -> np.ndarray:
        """Per task of the edited step, the factor on its CPU time (and idle gap) that
        checkpointing gives: a layer's forward under checkpointing costs `checkpoint_cpu` times
        the plain one's, so a checkpointed base's forward without it costs that much less."""
        cpu = ~self.step.is_gpu[ed.base]
        c = self.checkpoint_cpu
        f = np.where(ed.piece == int(Piece.CHECKPOINTED), c, 1.0)
        # a checkpointed base's forward, run without checkpointing: as taken out of it, or
        # copied from it to be recomputed (selective recomputation from a fully checkpointed base)
        plain = [int(Piece.UNCHECKPOINTED)]
        if self.base.recompute == "full":
            plain.append(int(Piece.RECOMPUTED))
        return np.where(cpu, np.where(np.isin(ed.piece, plain), 1.0 / c, f), 1.0)

    def structure(self, cfg: ModelConfig) -> Structure:
        schedule = cfg.pp_schedule if cfg.pp > 1 else ""
        return (
            cfg.layers,
            cfg.num_micro_batches,
            cfg.recompute,
            cfg.tp > 1,
            cfg.dp > 1,
            cfg.pp,
            schedule,
            cfg.zero_stage if cfg.dp > 1 else 0,
            cfg.sequence_parallel and cfg.tp > 1,
            cfg.vocab_parallel and cfg.tp > 1,
        )

    def graph(self, s: Structure) -> tuple[EditedStep, ReplayGraph]:
        """The edited step of a structure and its replay graph (the base's CPU idle gaps as the
        CPU tasks' delays), built once."""
        got = self._graphs.get(s)
        if got is None:
            st, b = self.step, self.base
            consts = st.constants
            if self.fixed:
                if s != self.structure(b):
                    raise EditError(
                        f"{st.job}: {self.fixed}: only speed-ups (speedup.<class>=N) can be "
                        "estimated from its step as it ran"
                    )
                ed = identity_edit(st)
            elif s[5] > 1:
                ed = pipeline_step(
                    st,
                    s[0],
                    s[1],
                    b.layers,
                    b.num_micro_batches,
                    stages=s[5],
                    schedule=s[6],
                    recompute=s[2],
                    base_recompute=b.recompute != "none",
                    tp=s[3],
                    dp=s[4],
                    zero=s[7],
                    sp=s[8],
                    vp=s[9],
                )
                consts = pipeline_constants(consts, s[5])
            else:
                ed = edit_step(
                    st,
                    s[0],
                    s[1],
                    b.layers,
                    b.num_micro_batches,
                    recompute=s[2],
                    base_recompute=b.recompute != "none",
                )
                ed = add_parallel(st, ed, tp=s[3], dp=s[4], zero=s[7], sp=s[8], vp=s[9])
            tasks = ed.tasks
            i = tasks.schema.get_field_index("gap_ns")
            gap = st.gap_ns[ed.base] * self._cpu_factor(ed, s)
            tasks = tasks.set_column(i, tasks.schema.field(i), _arrow(np.rint(gap)))
            g = build_graph(tasks, ed.deps, consts, mode="model", source=st.job)
            got = self._graphs[s] = (ed, g)
        return got

    def delays(self, s: Structure, dur_ns: np.ndarray) -> np.ndarray | None:
        """The replay delays of structure `s`'s graph for durations `dur_ns` (configs x tasks):
        its collectives' waits for untraced peers scaled with the compute before them
        (`lumos.estimate.waits`); None when it has none (the graph's own delays stand)."""
        if s not in self._scaled:
            ed, _ = self.graph(s)
            sw = None
            if has_peer_waits(self.step.tasks):
                ed0, _ = self.graph(self.structure(self.base))
                base_dur = self.durations(ed0, self.base, 0.0)
                sw = scaled_waits(ed.tasks, ed.base, ed.stage, ed0.tasks, ed0.base, base_dur)
            self._scaled[s] = sw
        sw = self._scaled[s]
        return None if sw is None else sw.delays(self.graph(s)[1].delay_ns, dur_ns)

    def durations(
        self,
        ed: EditedStep,
        cfg: ModelConfig,
        event_ns: float,
        speed: Mapping[str, float] | None = None,
        cpu_speed: float = 1.0,
    ) -> np.ndarray:
        """Durations of the edited step's tasks for `cfg` (the profiler's cost taken out of the
        CPU tasks at `event_ns` per recorded event), the GPU tasks of each class in `speed`
        (``speedup.<class>=N``) N times faster (`gpu_speedup`), the CPU tasks' times
        `cpu_speed` times theirs (another process's threads: the interval)."""
        st, b = self.step, ed.base
        dur = st.dur_ns[b].astype(np.float64)
        stage_of = ed.stage if ed.stage is not None else np.zeros(b.shape[0], np.int64)
        r = self.work_ratio(ed, cfg)
        mm = np.isin(st.k_class[b], (int(KClass.GEMM), int(KClass.ATTENTION)))
        fixed = np.minimum(dur, np.where(mm, self._gemm_fixed[b], self._fixed_cap))
        gpu_dur = np.where(st.kind[b] == int(Kind.GPU_WAIT), dur, fixed + (dur - fixed) * r)
        cpu_dur = unprofiled_cpu_ns(dur, st.n_events[b], event_ns)
        cpu_dur = cpu_dur * self._cpu_factor(ed, self.structure(cfg)) * cpu_speed
        out = np.where(st.is_gpu[b], gpu_dur, cpu_dur)
        if ed.coll is not None:
            for code, ns in self.collective_ns(cfg).items():
                out[ed.coll == code] = ns
            gather = ed.coll == int(Coll.ZERO_GATHER)
            out[gather] = zero_gather_ns(cfg, self.comm.spanning(cfg.dp, cfg.tp))[stage_of[gather]]
        if speed:
            out = out / speedup_divisor(st, ed, speed)
        return np.rint(out).astype(np.int64)

    def work_ratio(self, ed: EditedStep, cfg: ModelConfig) -> np.ndarray:
        """Per task of the edited step, how the work of its GPU task grows from the base to
        `cfg`: its role's feature ratio (GEMMs: FLOPs; per pipeline stage, its optimizer's
        parameters), an element-wise kernel's by the named size of its operator's input
        (`size_ratio`), sequence parallelism's and the head size's on top."""
        st, b = self.step, ed.base
        fb = np.where(self._base_feat > 0, self._base_feat, 1.0)
        # per pipeline stage: its optimizer updates its own parameters
        ratio = np.stack(
            [
                np.where(self._base_feat > 0, _features(cfg, stage) / fb, 1.0)
                for stage in range(cfg.pp)
            ]
        )
        role = st.role[b]
        stage_of = ed.stage if ed.stage is not None else np.zeros(b.shape[0], np.int64)
        r = np.where(role >= 0, ratio[stage_of, np.maximum(role, 0)], 1.0)
        sizes = named_sizes(cfg)
        base = self._base_sizes
        for mask, key in ((self._q_gemm, "tok_q"), (self._kv_gemm, "tok_kv")):
            # FLOPs: tokens x hidden x the projection's width
            grow = sizes[key] * sizes["hidden"] / (base[key] * base["hidden"])
            r = np.where(mask[b], grow, r)
        # element-wise work on a tensor of a named size grows as that size does
        by_size = np.array([size_ratio(e, base, sizes, d, p) or np.nan for e, d, p in self._elems])
        rs = by_size[self._elems_at][b]
        r = np.where(self._sized[b] & ~np.isnan(rs), rs, r)
        if cfg.sequence_parallel and cfg.tp > 1:
            r = self._sequence_split(r, b, sizes, cfg.tp)
        if cfg.head_size != self.base.head_size:
            r = self._head_size(r, b, cfg.head_size)
        return r

    def _head_size(self, r: np.ndarray, b: np.ndarray, d: int) -> np.ndarray:
        """`r` with the fused attention kernels' FLOPs ratio turned into their time's at head
        size `d` (`attention_head_factor`: the softmax's exponentials do not grow with it)."""
        st = self.step
        peak, exp = self.rates
        fwd, bwd = (
            attention_head_factor(
                self.base.head_size, d, backward=back, peak_flops=peak, exp_rate=exp
            )
            for back in (False, True)
        )
        attn = st.k_class[b] == int(KClass.ATTENTION)
        return np.where(attn, r * np.where(np.isin(st.block[b], BLOCK_BWD), bwd, fwd), r)

    def _sequence_split(
        self, r: np.ndarray, b: np.ndarray, sizes: dict[str, float], tp: int
    ) -> np.ndarray:
        """`r` with the layers' residual-stream kernels on seq / tp tokens (sequence
        parallelism): their named size's ratio over `tp`."""
        base = self._base_sizes
        for mask, key in ((self._seq_tok_h, "tok_h"), (self._seq_tokens, "tokens")):
            r = np.where(mask[b], sizes[key] / base[key] / tp, r)
        return r

    def collective_ns(self, cfg: ModelConfig) -> dict[int, float]:
        """The time of each kind of collective `add_collectives` puts in cfg's step: a TP
        all-reduce of one micro-batch's activations (synchronous: the stream waits), DDP's
        all-reduces of the gradients of a layer, the LM head and the embedding (fp32 gradients
        under autocast), or ZeRO-2/3's reduce-scatters of them, ZeRO-3's all-gathers of a
        layer's parameters (fp32 under autocast, as the rank holds them), sequence
        parallelism's reduce-scatter and all-gather of the activations and vocabulary
        parallelism's all-reduces, from the communication model (ZeRO's all-gather after the
        optimizer: `zero_gather_ns`), each group's over the links its ranks span."""
        tp_c = self.comm.spanning(cfg.tp)
        c = self.comm.spanning(cfg.dp, cfg.tp)
        pp_c = self.comm.spanning(2, cfg.tp * cfg.dp)
        acts = float(cfg.micro_batch * cfg.seq * cfg.hidden * cfg.dtype_bytes)
        grad = 4.0 if cfg.autocast else float(cfg.dtype_bytes)
        layer = grad * params_per_layer(cfg, cfg.tp)
        head = grad * head_params(cfg, cfg.tp, with_embedding=cfg.pp == 1)
        embed = grad * embedding_params(cfg, cfg.tp)
        exposed = c.exposed_wait_ns if cfg.dp > 1 else 0.0
        # the parallel cross-entropy's per-token fp32 values
        per_token = 4.0 * cfg.micro_batch * cfg.seq
        return {
            int(Coll.PP): pp_c.p2p_ns(acts),
            int(Coll.TP): tp_c.allreduce_ns(acts, cfg.tp, sync=True),
            int(Coll.SP_RS): tp_c.reduce_scatter_ns(acts, cfg.tp, sync=True),
            int(Coll.SP_AG): tp_c.all_gather_ns(acts, cfg.tp, sync=True),
            int(Coll.VP_LOSS): tp_c.allreduce_ns(per_token, cfg.tp, sync=True),
            int(Coll.VP_EMBED): (
                tp_c.reduce_scatter_ns(acts, cfg.tp, sync=True)
                if cfg.sequence_parallel
                else tp_c.allreduce_ns(acts, cfg.tp, sync=True)
            ),
            int(Coll.VP_HEAD): tp_c.allreduce_ns(acts, cfg.tp, sync=True),
            int(Coll.RS_LAYER): c.reduce_scatter_ns(layer, cfg.dp),
            int(Coll.RS_HEAD): c.reduce_scatter_ns(head, cfg.dp),
            int(Coll.RS_EMBED): c.reduce_scatter_ns(embed, cfg.dp) + exposed,
            int(Coll.Z3_GATHER_FWD): c.all_gather_ns(layer, cfg.dp),
            int(Coll.Z3_GATHER_BWD): c.all_gather_ns(layer, cfg.dp),
            int(Coll.DP_LAYER): c.allreduce_ns(grad * params_per_layer(cfg, cfg.tp), cfg.dp),
            int(Coll.DP_HEAD): c.allreduce_ns(
                grad * head_params(cfg, cfg.tp, with_embedding=cfg.pp == 1), cfg.dp
            ),
            int(Coll.DP_EMBED): c.exposed_allreduce_ns(
                grad * embedding_params(cfg, cfg.tp), cfg.dp
            ),
        }

    def collective_notes(self, cfg: ModelConfig) -> list[str]:
        """What the communication model said of the sizes cfg's collectives ask (a group
        without a curve of its own, a size outside the benchmarks), for cfg alone."""
        self.comm.take_asked()
        self.collective_ns(cfg)
        if cfg.zero_stage >= 1 and cfg.dp > 1:
            zero_gather_ns(cfg, self.comm.spanning(cfg.dp, cfg.tp))
        return self.comm.take_asked()

    def predict(
        self,
        cfgs: Sequence[ModelConfig],
        speedups: Sequence[Mapping[str, float]] | None = None,
        *,
        interval: bool = False,
    ) -> tuple[np.ndarray, ...]:
        """Predicted steps (ns) of many configurations (each with its speed-ups), without the
        profiler and as a trace would record them (its cost kept), and with `interval` the
        step's bounds (`THREAD_SPEED_SPREAD`): one batched replay per structure."""
        from kernels.replay import replay_sweep

        speed = list(speedups) if speedups else [{}] * len(cfgs)
        rows = _ROWS if interval else _ROWS[:2]
        out = np.zeros((len(rows), len(cfgs)), np.int64)
        groups: dict[Structure, list[int]] = {}
        for i, c in enumerate(cfgs):
            groups.setdefault(self.structure(c), []).append(i)
        for s, idx in groups.items():
            ed, g = self.graph(s)
            dur = np.stack(
                [
                    self.durations(ed, cfgs[i], self.event_ns * un, speed[i], cpu)
                    for un, cpu in rows
                    for i in idx
                ]
            )
            delay = self._row_delays(s, ed, g, dur, [cpu for _, cpu in rows for _ in idx])
            makespan = replay_sweep(g, dur, delay_ns=delay, parallel=len(idx) > 1)
            out[:, idx] = makespan.reshape(len(rows), len(idx))
        return tuple(out)

    def _row_delays(
        self, s: Structure, ed: EditedStep, g: ReplayGraph, dur: np.ndarray, cpu: list[float]
    ) -> np.ndarray | None:
        """The replay delays of each row of `dur` (`delays`), the CPU tasks' idle gaps scaled
        by the row's CPU speed; None where every row keeps the graph's own."""
        delay = self.delays(s, dur)
        if all(c == 1.0 for c in cpu):
            return delay
        base = delay if delay is not None else np.broadcast_to(g.delay_ns, dur.shape)
        on_cpu = ~self.step.is_gpu[ed.base]
        factor = np.where(on_cpu[None, :], np.asarray(cpu)[:, None], 1.0)
        return np.rint(base * factor).astype(np.int64)

    def explain(self, cfg: ModelConfig, speed: Mapping[str, float] | None = None) -> GpuEstimate:
        """One configuration (with its speed-ups), with the same graph replayed with the
        profiler's cost kept."""
        from kernels.replay import replay_sweep

        s = self.structure(cfg)
        ed, g = self.graph(s)
        dur = np.stack([self.durations(ed, cfg, self.event_ns * un, speed, c) for un, c in _ROWS])
        delay = self._row_delays(s, ed, g, dur, [c for _, c in _ROWS])
        pred, traced, lo, hi = (
            int(x) for x in replay_sweep(g, dur, delay_ns=delay, parallel=False)
        )
        gpu = self.step.is_gpu[ed.base]
        busy = gpu & (self.step.kind[ed.base] != int(Kind.GPU_WAIT))
        comm = ed.coll >= 0 if ed.coll is not None else np.zeros(gpu.shape, bool)
        stage = ed.stage if ed.stage is not None else np.zeros(gpu.shape, np.int64)

        def busiest(mask: np.ndarray) -> int:
            """The most any one pipeline stage (one GPU and its threads) spends on `mask`."""
            return int(np.bincount(stage[mask], weights=dur[0][mask]).max()) if mask.any() else 0

        return GpuEstimate(
            predicted_ns=pred,
            traced_ns=traced,
            gpu_work_ns=busiest(busy & ~comm),
            cpu_busy_ns=busiest(~gpu),
            n_tasks=int(ed.base.shape[0]),
            edited=ed,
            comm_ns=busiest(comm),
            interval_ns=(lo, hi),
        )


def _features(cfg: ModelConfig, stage: int = 0) -> np.ndarray:
    """`retime.features` with the optimizer's feature the parameters the rank of pipeline
    stage `stage` updates, embedding and LM head included where it holds them (a single-GPU
    base holds the whole model); under ZeRO (stage >= 1, dp > 1) its 1/dp shard of them."""
    shard = cfg.dp if cfg.zero_stage >= 1 and cfg.dp > 1 else 1
    return features(cfg, stage_param_counts(cfg)[stage] / shard)


def zero_gather_ns(cfg: ModelConfig, comm: CommModel) -> np.ndarray:
    """Per pipeline stage, ZeRO's all-gather after the optimizer: the updated parameters of
    the stage (fp32 under autocast), all of them under ZeRO-1/2, under ZeRO-3 those no layer
    gathers for itself (the embedding and the LM head: FSDP's root unit)."""
    w = 4.0 if cfg.autocast else float(cfg.dtype_bytes)
    counts = np.array(stage_param_counts(cfg))
    if cfg.zero_stage >= 3:
        counts -= np.array(stage_layers(cfg.layers, cfg.pp)) * params_per_layer(cfg, cfg.tp)
    return np.array([comm.all_gather_ns(w * n, cfg.dp) for n in counts])


def _arrow(values: np.ndarray):  # noqa: ANN202
    import pyarrow as pa

    return pa.array(np.asarray(values, np.int64), pa.int64())


def estimate_step(
    step: GpuStep,
    base: ModelConfig,
    cfg: ModelConfig,
    *,
    event_ns: float | None = None,
) -> GpuEstimate:
    """Predict `cfg`'s step (without the profiler) from the base step of configuration `base`
    (`event_ns`: the profiler's cost per event, the step's kind's constant when None)."""
    return GpuModel(step, base, event_ns=event_ns).explain(cfg)
