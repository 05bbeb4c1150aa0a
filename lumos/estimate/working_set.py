"""Bigger training state, slower ops: the working-set law and the base run's own speed.

On a CPU a rank's weights, gradients, optimizer moments and activations compete for the same
caches, so an operator runs slower in a job whose state is larger. The warehouse teaches it per
device (`lumos_sql/estimate/job_speed.sql`): the slope `beta` of log op speed on log per-rank
state over the other jobs of the base's device and world size; a target's CPU work is scaled by
(state ratio) ** beta, clamped at 4x. Jobs at the base's state also say how fast the base's own
run was: the target takes `offset`, their mean log speed shrunk by n / (n + 1). CPU devices only.
Measurements: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lumos.estimate.slope_law import (
    MAX_LOG_RATIO,
    MIN_LOG_RATIO,
    Point,
    SlopeLaw,
    calibration_sizes,
    fit_slope,
    parse_points,
    points_from_rows,
    power_scale,
)

if TYPE_CHECKING:
    from lumos.estimate.priors import HostPrior

__all__ = ["MAX_LOG_RATIO", "WorkingSet"]

# a job whose matched ops are less than this share of its op time speaks with that share as weight
MIN_SHARE = 0.02
# jobs whose matched ops are at least this share of their op time show how much a whole job's
# speed strays from the fit (the interval's spread); jobs matched on a few small ops do not
MIN_SPREAD_SHARE = 0.5
# jobs read per calibration (the most matched first): each needs its configuration inferred
MAX_JOBS = 32


@dataclass
class WorkingSet(SlopeLaw):
    """Speed of CPU work against the per-rank training state, learned per device."""

    beta: float = 0.0
    # (job, log state ratio to the base, log speed ratio to the base, weight)
    points: list[Point] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # (low, high) of exp(residual) of the well-matched jobs: how far a whole job's op speed
    # strayed from the fit (recording noise, drift within a day); 1 inside each
    spread: tuple[float, float] = (1.0, 1.0)
    # the log state ratios beta was learned over, when not the points' (a host prior's)
    span: tuple[float, float] | None = None
    # log speed of a new run against the base's at equal state: the well-matched jobs' mean
    # residual, shrunk (module docstring); 0 without such jobs
    offset: float = 0.0

    def with_prior(self, p: HostPrior) -> WorkingSet:
        """This model, or the host prior's law when the warehouse taught none."""
        if self.learned:
            return self
        offset, note = _offset(self.points, p.beta)
        return WorkingSet(
            p.beta,
            list(self.points),
            [
                f"ops slow with the per-rank training state as state^{p.beta:.3f}, from "
                f"{p.cite()} (the warehouse has fewer than two jobs on this device whose state "
                "differs from the base's by 10% or more)"
            ]
            + note,
            p.beta_spread,
            p.beta_span,
            offset,
        )

    @property
    def run_speed(self) -> float:
        """Factor on a target's CPU op times for the run's speed (`offset`; 1 without one)."""
        return math.exp(self.offset)

    def run_notes(self) -> list[str]:
        """What the offset says about the base's run (none when it is 1)."""
        if abs(self.offset) < 1e-3:
            return []
        return _offset(self.points, self.beta)[1]

    def interval_spread(self) -> tuple[float, float]:
        """`spread` about the offset's estimate: the base's own speed stays inside."""
        return self.spread[0] / self.run_speed, self.spread[1] / self.run_speed

    def job_scales(self) -> dict[str, float]:
        """Each calibration job's fitted slowdown against the base, run speed included: dividing its
        op samples by it leaves the shape curves (gemm_curve, op_times) with the shape's effect
        alone, so that neither the state's nor the offset is counted twice (a target's times
        are multiplied by both again)."""
        return {job: math.exp(self.offset + self.beta * x) for job, x, _, _ in self.points}

    def contention_scale(
        self, state: Callable[[str], float | None]
    ) -> Callable[[str, Sequence[Mapping[str, Any]]], float]:
        """For `contention.Contention.calibrate`: the slowdown a multi-rank job's training state
        gives its ops against the single-rank jobs they were compared with (`refs`: each with
        the job's time on the ops it shares; their time-weighted median log state is the
        reference). A pipeline rank holds half the layers: its ops run faster for it, which is
        not contention."""

        def scale(job: str, refs: Sequence[Mapping[str, Any]]) -> float:
            own = state(job)
            pts = sorted(
                (math.log(s), float(r["t"]))
                for r in refs
                if r.get("t") and (s := state(str(r["job"])))
            )
            if self.beta <= 0 or not own or not pts:
                return 1.0
            half = sum(t for _, t in pts) / 2
            cum = itertools.accumulate(t for _, t in pts)
            ref = next(x for (x, _), c in zip(pts, cum, strict=True) if c >= half)
            x = min(max(math.log(own) - ref, -MAX_LOG_RATIO), MAX_LOG_RATIO)
            return math.exp(self.beta * x)

        return scale

    def scale(self, base_bytes: float, target_bytes: float) -> tuple[float, str | None]:
        """(factor on the target's CPU op times, a warning when the state ratio is clamped)."""
        return power_scale(
            self.beta, self.points, base_bytes, target_bytes, "per-rank training state",
            "its slowdown is", self.span,
        )  # fmt: skip

    @classmethod
    def fit(cls, points: Sequence[Point]) -> WorkingSet:
        """Weighted least squares through the origin of log speed on log state."""
        beta, note = fit_slope(
            points,
            "ops slow with the per-rank training state as state",
            "working-set slowdown not learned",
            "training state",
        )
        offset, run_note = _offset(points, beta)
        return cls(beta, list(points), [note] + run_note, _spread(points, beta), offset=offset)

    @classmethod
    def from_rows(
        cls, rows: Sequence[tuple[Any, ...]], state_bytes: dict[str, float], base_bytes: float
    ) -> WorkingSet:
        """From `job_speed.sql` rows (job, ratio, n_keys, share) and each job's state bytes."""
        return cls.fit(points_from_rows(rows, state_bytes, base_bytes, MIN_SHARE))

    @classmethod
    def calibrate(
        cls,
        wh: Any,
        job: str,
        exclude: Sequence[str] = (),
        states: dict[str, tuple[float, float] | None] | None = None,
    ) -> WorkingSet:
        """Learned from the warehouse's jobs on `job`'s device and world size, leaving out
        `exclude`; each job's state comes from its inferred configuration. `states` memoises
        each job's `state_of` (None: not inferable) across calls, e.g. one per held-out job of an
        accuracy check."""
        rows, sizes, why = calibration_sizes(wh, "job_speed", job, exclude, states, 0, MAX_JOBS)
        if why:
            return cls(notes=[f"working-set slowdown not learned ({why})"])
        return cls.from_rows(rows, sizes, sizes[job])

    def to_dict(self) -> dict[str, Any]:
        return {
            "beta": self.beta,
            "points": [list(p) for p in self.points],
            "notes": self.notes,
            "spread": list(self.spread),
            "span": list(self.span) if self.span is not None else None,
            "offset": self.offset,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> WorkingSet:
        if not d:
            return cls(notes=["no working-set model cached"])
        return cls(
            float(d.get("beta", 0.0)),
            parse_points(d),
            list(d.get("notes", [])),
            tuple(float(x) for x in d.get("spread", (1.0, 1.0))),
            tuple(float(x) for x in d["span"]) if d.get("span") else None,
            float(d.get("offset", 0.0)),
        )


def _offset(points: Sequence[Point], beta: float) -> tuple[float, list[str]]:
    """(offset, its note): the mean residual of the jobs at the base's state (within
    MIN_LOG_RATIO) matched on at least MIN_SPREAD_SHARE of their op time, weighted by that share
    and shrunk by n / (n + 1)."""
    good = [p for p in points if p[3] >= MIN_SPREAD_SHARE and abs(p[1]) < MIN_LOG_RATIO]
    if not good:
        return 0.0, []
    n = len(good)
    mean = sum(w * (y - beta * x) for _, x, y, w in good) / sum(p[3] for p in good)
    offset = mean * n / (n + 1)
    names = ", ".join(p[0] for p in good)
    pace = "faster" if mean > 0 else "slower"
    return offset, [
        f"the base ran {100 * abs(math.expm1(-mean)):.1f}% {pace} than the {n} calibration job(s) "
        f"at its state matched on most of their op time ({names}): a new run's CPU work "
        f"takes {n}/{n + 1} of that as its speed ({math.exp(offset):.3f}x)"
    ]


def _spread(points: Sequence[Point], beta: float) -> tuple[float, float]:
    """(low, high) of exp(log speed - beta * log state) over the jobs matched on at least
    MIN_SPREAD_SHARE of their op time, widened to include 1."""
    res = [math.exp(y - beta * x) for _, x, y, w in points if w >= MIN_SPREAD_SHARE]
    return min(res + [1.0]), max(res + [1.0])
