"""Base job + target configurations -> edited graphs -> numba replay -> predictions.

`Estimator.open(warehouse, job, base_overrides)` loads (or builds and caches) the job's template
and inferred base configuration; `predict(targets)` groups the targets by graph structure, builds
each structure's graph once, compresses it (`compress`), fills a (configs x runs) duration matrix
and replays it with `kernels.replay.replay_sweep`; `explain(target)` replays one configuration's
full graph with its schedule and returns the breakdown. The interval starts from the base run's
own step spread and widens with the shape ratios and what the calibration jobs showed.
``speedup.<class>=N`` divides that class's durations by N (roles of `template.ROLES`, ``gemm``,
``token``, ``comm``, ``all``). How the interval is built: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from lumos.estimate.gpu_step import GpuStep

from lumos.estimate.calibration import Calibration
from lumos.estimate.comm import CommModel
from lumos.estimate.compress import CompressedGraph, compress
from lumos.estimate.config import ConfigError, ModelConfig, parse_overrides
from lumos.estimate.contention import ANOTHER_HOST, Contention
from lumos.estimate.gemm_curve import GemmCurve, role_gemms
from lumos.estimate.gpu_notes import gpu_collective_note
from lumos.estimate.idle_gaps import IdleGaps
from lumos.estimate.memory import MemoryEstimate, estimate_memory
from lumos.estimate.op_times import OpTimes
from lumos.estimate.profiler_cost import PROFILER_EVENT_NS
from lumos.estimate.retime import (
    GEMM_ROLES,
    TOKEN_ROLES,
    attention_compute_share,
    attention_ratio,
    base_features,
    base_opt_tensors,
    extrapolation,
    features,
    split_fixed,
    stage_param_counts,
    stage_tensor_counts,
)
from lumos.estimate.slope_law import activations_kept, state_of
from lumos.estimate.template import (
    BLOCK,
    LAYER_BLOCKS,
    ROLE,
    ROLES,
    Template,
    TemplateError,
    extract_template,
    manifest_stamp,
    shape_roles,
    template_dir,
    template_path,
)
from lumos.estimate.transforms import (
    N_ROLES,
    PHASES,
    EditedGraph,
    Structure,
    TransformError,
    build,
    cls_dp_ar,
    cls_dp_early,
    cls_opt,
    cls_recv,
    cls_send,
    cls_tp_ar,
    durations,
    n_classes,
)
from lumos.estimate.working_set import WorkingSet
from lumos_sql.taxonomy import is_grad_accumulation
from warehouse.location import local_warehouse

SPEEDUP_PREFIX = "speedup."
# Bumped whenever the cached template or calibration files change shape (2: Template.elems), so a
# warehouse's old cache is rebuilt instead of read wrongly.
CACHE_FORMAT = 56
# the cache folder of a single-GPU base's step graph
GPU_STEP_DIR = "gpu_step"
# the cache file saying why a job's template could not be built (until the next ingest)
REFUSED = "refused.json"
# the largest speed-up (or slow-down) a what-if may ask of a kernel class: beyond it the step is
# its idle gaps alone (speedup.all=1e308 predicted 5.9 ms for a 60 ms step)
MAX_SPEEDUP = 1000.0
# merging a 50k-task graph's runs costs about as much as replaying it 3 times
MERGE_MIN = 4
FAMILIES = {
    "gemm": GEMM_ROLES,
    "token": TOKEN_ROLES,
    "comm": (),
    "all": (),
}


@dataclass
class Prediction:
    """One configuration's estimate."""

    config: ModelConfig
    predicted_ns: int
    interval_ns: tuple[int, int]
    memory_bytes: int
    fits: bool | None
    warnings: list[str] = field(default_factory=list)
    breakdown: dict[str, int] | None = None
    speedups: dict[str, float] = field(default_factory=dict)
    # CPU cores the ranks were taken to share (given, or as the base's recorder wrote); None:
    # unknown, no time-sharing modelled
    host_cores: int | None = None
    # the step as a trace of it would record it (the profiler's cost kept) where predicted_ns
    # is the step without the profiler (a GPU base); None: predicted_ns is the traced figure
    traced_ns: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "speedups": dict(self.speedups),
            "host_cores": self.host_cores,
            "predicted_ns": self.predicted_ns,
            "traced_ns": self.traced_ns,
            "interval_ns": list(self.interval_ns),
            "breakdown": self.breakdown,
            "memory_bytes": self.memory_bytes,
            "fits": self.fits,
            "warnings": list(self.warnings),
        }


def _covered(start: np.ndarray, end: np.ndarray) -> int:
    """The time (ns) covered by the union of the intervals [start, end)."""
    if start.size == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    # an interval opens a new run when it starts after every earlier one has ended
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    runs = np.flatnonzero(new)
    run_end = np.maximum.reduceat(e, runs)
    return int((run_end - s[runs]).sum())


def split_speedups(
    items: Sequence[str] | Mapping[str, Any] | None, where: str
) -> tuple[dict[str, Any], dict[str, float]]:
    """Separate ``speedup.<class>=N`` entries from configuration keys (typed by parse_overrides)."""
    pairs: list[tuple[str, str]] = []
    if isinstance(items, Mapping):
        pairs = [(str(k), str(v)) for k, v in items.items()]
    elif items:
        for item in items:
            if "=" not in item:
                raise ConfigError(f"{where}: expected key=value, got {item!r}")
            k, _, v = item.partition("=")
            pairs.append((k.strip(), v.strip()))
    speed: dict[str, float] = {}
    rest: dict[str, str] = {}
    seen: set[str] = set()
    for k, v in pairs:
        if k in seen:  # a dict below would keep the last silently
            raise ConfigError(f"{where}: {k} given twice")
        seen.add(k)
        if k.startswith(SPEEDUP_PREFIX):
            cls = k[len(SPEEDUP_PREFIX) :]
            if cls not in ROLES and cls not in FAMILIES:
                known = ", ".join(sorted(set(ROLES) | set(FAMILIES)))
                raise ConfigError(f"{where}: unknown kernel class {cls!r} in {k} (known: {known})")
            try:
                speed[cls] = float(v)
            except ValueError:
                raise ConfigError(f"{where}: {k} must be a number, got {v!r}") from None
            if not (speed[cls] > 0 and math.isfinite(speed[cls])):
                raise ConfigError(f"{where}: {k} must be a finite number > 0, got {v!r}")
            if not 1 / MAX_SPEEDUP <= speed[cls] <= MAX_SPEEDUP:
                raise ConfigError(
                    f"{where}: {k} must be between 1/{MAX_SPEEDUP:g} and {MAX_SPEEDUP:g} (a "
                    f"kernel class {MAX_SPEEDUP:g}x faster or slower is a typo, not a what-if), "
                    f"got {v!r}"
                )
        else:
            rest[k] = v
    return parse_overrides(rest, where), speed


def _speed_vector(speed: Mapping[str, float], pp: int) -> np.ndarray:
    out = np.ones(n_classes(pp))
    comm = [cls_tp_ar(pp), cls_recv(pp), cls_send(pp)]
    comm += [cls_dp_ar(pp, s) for s in range(pp)] + [cls_dp_early(pp, s) for s in range(pp)]
    for name, f in speed.items():
        if name == "all":
            out /= f
        elif name == "comm":
            out[comm] /= f
        elif name in FAMILIES:
            out[[ROLE[r] for r in FAMILIES[name]]] /= f
        elif name == "opt":
            out[[cls_opt(s) for s in range(pp)]] /= f
        else:
            out[ROLE[name]] /= f
    return out


class Estimator:
    """Predicts configurations of one base job."""

    def __init__(
        self,
        tpl: Template,
        base: ModelConfig,
        comm: CommModel,
        base_notes: list[str],
        contention: Contention | None = None,
        gemms: GemmCurve | None = None,
        ops: OpTimes | None = None,
        working_set: WorkingSet | None = None,
        gaps: IdleGaps | None = None,
    ):
        if base.pp != 1:
            base_notes = [
                *base_notes,
                f"base job has pp={base.pp}: the template is rank {tpl.rank}'s stage only",
            ]
        # a tensor subclass's dispatch (DTensor's TP) is per call: the ops' shape laws are fitted
        # on the rest, and it is added back, unscaled by shapes, where the target has TP ranks
        self.tpl = tpl
        self.subclass = np.minimum(tpl.subclass_ns, tpl.dur_ns).astype(np.int64)
        if self.subclass.any():
            tpl = dataclasses.replace(tpl, dur_ns=tpl.dur_ns - self.subclass)
        self._plain = tpl  # the ops without the subclass's dispatch
        self.base = base
        self.comm = comm
        self.contention = contention or Contention(notes=["contention not modelled"])
        self.base_notes = base_notes
        self._layer_warning = _layer_mismatch(tpl, base)
        fixed, self.overheads = split_fixed(tpl, base)
        self.fixed = fixed
        self.var = tpl.dur_ns - fixed
        self.base_feat = base_features(base)
        self.base_tensors = base_opt_tensors(base)
        self.attn_share = attention_compute_share(tpl, base, fixed)
        self.gemms = gemms or GemmCurve.from_dict(None)
        # three forward QKV ops per layer and micro-batch: Q, K and V are separate linears
        qkv = (tpl.role == ROLE["gemm_qkv"]) & (tpl.bwd == 0)
        units = _units(tpl, qkv)
        self._separate_qkv = units > 0 and int(qkv.sum()) >= 3 * units
        self._base_gemms = role_gemms(base, self._separate_qkv)
        self._gemm_base = self._gemm_roles()
        # a TP base's collectives: those inside its layers price the re-created all-reduces
        # (`_tp_allreduce`); those outside them (DTensor's all-reduces of partial gradients in
        # the optimizer, a vocabulary-parallel head's) no transform re-creates, so they stay with
        # their ops where the target has TP ranks, like the subclass's dispatch
        self._tp_comm, self.tp_outside = _tp_collectives(tpl, base)
        self.ops = ops or OpTimes.from_dict(None)
        self._attn_ops = self._attention_ops()
        self.working_set = working_set or WorkingSet.from_dict(None)
        self.gaps = gaps or IdleGaps.from_dict(None)
        self._base_state = state_of(base)
        # a GPU base's step graph (`gpu_estimate`): a single-GPU base's, edited for every target;
        # a multi-rank base's first rank's, for its own configuration only (`rank_only` says why)
        self.gpu: GpuStep | None = None
        self.rank_only = ""
        self.device_name: str | None = None  # its device (the collectives' link)
        self.warehouse_root: Path | None = None  # where its device's micro-benchmarks may be
        self._gpu = None  # its GpuModel, made on first use
        self._scale: float | None = None  # `_profiler_scale`, computed on first use
        # why a recomputing base's recomputation cannot be left out ("" when it can; None: not
        # looked at yet)
        self._no_uncheckpoint: str | None = None
        self._graphs: dict[Structure, EditedGraph] = {}
        self._compressed: dict[Structure, CompressedGraph] = {}
        # the roles the template has (interval and warnings look at these only)
        self._roles_used = np.unique(tpl.role).astype(np.int64)
        self._used_mask = np.zeros(len(ROLES), bool)
        self._used_mask[self._roles_used] = True
        self._used_mask[ROLE["const"]] = False
        med = float(np.median(tpl.step_ns))
        self.spread = (
            float(np.min(tpl.step_ns)) / med if med else 1.0,
            float(np.max(tpl.step_ns)) / med if med else 1.0,
        )

    # --- opening -------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        root: str | Path | None,
        job: str,
        base_overrides: Mapping[str, Any] | None = None,
        on_build: Callable[[str], None] | None = None,
        host_cores: int | None = None,
        host_cores_from: str = "--host-cores",
    ) -> Estimator:
        """The estimator of `job` in the warehouse at `root`. The template, the inferred base and
        what the calibration jobs teach are cached beside each other (`template_dir`), stamped with the
        manifest's parts: any ingest since (of this job or of others, which change the calibration jobs)
        rebuilds them. Once cached, opening touches neither DuckDB nor the catalog (a single
        estimate stays well under a second). `on_build` is told, before the cache is built
        (seconds on a large warehouse), what is being learned. `host_cores`: the CPU cores the
        base's host gave its ranks (ranks beyond them time-share them, `contention.Contention`); by
        default what the trace's recorder wrote (`lumos groundtruth` does), else the host
        prior's when the contention is the prior's, else unknown; `host_cores_from` names
        who gave them (warnings quote it)."""
        wh_root = local_warehouse(root)
        folder = template_path(wh_root, job).parent
        paths = {k: folder / f"{k}.json" for k in ("base", "comm")}
        stamp = manifest_stamp(wh_root)
        refused = _refused(folder, stamp)
        if refused:
            raise TemplateError(refused)
        fresh = template_path(wh_root, job).exists() and all(p.exists() for p in paths.values())
        cached_comm = json.loads(paths["comm"].read_text()) if fresh else {}
        if cached_comm.get("manifest") != stamp or cached_comm.get("format") != CACHE_FORMAT:
            if on_build is not None:
                on_build(
                    f"learning {job}'s template and what the warehouse's other jobs teach "
                    "(once per ingest)"
                )
            _build_cache(wh_root, job, stamp)
        tpl = Template.load(template_path(wh_root, job))
        cached = json.loads(paths["base"].read_text())
        c = json.loads(paths["comm"].read_text())
        comm = CommModel(
            c["alpha_ns"],
            c["bw_bytes_per_ns"],
            c["source"],
            c["notes"],
            c["sync_alpha_ns"],
            c.get("sync_notes", []),
            c.get("exposed_wait_ns", 0.0),
            c.get("exposed_notes", []),
        )
        base = ModelConfig(**cached["config"])
        unread = {k: why for k, why in cached["unread"].items() if k not in (base_overrides or {})}
        if unread:
            raise ConfigError(
                f"{job}: the trace does not tell the base's "
                + "; ".join(f"{k} ({why})" for k, why in unread.items())
                + ": give them with --base "
                + " ".join(f"{k}=N" for k in unread)
                + " (`lumos describe` shows what was read)"
            )
        if base_overrides:
            base = base.replace(**dict(base_overrides))
        base.validate("base configuration")
        contention = Contention.from_dict(c["contention"])
        recorded = int(cached.get("host_cores") or 0)
        if host_cores:
            contention = contention.with_cores(host_cores, f"given by {host_cores_from}")
        elif recorded:
            contention = contention.with_cores(
                recorded, f"as the trace's recorder wrote; {ANOTHER_HOST}"
            )
        gemms = GemmCurve.from_dict(c.get("gemms"))
        ops = OpTimes.from_dict(c.get("ops"))
        ws = WorkingSet.from_dict(c.get("working_set"))
        gaps = IdleGaps.from_dict(c.get("gaps"))
        est = cls(
            tpl, base, comm, list(cached.get("warnings", [])), contention, gemms, ops, ws, gaps
        )
        if (folder / GPU_STEP_DIR).is_dir():
            from lumos.estimate.gpu_step import GpuStep
            from lumos.estimate.throughput import job_device

            est.gpu = GpuStep.load(folder / GPU_STEP_DIR)
            if ModelConfig(**cached["config"]).world_size > 1:
                est.rank_only = (
                    f"a multi-rank base: its own configuration (with speed-ups) from the step "
                    f"graph of rank {est.gpu.rank} as it ran; any other from the CPU-operator "
                    "template, scaled to the step without the profiler"
                )
            est.device_name = job_device(root, job).name
            est.warehouse_root = wh_root
        return est

    # --- per configuration arrays --------------------------------------------------------------
    def _coeffs(
        self, cfg: ModelConfig, speed: Mapping[str, float]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str], float]:
        """(mult, add, fscale, role ratio, GEMM shapes the curve extrapolates to) over the
        duration classes of cfg's structure, and the share by which its idle gaps grow
        (`transforms.durations`' gscale)."""
        pp = cfg.pp
        nc = n_classes(pp)
        ratio = features(cfg) / self.base_feat
        ratio[ROLE["attn"]] = attention_ratio(cfg, self.base, self.attn_share)
        mult = np.ones(nc)
        mult[:N_ROLES] = ratio
        mult[ROLE["const"]] = 1.0
        gemm_mult, beyond = self._gemm_mult(cfg)
        for code, m in gemm_mult.items():
            mult[code] = m
        if self._attn_ops is not None:
            mult[ROLE["attn"]] = self._attention_mult(cfg)
        stage_params = stage_param_counts(cfg)
        base_opt = self.base_feat[ROLE["opt"]]
        for s in range(pp):
            mult[cls_opt(s)] = stage_params[s] / base_opt
        add = np.zeros(nc)
        tokens_bytes = cfg.micro_batch * cfg.seq * cfg.hidden * cfg.dtype_bytes
        add[cls_tp_ar(pp)] = self._tp_allreduce(cfg, tokens_bytes)
        for s in range(pp):
            early, last = ddp_buckets(stage_params[s] * cfg.dtype_bytes)
            add[cls_dp_early(pp, s)] = self.comm.allreduce_ns(early, cfg.dp) if early else 0.0
            add[cls_dp_ar(pp, s)] = self.comm.exposed_allreduce_ns(last, cfg.dp)
        add[cls_recv(pp)] = self.comm.p2p_ns(tokens_bytes)
        add[cls_send(pp)] = self.comm.send_ns()
        # collectives are CPU work of the ranks too: time-shared when they outnumber the cores
        add *= self.contention.time_share(_world(cfg))
        sp = _speed_vector(speed, pp)
        # ranks sharing the device slow every CPU op (not the modelled collectives)
        cpu = np.ones(nc)
        # and a larger training state slows them too (caches: working_set.py), at the speed
        # the calibration jobs' runs say a new run has
        cpu[:N_ROLES] = cpu[[cls_opt(s) for s in range(pp)]] = (
            self.cpu_scale(cfg) * self._state_scale(cfg)[0] * self.working_set.run_speed
        )
        # the optimizer's per-call parts follow its parameter tensors, its per-element parts
        # (mult) its parameters
        calls = np.ones(nc)
        calls[[cls_opt(s) for s in range(pp)]] = self.opt_scale(cfg)
        gap = self._gap_scale(cfg)[0] - 1.0
        return mult * sp * cpu, add * sp, sp * cpu * calls, ratio, beyond, gap

    def _tp_allreduce(self, cfg: ModelConfig, tokens_bytes: float) -> float:
        """One re-created TP all-reduce of cfg. A TP base measured what its TP collectives cost
        its layers, whichever and however many its implementation calls (Megatron's 4 blocking
        all-reduces per layer; DTensor's functional ones, waited for ops later, 6 with separate
        Q, K, V projections; sequence parallelism's all-gathers and reduce-scatters): that,
        shared over the all-reduces the transforms re-create in the base's own configuration, is
        the base's price, and the collective model scales it to the target's message and group
        (and the cores it time-shares)."""
        model = self.comm.allreduce_ns(tokens_bytes, cfg.tp, sync=True)
        if self._tp_base is None:
            return model
        price, base_model = self._tp_base
        return price * model / base_model

    @functools.cached_property
    def _tp_base(self) -> tuple[float, float] | None:
        """The base's measured price of one re-created TP all-reduce (its layers' TP collectives
        over the all-reduces the transforms re-create in its own configuration, its cores'
        time-sharing taken out) and the collective model's price of the same; None when there is
        nothing to anchor on (no TP collectives in the layers, or the model prices them at 0)."""
        if self._tp_comm is None:
            return None
        b = self.base
        n = int(np.count_nonzero(self.graph(self.structure(b)).cls == cls_tp_ar(b.pp)))
        if not n:
            return None
        base_model = self.comm.allreduce_ns(
            b.micro_batch * b.seq * b.hidden * b.dtype_bytes, b.tp, sync=True
        )
        if base_model <= 0:
            return None
        return self._tp_comm / n / self.contention.time_share(_world(b)), base_model

    def _fixed(self, s: Structure) -> np.ndarray:
        """The ops' per-call parts in structure s: with a tensor subclass's dispatch and the
        base's TP collectives outside the layers where s has TP ranks (a trainer runs plain
        tensors without a TP group)."""
        return self.fixed + self.subclass + self.tp_outside if s.tp > 1 else self.fixed

    def _gemm_roles(self) -> dict[int, tuple[int, float, float]]:
        """Per GEMM role the calibration jobs' curve can re-time: (its units, variable ns, the curve's ns
        for one unit's multiplies, forward and backward) in the template. A unit is the role in
        one layer and micro-batch (the LM head: per micro-batch), however many ops the model
        splits it into: separate Q, K and V projections (LLaMA, Mistral, Qwen) or gate and up
        projections are one unit, as `role_gemms` writes it. A role whose traced ops are shorter
        than the multiplies the curve puts inside them does something else: it keeps its FLOP
        scaling."""
        if not self.gemms.usable:
            return {}
        out = {}
        for role, g in self._base_gemms.items():
            code = ROLE[role]
            m = self.tpl.role == code
            calls = _units(self.tpl, m & (self.tpl.bwd == 0))
            var = float(self.var[m].sum())
            if calls == 0 or var <= 0:
                continue
            per_call = sum(self.gemms.time(s)[0] for s in g.fwd + g.bwd)
            if per_call * calls > 1.25 * float(self._plain.dur_ns[m].sum()):
                continue
            out[code] = (calls, var, per_call)
        return out

    def _gemm_mult(self, cfg: ModelConfig) -> tuple[dict[int, float], list[str]]:
        """Multipliers of the GEMM roles' variable parts from the calibration jobs' curve: the traced
        multiplies (the curve's time for them, at most the role's variable time) grow by the
        curve's ratio of the target's to the base's (never below a quarter of it), and the
        shapes the curve extrapolates to."""
        if not self._gemm_base:
            return {}, []
        out: dict[int, float] = {}
        beyond: list[str] = []
        shapes = role_gemms(cfg, self._separate_qkv)
        for code, (calls, var, base_call) in self._gemm_base.items():
            g, g0 = shapes[ROLES[code]], self._base_gemms[ROLES[code]]
            new, old = g.fwd + g.bwd, g0.fwd + g0.bwd
            times = [self.gemms.time(s) for s in new]
            if len(old) == len(new):
                new_call = sum(
                    _within_flops(self.gemms.time(s0)[0], t, s0, s1)
                    for s0, s1, (t, _) in zip(old, new, times, strict=True)
                )
            else:
                new_call = sum(t for t, _ in times)
            beyond += [f"{s}" for s, (_, far) in zip(new, times, strict=True) if far]
            # the curve's ratio, applied to the traced multiplies' share of the variable time:
            # a set of calibration jobs recorded on a faster or slower day shifts the curve, not the
            # ratio
            share = min(calls * base_call, var) / var
            m = 1.0 + (new_call / base_call - 1.0) * share
            out[code] = max(m, 0.25 * new_call / base_call)
        return out, beyond

    def _attention_ops(self) -> tuple[list[tuple[str, float, float]], float, float] | None:
        """((op name, its fitted per-call ns at the base's shape, its ops' traced ns) per
        attention op name, the ops' fixed ns, their variable ns) of the template, when the calibration jobs
        fitted every one of them; else None (the roofline split of `attention_ratio` applies)."""
        idx = np.flatnonzero(self.tpl.role == ROLE["attn"])
        var = float(self.var[idx].sum())
        # a template built without op names (bench/sweep.py's synthetic one) has nothing to match
        if idx.size == 0 or var <= 0 or len(self.tpl.names) != len(self.tpl.role):
            return None
        traced: dict[str, float] = {}
        for i in idx:
            name = self.tpl.names[i]
            traced[name] = traced.get(name, 0.0) + float(self._plain.dur_ns[i])
        if not all(self.ops.has_attention(n) for n in traced):
            return None
        shape = _attention_shape(self.base)
        ops = [(n, self.ops.attention(n, shape), t) for n, t in traced.items()]
        if not all(f > 0 for _, f, _ in ops):
            return None
        return ops, float(self.fixed[idx].sum()), var

    def _attention_mult(self, cfg: ModelConfig) -> float:
        """Multiplier of attention's variable part: each traced op grows by the fitted ratio of
        cfg's shape to the base's (a ratio: a set of calibration jobs recorded on a faster or slower day shifts
        the fit, not the ratio)."""
        ops, fixed, var = self._attn_ops
        shape = _attention_shape(cfg)
        new = sum(t * self.ops.attention(n, shape) / f for n, f, t in ops)
        return max((new - fixed) / var, 0.05)

    def opt_scale(self, cfg: ModelConfig) -> tuple[float, ...]:
        """Per stage, parameter tensors of cfg's rank vs the template's (4 digits: a graph key)."""
        return tuple(round(t / self.base_tensors, 4) for t in stage_tensor_counts(cfg))

    def cpu_scale(self, cfg: ModelConfig) -> float:
        """Contention of cfg's world size relative to the base's (4 digits: a graph key)."""
        scale, _ = self.contention.scale(*self._worlds(cfg))
        return round(scale, 4)

    def _state_scale(self, cfg: ModelConfig) -> tuple[float, str | None]:
        """Working-set slowdown of cfg's CPU work relative to the base's, and its warning."""
        return self.working_set.scale(self._base_state[0], _state(cfg)[0])

    def _gap_scale(self, cfg: ModelConfig) -> tuple[float, str | None]:
        """Scale of the template's idle gaps for cfg (idle_gaps.py), and its warning."""
        return self.gaps.scale(self._base_state[1], _state(cfg)[1])

    def _worlds(self, cfg: ModelConfig) -> tuple[int, int, bool, bool]:
        """(base world, target world, base lock-step, target lock-step): TP ranks block on
        every linear's all-reduce, so they run in lock-step (contention.Contention)."""
        return _world(self.base), _world(cfg), self.base.tp > 1, cfg.tp > 1

    def structure(self, cfg: ModelConfig) -> Structure:
        return Structure(
            layers=cfg.layers,
            pp=cfg.pp,
            num_micro_batches=cfg.num_micro_batches,
            pp_schedule=cfg.pp_schedule,
            tp=cfg.tp,
            dp=1 if cfg.dp == 1 else 2,
            recompute=cfg.recompute,
            cpu_scale=self.cpu_scale(cfg),
            opt_scale=self.opt_scale(cfg),
        )

    def graph(self, s: Structure) -> EditedGraph:
        eg = self._graphs.get(s)
        if eg is None:
            eg = self._graphs[s] = build(self.tpl, s)
        return eg

    def compressed(self, s: Structure) -> CompressedGraph:
        """The graph of `s` with its runs merged (same makespans, ~100× fewer tasks)."""
        cg = self._compressed.get(s)
        if cg is None:
            cg = self._compressed[s] = compress(self.graph(s))
        return cg

    def _warnings(self, cfg: ModelConfig, ratio: np.ndarray, beyond: list[str]) -> list[str]:
        out = self._layer_warning + extrapolation(ratio, self._used_mask)
        if beyond:
            out.append(
                f"GEMM shape(s) (m, k, n) {', '.join(sorted(set(beyond)))} beyond those the "
                "calibration jobs measured on this device: their times are extrapolated"
            )
        if cfg.tp > 1 or cfg.dp > 1 or cfg.pp > 1:
            out += [n for n in self.comm.notes if n not in out]
        if cfg.tp > 1:
            out += [n for n in self.comm.sync_notes if n not in out]
        if cfg.dp > 1:
            out += [n for n in self.comm.exposed_notes if n not in out]
        if _world(cfg) != _world(self.base) or (cfg.tp > 1) != (self.base.tp > 1):
            _, warn = self.contention.scale(*self._worlds(cfg))
            out += warn + self.contention.borrowed
        if (
            self._attn_ops is not None
            and self.ops.borrowed
            and _attention_shape(cfg) != _attention_shape(self.base)
        ):
            out += [n for n in self.ops.notes if "host prior" in n and n not in out]
        for law, scale in ((self.working_set, self._state_scale), (self.gaps, self._gap_scale)):
            f, warn = scale(cfg)
            if warn:
                out.append(warn)
            if law.borrowed and abs(f - 1.0) > 1e-3:
                out += law.notes
        out += self.working_set.run_notes()
        if max(cfg.zero_stage, self.base.zero_stage) > 0:
            out.append(
                f"zero_stage {self.base.zero_stage} -> {cfg.zero_stage}: sharding (ZeRO, FSDP) "
                "is modelled by this CPU-operator template as the memory it saves (and the "
                "smaller working set); its all-gathers and reduce-scatters, and the sharded "
                "base's own, are not in the time (an FSDP2 job of 2 CPU ranks ran 1.9x the step "
                "predicted for its own configuration; a single-GPU base's step graph has them)"
            )
        if cfg.recompute != self.base.recompute:
            out.append(
                f"recompute {self.base.recompute} -> {cfg.recompute}: the replay of each layer's "
                "forward is modelled, not checkpointing's own bookkeeping (a Python hook per "
                "saved tensor, the reentrant autograd call), which added another 10-25 % to the "
                "step of small CPU models (tests/test_recompute.py): adding checkpointing is "
                "under-predicted, removing it over-predicted"
            )
        if self.subclass.any():
            share = float(self.subclass.sum()) / max(float(np.median(self.tpl.step_ns)), 1.0)
            kept = (
                "kept per call"
                if cfg.tp > 1
                else "left out: without a TP group the trainer runs plain tensors"
            )
            out.append(
                f"the base's ops run on DTensors (a tensor subclass: {100 * share:.0f} % of its "
                f"step is their Python dispatch): at tp={cfg.tp} that dispatch is {kept}"
            )
        if cfg.layers > 4 * self.base.layers:
            out.append(f"layers {cfg.layers} more than 4x the base's {self.base.layers}")
        return out

    def _interval(self, pred: int, ratio: np.ndarray, cfg: ModelConfig) -> tuple[int, int]:
        r = ratio[self._roles_used]
        r = r[r > 0]
        widen = 0.05 * float(np.max(np.abs(np.log2(r)))) if r.size else 0.0
        # contention varies between the calibration jobs of one world size: so may the target's
        c_lo, c_hi = self.contention.spread(*self._worlds(cfg))
        # and whole calibration jobs ran faster or slower than their state says
        w_lo, w_hi = self.working_set.interval_spread()
        lo = pred * self.spread[0] * c_lo * w_lo * (1 - min(widen, 0.5))
        hi = pred * self.spread[1] * c_hi * w_hi * (1 + widen)
        return int(math.floor(min(lo, pred))), int(math.ceil(max(hi, pred)))

    # --- predictions ---------------------------------------------------------------------------
    def predict(
        self,
        targets: Sequence[ModelConfig],
        speedups: Sequence[Mapping[str, float]] | None = None,
        *,
        chunk: int = 256,
        parallel: bool = True,
        compressed: bool | None = None,
    ) -> list[Prediction]:
        """Predictions for many configurations (replayed in batches by structure).

        Structures with at least `MERGE_MIN` targets replay their merged-run graph, others the
        full graph (merging costs about as much as replaying a few configurations); `compressed`
        forces one or the other (the makespans are the same; the tests and bench compare them)."""
        from kernels.replay import replay_sweep

        speedups = speedups or [{}] * len(targets)
        on_gpu = [i for i, cfg in enumerate(targets) if self._gpu_path(cfg, speedups[i])]
        gpu = (
            dict(
                zip(
                    on_gpu,
                    self._gpu_predict_many(
                        [targets[i] for i in on_gpu], [speedups[i] for i in on_gpu]
                    ),
                    strict=True,
                )
            )
            if on_gpu
            else {}
        )
        groups: dict[Structure, list[int]] = {}
        for i, cfg in enumerate(targets):
            if i not in gpu:
                groups.setdefault(self.structure(cfg), []).append(i)
        makespan = np.zeros(len(targets), np.int64)
        ratios: list[np.ndarray] = [np.ones(0)] * len(targets)
        beyond: list[list[str]] = [[]] * len(targets)
        for s, idx in groups.items():
            merge = len(idx) >= MERGE_MIN if compressed is None else compressed
            eg = self.compressed(s) if merge else self.graph(s)
            for a in range(0, len(idx), chunk):
                part = idx[a : a + chunk]
                co = [self._coeffs(targets[i], speedups[i]) for i in part]
                mult = np.stack([c[0] for c in co])
                add = np.stack([c[1] for c in co])
                fs = np.stack([c[2] for c in co])
                gs = np.array([c[5] for c in co])
                fixed = self._fixed(s)
                if merge:
                    dur = eg.durations(fixed, self.var, mult, add, fs, gs)
                else:
                    dur = durations(eg, fixed, self.var, mult, add, fs, gs)
                makespan[part] = replay_sweep(eg.graph, dur, parallel=parallel)
                for i, c in zip(part, co, strict=True):
                    ratios[i], beyond[i] = c[3], c[4]
        out = []
        for i, cfg in enumerate(targets):
            if i in gpu:
                out.append(gpu[i])
                continue
            mem = _memory(cfg)
            pred = int(makespan[i])
            keep = self._unprofiled if self.gpu is not None else _same
            out.append(
                keep(
                    Prediction(
                        config=cfg,
                        predicted_ns=pred,
                        interval_ns=self._interval(pred, ratios[i], cfg),
                        memory_bytes=int(mem.memory_bytes),
                        fits=mem.fits,
                        warnings=self._warnings(cfg, ratios[i], beyond[i]),
                        speedups=dict(speedups[i]),
                        host_cores=self.contention.cores or None,
                    )
                )
            )
        return out

    def explain(self, cfg: ModelConfig, speedup: Mapping[str, float] | None = None) -> Prediction:
        """One prediction with its breakdown (time per phase on the stage that ends last)."""
        if self._gpu_path(cfg, speedup):
            return self._gpu_predict(cfg, speedup or {})
        p = self._template_explain(cfg, speedup)
        return self._unprofiled(p) if self.gpu is not None else p

    def _unprofiled(self, p: Prediction) -> Prediction:
        """A CPU-template prediction of a single-GPU base (a target the GPU step graph does not
        model: no recomputation from a base whose recomputation is not found) scaled to the
        step without the profiler: by the base's own step, its GPU graph's (unprofiled) over
        the template's (traced), so that such an estimate and the GPU graph's agree at the
        base."""
        k = self._profiler_scale()
        parts = p.breakdown and {
            key: v if key == "critical_stage" else int(round(v * k))
            for key, v in p.breakdown.items()
        }
        why = self.rank_only or (
            "a change the GPU step graph does not model (no recomputation from a base whose "
            "backward does not show its layers' recomputation)"
        )
        note = (
            f"{why}: the CPU-operator template's estimate, scaled by {k:.3f} (the base's step "
            "without the profiler, from its GPU step graph, over the template's traced step)"
        )
        return dataclasses.replace(
            p,
            predicted_ns=int(round(p.predicted_ns * k)),
            traced_ns=p.predicted_ns,
            interval_ns=(int(p.interval_ns[0] * k), int(p.interval_ns[1] * k)),
            breakdown=parts,
            warnings=[
                note,
                *([self._no_uncheckpoint] if self._no_uncheckpoint else []),
                *p.warnings,
            ],
        )

    def _profiler_scale(self) -> float:
        if self._scale is None:
            template = self._template_explain(self.base, None).predicted_ns
            graph = int(self._gpu_model().predict([self.base])[0][0])
            self._scale = graph / template if template > 0 else 1.0
        return self._scale

    def _template_explain(
        self, cfg: ModelConfig, speedup: Mapping[str, float] | None = None
    ) -> Prediction:
        from lumos.estimate.chain import chain_replay

        s = self.structure(cfg)
        eg = self.graph(s)
        mult, add, fs, ratio, beyond, gap = self._coeffs(cfg, speedup or {})
        gs = np.array([gap])
        dur = durations(eg, self._fixed(s), self.var, mult[None], add[None], fs[None], gs)[0]
        start, end = chain_replay(eg.graph, dur)
        pred = int(end.max()) if end.size else 0
        stage_end = np.array([end[eg.stage == st].max() for st in range(s.pp)], dtype=np.int64)
        crit = int(np.argmax(stage_end))
        on = eg.stage == crit
        breakdown = {PHASES[p]: int(dur[on & (eg.phase == p)].sum()) for p in range(len(PHASES))}
        # communication runs on its own processor beside the compute (DDP's buckets during the
        # backward): only its exposed part adds to the step; summed whole, it made idle negative
        comm = on & (eg.phase == PHASES.index("communication"))
        busy = _covered(start[on], end[on])
        exposed = busy - _covered(start[on & ~comm], end[on & ~comm])
        breakdown["overlapped_comm"] = breakdown["communication"] - exposed
        breakdown["communication"] = exposed
        breakdown["idle"] = int(stage_end[crit]) - busy
        breakdown["critical_stage"] = crit
        mem = _memory(cfg)
        return Prediction(
            config=cfg,
            predicted_ns=pred,
            interval_ns=self._interval(pred, ratio, cfg),
            memory_bytes=int(mem.memory_bytes),
            fits=mem.fits,
            warnings=self.base_notes[:0] + self._warnings(cfg, ratio, beyond),
            breakdown=breakdown,
            speedups=dict(speedup or {}),
            host_cores=self.contention.cores or None,
        )

    def _gpu_path(self, cfg: ModelConfig, speedup: Mapping[str, float] | None) -> bool:
        """Whether `cfg` is predicted from the base's GPU step graph: a single-GPU base (every
        edit of it is a graph edit: shapes, layers, micro-batches, recomputation, DP / ZeRO,
        TP / sequence / vocabulary parallelism, PP, speed-ups); recomputation taken out of a
        base that recomputes only where its backward shows each layer's forward run again
        (`gpu_edit.recomputation`)."""
        if self.gpu is None:
            return False
        if self.rank_only:
            return cfg == self.base
        if self.base.recompute == "selective" and cfg.recompute != "selective":
            return False  # its attention's re-run is not taken out of the graph
        if self.base.recompute != "none" and cfg.recompute != self.base.recompute:
            if self._no_uncheckpoint is None:
                from lumos.estimate.gpu_edit import EditError, recomputation

                try:
                    recomputation(self.gpu)
                    self._no_uncheckpoint = ""
                except EditError as exc:
                    self._no_uncheckpoint = str(exc)
            return not self._no_uncheckpoint
        return True

    def _gpu_model(self):  # noqa: ANN202 (GpuModel: imported lazily, with pyarrow)
        from lumos.estimate.gpu_estimate import GpuModel

        if self._gpu is None:
            assert self.gpu is not None
            self._gpu = GpuModel(
                self.gpu,
                self.base,
                comm=self._gpu_comm(),
                device=self.device_name,
                fixed=self.rank_only,
            )
        return self._gpu

    def _gpu_comm(self) -> CommModel:
        """The GPU graph's collectives, from the first tier that has the device: the all-reduces
        the warehouse's traced jobs hold on it (`self.comm`, fitted), its NCCL micro-benchmarks
        in the warehouse (`comm_bench`, their layouts crossing nodes as measured), its datasheet
        link (`CommModel.for_device`); the notes say which and, below the first, why not the
        tiers above. A fitted or datasheet model crosses nodes at the device's network link
        (`CommModel.with_node_link`)."""
        if self.comm.learned_fit:
            return self.comm.with_node_link(self.device_name)
        why = "no warehouse to look for micro-benchmarks in"
        if self.warehouse_root is not None:
            from lumos.estimate.comm_bench import from_opbench

            bench, why = from_opbench(self.warehouse_root, self.device_name)
            if bench is not None:
                return bench
        model = CommModel.for_device(self.device_name).with_node_link(self.device_name)
        model.notes = [*model.notes, why]
        return model

    def _gpu_predict_many(
        self, cfgs: Sequence[ModelConfig], speedups: Sequence[Mapping[str, float]]
    ) -> list[Prediction]:
        """Predictions from the base's GPU step graph, one batched replay per structure."""
        from lumos.estimate.gpu_edit import EditError

        try:
            preds, traced, lo, hi = self._gpu_model().predict(cfgs, speedups, interval=True)
        except EditError as exc:
            raise TransformError(str(exc)) from exc
        return [
            self._gpu_prediction(c, int(p), traced_ns=int(t), speedup=sp, interval=(int(a), int(b)))
            for c, p, t, sp, a, b in zip(cfgs, preds, traced, speedups, lo, hi, strict=True)
        ]

    def _gpu_predict(self, cfg: ModelConfig, speedup: Mapping[str, float]) -> Prediction:
        """`cfg`'s step from the base's GPU step graph with its breakdown and the traced step
        (the same graph with the profiler's cost kept)."""
        from lumos.estimate.gpu_edit import EditError

        try:
            est = self._gpu_model().explain(cfg, speedup)
        except EditError as exc:
            raise TransformError(str(exc)) from exc
        parts = {
            "gpu_work": est.gpu_work_ns,
            "communication": est.comm_ns,
            "cpu_busy": est.cpu_busy_ns,
            "traced_step": est.traced_ns,
            "profiler": est.traced_ns - est.predicted_ns,
        }
        note = (
            f"the same graph with the profiler: {est.traced_ns / 1e6:.1f} ms (the profiler's "
            f"share {100 * est.profiler_share:.0f}%)"
        )
        return self._gpu_prediction(
            cfg,
            est.predicted_ns,
            parts,
            note,
            traced_ns=est.traced_ns,
            speedup=speedup,
            interval=est.interval_ns,
        )

    def _gpu_prediction(
        self,
        cfg: ModelConfig,
        pred: int,
        breakdown: dict[str, int] | None = None,
        traced: str | None = None,
        *,
        traced_ns: int | None = None,
        speedup: Mapping[str, float] | None = None,
        interval: tuple[int, int] | None = None,
    ) -> Prediction:
        """`interval`: the step replayed with its CPU threads faster and slower
        (`gpu_estimate.THREAD_SPEED_SPREAD`), widened to the base's own traced steps' spread."""
        assert self.gpu is not None
        lo, hi = self.spread
        at_speeds = interval or (pred, pred)
        bounds = (min(int(pred * lo), at_speeds[0], pred), max(int(pred * hi), at_speeds[1], pred))
        mem = _memory(cfg)
        what = (
            f"step graph of rank {self.gpu.rank} of {self.gpu.job} as it ran, replayed (a "
            "multi-rank base: its own configuration; any other takes the CPU-operator template)"
            if self.rank_only
            else f"GPU step graph of {self.gpu.job} edited and replayed"
        )
        from lumos.estimate.gpu_estimate import THREAD_SPEED_SPREAD

        notes = [
            f"{what}: predicted without the profiler ({PROFILER_EVENT_NS / 1e3:.1f} us per "
            "recorded CPU event taken out)"
            + (f"; {traced}" if traced else "")
            + f"; the interval: the step with its CPU threads {THREAD_SPEED_SPREAD:g}x faster "
            "and slower (another process's threads run at their own speed)"
        ]
        if self.gpu.left_out:
            notes.append(self.gpu.left_out)
        if cfg.kv_heads_n != self.base.kv_heads_n and not (self.gpu.path > 0).any():
            notes.append(
                "key-value heads change, but the base's layers do not show which operators work "
                "on the keys and values (no separate Q, K, V projections or rotary runs found: "
                "docs/estimate-gpu.md, 'Sides of the attention'): an operator on a size the "
                "queries share keeps its role's growth"
            )
        if (cfg.tp > 1 or cfg.dp > 1 or cfg.pp > 1) and not self.rank_only:
            model = self._gpu_model()
            notes.append(gpu_collective_note(cfg, model.comm, model.collective_notes(cfg)))
        if speedup:
            asked = ", ".join(f"{k} x{v:g}" for k, v in speedup.items())
            notes.append(
                f"speed-ups ({asked}) divide the durations of the GPU tasks of each class "
                "(docs/estimate-gpu.md, 'Speed-ups on the graph'); CPU tasks keep theirs"
            )
        if cfg.recompute != self.base.recompute:
            notes.append(
                "recomputation is modelled as each layer's forward (selective: its attention) "
                "run again before its backward (taken out: the base's backward without the tasks that re-run its "
                "layers' forward), and a checkpointed forward's CPU time as "
                f"{self._gpu_model().checkpoint_cpu:g}x the plain one's (checkpointing's "
                "bookkeeping: docs/estimate-gpu.md)"
            )
        return Prediction(
            config=cfg,
            predicted_ns=pred,
            interval_ns=bounds,
            memory_bytes=int(mem.memory_bytes),
            fits=mem.fits,
            warnings=notes,
            breakdown=breakdown,
            host_cores=None,
            traced_ns=traced_ns,
            speedups=dict(speedup or {}),
        )

    def target(self, overrides: Mapping[str, Any], where: str = "--set") -> ModelConfig:
        """The base configuration with `overrides` (typed) applied and validated."""
        return self.base.derive(**dict(overrides)).validate(where)


# DistributedDataParallel's defaults: the first bucket (the last layers' gradients, ready
# first) is capped at 1 MiB, the others at bucket_cap_mb = 25 MiB
DDP_FIRST_BUCKET = 1 << 20
DDP_BUCKET = 25 << 20


def _same(p: Prediction) -> Prediction:
    return p


def _tp_collectives(tpl: Template, base: ModelConfig) -> tuple[float | None, np.ndarray]:
    """A TP base's collective time: inside its layers, the step's total (None without such work,
    or for a pipeline stage, whose ops are one stage's: left to the collective model); outside
    them, per op (zeros without TP)."""
    outside = np.zeros(tpl.n, np.int64)
    if base.tp <= 1 or len(tpl.names) != tpl.n:
        return None, outside
    # DDP's bucket all-reduces (a dp x tp base) run from the gradient-accumulation hooks: they
    # are the DP transform's
    own = np.where([is_grad_accumulation(n) for n in tpl.names], 0, tpl.comm_ns)
    in_layer = np.isin(tpl.block, LAYER_BLOCKS)
    outside[~in_layer] = own[~in_layer]
    total = float(own[in_layer].sum())
    return (total if total > 0 and base.pp == 1 else None), outside


def _units(tpl: Template, ops: np.ndarray) -> int:
    """The (layer, micro-batch) pairs the masked ops of the template fall in."""
    return len(set(zip(tpl.layer[ops].tolist(), tpl.mb[ops].tolist(), strict=True)))


@functools.lru_cache(maxsize=8192)
def _memory(cfg: ModelConfig) -> MemoryEstimate:
    """A configuration's memory, once: a sweep reads it for the working set, the result and the
    warnings (read only)."""
    return estimate_memory(cfg)


@functools.lru_cache(maxsize=8192)
def _state(cfg: ModelConfig) -> tuple[float, float]:
    """cfg's `slope_law.state_of`, once per configuration (a sweep reads it for the working
    set and the gaps), its memory as `state_of` reads it: with the activations kept."""
    kept = activations_kept(cfg)
    return state_of(kept, _memory(kept).memory_bytes)


def ddp_buckets(grad_bytes: float) -> tuple[float, float]:
    """(bytes of every bucket but the last, bytes of the last bucket) of DDP's reduction."""
    if grad_bytes <= DDP_FIRST_BUCKET:
        return 0.0, float(grad_bytes)
    rest = grad_bytes - DDP_FIRST_BUCKET
    last = rest % DDP_BUCKET or DDP_BUCKET
    return float(grad_bytes - last), float(last)


def _layer_mismatch(tpl: Template, base: ModelConfig) -> list[str]:
    """A warning when the traced step holds another number of layers than the base
    configuration says (per pipeline stage): every estimate then starts from a configuration
    that is not the traced one, and even the base's own estimate misses its step."""
    traced = len({int(x) for x in tpl.layer[tpl.block == BLOCK["f_layer"]]})
    per_stage = {base.layers // base.pp, -(-base.layers // base.pp)}
    if traced == 0 or traced in per_stage:
        return []
    return [
        f"the traced step holds {traced} layer(s) per stage but the base configuration says "
        f"{base.layers} over pp {base.pp}: estimates start from a configuration that is not "
        "the traced one; check the layers inferred by `lumos describe`, or pass "
        f"--base layers={traced * base.pp}"
    ]


def _world(cfg: ModelConfig) -> int:
    return cfg.dp * cfg.pp * cfg.tp


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def _within_flops(t0: float, t1: float, s0: tuple[int, ...], s1: tuple[int, ...]) -> float:
    """The curve's time t1 for shape s1, kept between t0 (the base shape s0's) and t0 scaled by
    the FLOPs when s1 is s0 grown (or shrunk) in every dimension: a bigger multiply is never
    faster, nor slower per FLOP (caches and vector units only fill better). A curve fitted on
    a few shapes can say otherwise: an LM head GEMM of an odd width, slower per FLOP than the
    layers' GEMMs beside it, read as a slope that made hidden x2 cost 5.6x, not the 3.3x
    measured (nn.TransformerEncoder, a single CPU job)."""
    grow = all(b >= a for a, b in zip(s0, s1, strict=True))
    shrink = all(b <= a for a, b in zip(s0, s1, strict=True))
    if not (grow or shrink) or t0 <= 0:
        return t1
    f = math.prod(s1) / math.prod(s0)
    lo, hi = (t0, t0 * f) if grow else (t0 * f, t0)
    return min(max(t1, lo), hi)


def _attention_shape(cfg: ModelConfig) -> tuple[int, int, int]:
    """(batch x heads on one rank, sequence, head dimension) of cfg's attention calls."""
    heads = max(cfg.heads, 1)
    return (cfg.micro_batch * max(heads // cfg.tp, 1), cfg.seq, max(cfg.head_size, 1))


def _refusal(folder: Path, stamp: str) -> dict[str, Any]:
    """The refusal of `job`'s template as of this manifest ({}: not refused)."""
    try:
        r = json.loads((folder / REFUSED).read_text())
    except (OSError, ValueError):
        return {}
    return r if r.get("manifest") == stamp and r.get("format") == CACHE_FORMAT else {}


def _refused(folder: Path, stamp: str) -> str:
    """Why `job`'s template could not be built, as of this manifest ("": not refused)."""
    return str(_refusal(folder, stamp).get("error", ""))


def _save_gpu_step(wh: Any, job: str, folder: Path, rank: int, **kw: Any) -> None:
    """`job`'s step graph of `rank` (`load_gpu_step`'s keywords) in `folder`."""
    from lumos.estimate.gpu_step import load_gpu_step

    load_gpu_step(wh, job, rank=rank, **kw).save(folder / GPU_STEP_DIR)


def cached_whatif(root: str | Path, job: str) -> tuple[GpuStep, ModelConfig] | None:
    """The step graph and configuration kept beside `job`'s refusal (its first rank's, for
    speed-up what-ifs), refused as of the warehouse's manifest (None: not refused, refused
    before the last ingest, or no GPU step)."""
    from lumos.estimate.gpu_step import GpuStep

    wh_root = local_warehouse(root)
    folder = template_dir(wh_root, job)
    config = _refusal(folder, manifest_stamp(wh_root)).get("config")
    if config is None or not (folder / GPU_STEP_DIR).is_dir():
        return None
    return GpuStep.load(folder / GPU_STEP_DIR), ModelConfig(**config)


def _build_cache(root: Path, job: str, stamp: str) -> None:
    """Extract the template, infer the base and learn from the calibration jobs for `job` (~2 s)."""
    from lumos.estimate.gpu_step import GpuStepError, first_rank
    from lumos.estimate.infer import infer_base
    from warehouse.handle import WarehouseHandle

    wh = WarehouseHandle.open(root)
    inf = infer_base(wh, job)
    sizes = shape_roles(inf.config)
    folder = template_dir(wh.root, job)
    shutil.rmtree(folder / GPU_STEP_DIR, ignore_errors=True)  # the last build's, if any
    try:
        tpl = extract_template(wh, job, cache=False, sizes=sizes)
    except TemplateError as exc:
        # kept until the next ingest: a job whose model is not read is not re-read per estimate;
        # its first rank's step graph as it ran answers speed-up what-ifs (`gpu_whatif`)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            _save_gpu_step(wh, job, folder, first_rank(wh, job), structured=False)
        except (GpuStepError, LookupError):
            pass  # no GPU step: nothing to answer what-ifs from
        refusal = {"manifest": stamp, "format": CACHE_FORMAT, "error": str(exc)}
        _write_json(folder / REFUSED, {**refusal, "config": inf.config.to_dict()})
        raise
    (folder / REFUSED).unlink(missing_ok=True)
    tpl.save(template_path(wh.root, job))
    try:
        # a multi-rank job's first rank: its own configuration (speed-ups) and the step
        # without the profiler (`Estimator.rank_only`)
        rank = 0 if inf.config.world_size == 1 else first_rank(wh, job)
        _save_gpu_step(wh, job, folder, rank, sizes=sizes)
    except GpuStepError:
        pass  # a CPU trace, or no step to edit: the CPU template serves alone
    except ValueError:
        # a multi-rank base's first-rank graph only adds to its template, which serves without
        # it; a single-GPU base's is its estimates' model: its failure is said, not hidden
        if inf.config.world_size == 1:
            raise
    _write_json(
        folder / "base.json",
        {
            "config": inf.config.to_dict(),
            "warnings": inf.warnings,
            "unread": inf.unread(),
            "host_cores": inf.host_cores,
        },
    )
    f = Calibration.learn(wh, job)
    comm = f.comm
    _write_json(
        folder / "comm.json",
        {
            "alpha_ns": comm.alpha_ns,
            "bw_bytes_per_ns": comm.bw_bytes_per_ns,
            "source": comm.source,
            "notes": comm.notes,
            "sync_alpha_ns": comm.sync_alpha_ns,
            "sync_notes": comm.sync_notes,
            "exposed_wait_ns": comm.exposed_wait_ns,
            "exposed_notes": comm.exposed_notes,
            "contention": f.contention.to_dict(),
            "gemms": f.gemms.to_dict(),
            "ops": f.ops.to_dict(),
            "working_set": f.working_set.to_dict(),
            "gaps": f.gaps.to_dict(),
            "manifest": stamp,
            "format": CACHE_FORMAT,
        },
    )
