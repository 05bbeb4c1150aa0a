"""The time of a matrix multiply as a function of its shape, learned from the warehouse's GEMMs.

A GEMM's efficiency grows with its size, so scaling a traced GEMM by its FLOPs is wrong both for
larger micro-batches and for tensor-parallel slices. `GemmCurve.time(m, k, n)` reads the curve
from the single-rank jobs' GEMMs on the same device (`lumos_sql/estimate/op_samples.sql`): a local
linear fit of log time on the log2 dimensions, weighted by distance to the queried shape
(`BANDWIDTH`), with slopes pulled towards 1; a shape further than `REACH` doublings from every
sample is flagged (`beyond`). `role_gemms` lists each role's multiplies. Non-CPU devices and
warehouses without single-rank jobs give no curve. Measurements: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos.estimate.config import ModelConfig
from lumos_sql.taxonomy import is_gemm

# width of the Gaussian weight, in doublings of each dimension
BANDWIDTH = 0.75
# a query this many doublings (Euclidean, log2 space) from every sample extrapolates
REACH = 1.5
# pull of the slopes towards 1, as a share of the local weight
PRIOR = 0.05

Shape = tuple[int, int, int]
# the library calls (not the linear/matmul wrappers around them)


def parse_gemm(name: str, dims_text: str | None) -> Shape | None:
    """(m, k, n) of one innermost GEMM op from its recorded input dims (batched: b·m rows)."""
    try:
        dims = json.loads(dims_text) if dims_text else None
    except ValueError:
        return None
    if not isinstance(dims, list):
        return None
    mats = [d for d in dims if isinstance(d, list) and len(d) >= 2]
    if name in ("aten::addmm", "aten::baddbmm"):
        mats = mats[1:] if len(mats) >= 3 else mats
    if len(mats) < 2:
        return None
    a, b = mats[0], mats[1]
    if not all(isinstance(v, int) and v > 0 for v in a + b):
        return None
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    m, k, n = batch * a[-2], a[-1], b[-1]
    if b[-2] != k:
        return None
    return (m, k, n)


@dataclass
class GemmCurve:
    """Median time of GEMMs by shape on one device, from the single-rank calibration jobs."""

    shapes: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # log2 (m, k, n)
    log_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    weight: np.ndarray = field(default_factory=lambda: np.zeros(0))  # jobs that measured it
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._cache: dict[Shape, tuple[float, bool]] = {}

    @property
    def usable(self) -> bool:
        return self.log_ns.size >= 2

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, ...]]) -> GemmCurve:
        """Rows of op_samples.sql (GEMM ops only are read): per shape, the median over jobs of each
        job's median."""
        per: dict[Shape, list[float]] = {}
        jobs: set[str] = set()
        for name, dims, job, _n, med in rows:
            if not is_gemm(name):
                continue
            s = parse_gemm(name, dims)
            if s is None or not med or med <= 0:
                continue
            per.setdefault(s, []).append(float(med))
            jobs.add(job)
        if not per:
            return cls(
                notes=[
                    "no single-rank CPU job with GEMM shapes on this device: GEMMs "
                    "scale with their FLOPs"
                ]
            )
        keys = sorted(per)
        return cls(
            shapes=np.log2(np.array(keys, dtype=float)),
            log_ns=np.log(np.array([float(np.median(per[k])) for k in keys])),
            weight=np.array([float(len(per[k])) for k in keys]),
            notes=[
                f"GEMM times from {len(keys)} shapes measured by {len(jobs)} single-rank "
                f"job(s) on this device"
            ],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "shapes": self.shapes.tolist(),
            "log_ns": self.log_ns.tolist(),
            "weight": self.weight.tolist(),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> GemmCurve:
        if not d:
            return cls(notes=["GEMM times not learned"])
        return cls(
            shapes=np.array(d["shapes"], dtype=float).reshape(-1, 3),
            log_ns=np.array(d["log_ns"], dtype=float),
            weight=np.array(d["weight"], dtype=float),
            notes=list(d.get("notes", [])),
        )

    def time(self, shape: Shape) -> tuple[float, bool]:
        """(ns, beyond): the curve's time for one GEMM of `shape`, and whether it extrapolates."""
        hit = self._cache.get(shape)
        if hit is None:
            hit = self._cache[shape] = _local_fit(
                self.shapes, self.log_ns, self.weight, np.log2(np.array(shape, dtype=float))
            )
        return hit


def _local_fit(x: np.ndarray, y: np.ndarray, w0: np.ndarray, q: np.ndarray) -> tuple[float, bool]:
    """exp of a locally weighted linear fit of `y` (log time) on `x` (log2 sizes, one column per
    dimension) at `q`, and whether `q` lies beyond `REACH` of every sample. Slopes ("time ∝
    size^b") are pulled towards 1, so a dimension the samples do not vary in scales linearly."""
    d = x - q
    dist2 = np.einsum("ij,ij->i", d, d)
    w = w0 * np.exp(-dist2 / (2 * BANDWIDTH**2))
    beyond = bool(np.sqrt(dist2.min()) > REACH)
    if w.sum() <= 1e-300:  # far beyond every sample: the nearest one, scaled linearly
        i = int(np.argmin(dist2))
        return float(math.exp(y[i] + math.log(2) * float(-d[i].sum()))), True
    a = np.column_stack([np.ones(len(y)), d * math.log(2)])
    lam = PRIOR * w.sum()
    dims = x.shape[1]
    ata = a.T @ (a * w[:, None])
    atb = a.T @ (w * y)
    prior = np.array([0.0] + [lam] * dims)
    coef = np.linalg.solve(ata + np.diag(prior), atb + prior)
    return float(math.exp(coef[0])), beyond


@dataclass(frozen=True)
class RoleGemms:
    """One role's multiplies per layer and micro-batch: forward and backward shapes."""

    fwd: tuple[Shape, ...]
    bwd: tuple[Shape, ...]


def role_gemms(cfg: ModelConfig, separate_qkv: bool = False) -> dict[str, RoleGemms]:
    """The GEMMs of each GEMM role for one rank of `cfg` (per layer and micro-batch).

    `separate_qkv`: Q, K and V are three linears (LLaMA, Mistral, Qwen in HuggingFace) rather
    than one fused one (GPT-2, Megatron): three smaller multiplies, which a GEMM curve times
    differently from their sum.

    A linear of `k_in -> n_out` over t tokens multiplies (t, k_in) x (k_in, n_out) forward; its
    backward multiplies (t, n_out) x (n_out, k_in) for the input's gradient and
    (n_out, t) x (t, k_in) for the weight's. Tensor parallelism splits the QKV and up
    projections' outputs and the out and down projections' inputs (and the LM head's outputs
    with `vocab_parallel`); a gated MLP has two up projections (gate and up)."""
    t = cfg.micro_batch * cfg.seq
    h, f, v, tp = cfg.hidden, cfg.ffn_size, max(cfg.vocab, 1), cfg.tp
    linears = {
        "gemm_qkv": [(h, max(cfg.qkv_width(tp), 1))]
        if not separate_qkv
        else [(h, max(cfg.q_width(tp), 1))]
        + [(h, max((cfg.qkv_width(tp) - cfg.q_width(tp)) // 2, 1))] * 2,
        "gemm_out": [(max(cfg.q_width(tp), 1), h)],
        "gemm_up": [(h, max(f // tp, 1))] * (2 if cfg.gated_mlp else 1),
        "gemm_down": [(max(f // tp, 1), h)],
        "gemm_head": [(h, max(v // cfg.vocab_tp, 1))],
    }
    return {
        role: RoleGemms(
            fwd=tuple((t, k, n) for k, n in ls),
            bwd=tuple(s for k, n in ls for s in ((t, n, k), (n, t, k))),
        )
        for role, ls in linears.items()
    }
