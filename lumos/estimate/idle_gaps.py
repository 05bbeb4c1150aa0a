"""How the idle gaps between operators grow with the size of their tensors.

The template keeps the idle time before each top-level op (Python running the model's code, the
allocator freeing and handing out tensors), and that time grows with the tensors. The warehouse
teaches it per device (`lumos_sql/estimate/job_gaps.sql`): the slope `gamma` of the log gap ratio
on the log ratio of one layer's activations, over the other jobs of the base's device and world
size; a target's gaps are scaled by (activation ratio) ** gamma, clamped at 4x beyond the range
seen. CPU devices only (a GPU job's host gaps hide behind its kernels). Measurements and what
was tried: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lumos.estimate.slope_law import (
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


@dataclass
class IdleGaps(SlopeLaw):
    """Scale of the idle gaps between CPU ops against one layer's activations."""

    gamma: float = 0.0
    # (job, log activation ratio to the base, log gap ratio, weight)
    points: list[Point] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the log activation ratios gamma was learned over, when not the points' (a host prior's)
    span: tuple[float, float] | None = None

    def with_prior(self, p: HostPrior) -> IdleGaps:
        """This model, or the host prior's law when the warehouse taught none."""
        if self.learned:
            return self
        note = (
            f"idle gaps between ops scale with one layer's activations as act^{p.gamma:.3f}, "
            f"from {p.cite()} (the warehouse has fewer than two jobs on this device whose "
            "activations differ from the base's by 10% or more)"
        )
        return IdleGaps(p.gamma, list(self.points), [note], p.gamma_span)

    def scale(self, base_act: float, target_act: float) -> tuple[float, str | None]:
        """(factor on the target's gaps, a warning when its ratio is beyond the calibration jobs')."""
        return power_scale(
            self.gamma, self.points, base_act, target_act, "per-layer activations",
            "the idle gaps between ops are", self.span,
        )  # fmt: skip

    @classmethod
    def fit(cls, points: Sequence[Point]) -> IdleGaps:
        """Weighted least squares through the origin of log gap ratio on log activations."""
        gamma, note = fit_slope(
            points,
            "idle gaps between ops scale with one layer's activations as act",
            "idle gaps kept as traced",
            "per-layer activation size",
        )
        return cls(gamma, list(points), [note])

    @classmethod
    def from_rows(
        cls, rows: Sequence[tuple[Any, ...]], act: dict[str, float], base_act: float
    ) -> IdleGaps:
        """From `job_gaps.sql` rows (job, ratio, names, share) and each job's activations."""
        return cls.fit(points_from_rows(rows, act, base_act))

    @classmethod
    def calibrate(
        cls,
        wh: Any,
        job: str,
        exclude: Sequence[str] = (),
        states: dict[str, tuple[float, float] | None] | None = None,
    ) -> IdleGaps:
        """Learned from the warehouse's jobs on `job`'s device and world size, leaving out
        `exclude`; `states` memoises each job's `slope_law.state_of` (None: not inferable)."""
        rows, sizes, why = calibration_sizes(wh, "job_gaps", job, exclude, states, 1)
        if why:
            return cls(notes=[f"idle gaps kept as traced ({why})"])
        return cls.from_rows(rows, sizes, sizes[job])

    def to_dict(self) -> dict[str, Any]:
        return {
            "gamma": self.gamma,
            "points": [list(p) for p in self.points],
            "notes": self.notes,
            "span": list(self.span) if self.span is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> IdleGaps:
        if not d:
            return cls(notes=["no idle-gap model cached"])
        return cls(
            float(d.get("gamma", 0.0)),
            parse_points(d),
            list(d.get("notes", [])),
            tuple(float(x) for x in d["span"]) if d.get("span") else None,
        )
