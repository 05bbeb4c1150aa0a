"""The time of attention ops as a function of their shape, learned from the warehouse.

Scaling attention by its FLOPs misses how its cost grows on a real device. The single-rank jobs on
the base's device measured the same ops at many shapes (`lumos_sql/estimate/op_samples.sql`);
per op name, fused scaled-dot-product kernels are fitted as
``t = c0 + a·bh·s + b·bh·s·d + c·bh·s² + e·bh·s²·d`` with non-negative coefficients on relative
error, each term a physical cost, so the fit extrapolates along s². Without samples that vary in
bh, s and d the estimator keeps its roofline split. GPU devices give no samples. Measurements and
what was tried: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos.estimate.gemm_curve import GemmCurve
from lumos_sql.taxonomy import is_attention

# a backward op in the template is the autograd engine's frame around the node that has shapes
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "
# distinct shapes an attention op needs before its five coefficients are trusted
MIN_ATTN_SHAPES = 5

AttnShape = tuple[int, int, int]  # (batch x heads on the rank, seq, head dim)


def op_key(name: str) -> str:
    """The name under which an op's samples are kept: a template's backward op is the autograd
    engine's frame around the node whose shapes the trace records."""
    return name[len(AUTOGRAD_PREFIX) :] if name.startswith(AUTOGRAD_PREFIX) else name


def parse_attention(dims_text: str | None) -> AttnShape | None:
    """(b·h, s, d) of an attention op from its first input, a [b, h, s, d] tensor."""
    try:
        dims = json.loads(dims_text) if dims_text else None
    except ValueError:
        return None
    if not isinstance(dims, list) or not dims:
        return None
    q = dims[0]
    if not (isinstance(q, list) and len(q) == 4 and all(isinstance(v, int) and v > 0 for v in q)):
        return None
    b, h, s, d = q
    return (b * h, s, d)


def attention_terms(shape: AttnShape) -> np.ndarray:
    bh, s, d = (float(v) for v in shape)
    return np.array([1.0, bh * s, bh * s * d, bh * s * s, bh * s * s * d])


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with non-negative coefficients (Lawson-Hanson active set; a handful of
    columns, so the plain version is fast enough)."""
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, bool)
    for _ in range(3 * n):
        grad = a.T @ (b - a @ x)
        cand = np.flatnonzero(~passive & (grad > 1e-12 * max(1.0, float(np.abs(grad).max()))))
        if cand.size == 0:
            break
        passive[cand[np.argmax(grad[cand])]] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
    return x


@dataclass
class OpTimes:
    """Per attention op name: the coefficients of `attention_terms`, from the calibration jobs."""

    attn: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # the op names whose law came from the host prior (an estimate that uses one says so)
    borrowed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._attn_coef = {k: np.array(v, float) for k, v in self.attn.items()}

    # --- learning ----------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, ...]]) -> OpTimes:
        """Rows of op_samples.sql: (name, input dims, job, calls, median ns)."""
        attn: dict[str, dict[AttnShape, list[float]]] = {}
        for name, dims, _job, _n, med in rows:
            if not med or med <= 0 or not is_attention(name):
                continue
            s = parse_attention(dims)
            if s is not None:
                attn.setdefault(name, {}).setdefault(s, []).append(float(med))
        out_attn = {}
        for name, per in attn.items():
            coef = _fit_attention(per)
            if coef is not None:
                out_attn[name] = coef.tolist()
        notes = [
            f"attention times fitted by shape for {len(out_attn)} op(s) from the calibration jobs' "
            "single-rank jobs"
        ]
        if attn and not out_attn:
            notes.append(
                "attention samples do not vary in batch x heads, sequence and head size: "
                "attention keeps its roofline split"
            )
        return cls(out_attn, notes)

    @classmethod
    def calibrate(cls, wh: Any, job: str, exclude: Sequence[str] = ()) -> OpTimes:
        """Learned from the warehouse's single-rank jobs on `job`'s device, leaving out
        `exclude`."""
        return calibrate_shapes(wh, job, exclude)[1]

    def to_dict(self) -> dict[str, Any]:
        return {"attn": self.attn, "notes": list(self.notes), "borrowed": sorted(self.borrowed)}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> OpTimes:
        if not d:
            return cls(notes=["op times by shape not learned"])
        return cls(dict(d.get("attn", {})), list(d.get("notes", [])), set(d.get("borrowed", [])))

    def with_prior(self, p: Any) -> OpTimes:
        """This model, with the host prior's laws (`priors.HostPrior.attention`) for the
        attention ops the warehouse could not fit: a single trace holds one attention shape, and
        the roofline split that is left then has no per-call part (hidden x2 of six HuggingFace
        decoders: attention predicted 2.3x, measured 1.6-1.8x; the corpus's law says 1.8x)."""
        borrowed = {k: v for k, v in p.attention.items() if k not in self.attn}
        if not borrowed:
            return self
        note = (
            f"attention times by shape for {', '.join(sorted(borrowed))} from {p.cite()} (the "
            "warehouse's single-rank jobs on this device do not vary their attention shapes)"
        )
        return OpTimes({**self.attn, **borrowed}, [*self.notes, note], set(borrowed))

    # --- reading -----------------------------------------------------------------------------
    def has_attention(self, name: str) -> bool:
        return op_key(name) in self._attn_coef

    def attention(self, name: str, shape: AttnShape) -> float:
        """The fitted time (ns) of one call of attention op `name` at `shape`."""
        return float(attention_terms(shape) @ self._attn_coef[op_key(name)])


def calibrate_shapes(
    wh: Any, job: str, exclude: Sequence[str] = (), job_scale: Mapping[str, float] | None = None
) -> tuple[GemmCurve, OpTimes]:
    """The GEMM curve and the attention fits of `job`'s device from one read of the calibration jobs'
    op samples (jobs in `exclude` left out), each job's times divided by its `job_scale`
    (`WorkingSet.job_scales`: its state's slowdown against the base's)."""
    from lumos.estimate.calibration_sql import calibration_rows

    (rows,), why = calibration_rows(wh, ["op_samples"], job, exclude)
    if why:
        return (
            GemmCurve(notes=[f"GEMM times not learned ({why})"]),
            OpTimes(notes=[f"op times by shape not learned ({why})"]),
        )
    if job_scale:
        rows = [(n, d, j, c, m / job_scale.get(j, 1.0)) for n, d, j, c, m in rows]
    return GemmCurve.from_rows(rows), OpTimes.from_rows(rows)


def _fit_attention(per: dict[AttnShape, list[float]]) -> np.ndarray | None:
    """Coefficients of `attention_terms` for one op, or None when the shapes cannot separate
    them (fewer than MIN_ATTN_SHAPES, or one of bh, s, d never varies)."""
    shapes = sorted(per)
    if len(shapes) < MIN_ATTN_SHAPES:
        return None
    arr = np.array(shapes)
    if any(np.unique(arr[:, j]).size < 2 for j in range(3)):
        return None
    t = np.array([float(np.median(per[s])) for s in shapes])
    a = np.stack([attention_terms(s) for s in shapes])
    # relative error: scale every row by its time, and every column to unit size
    a = a / t[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    coef = nnls(a / scale, np.ones(len(t))) / scale
    return coef if coef.any() else None
