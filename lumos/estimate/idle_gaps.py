"""What the warehouse's other jobs teach about the idle gaps between operators.

The template keeps the idle time before each top-level op (the replay's delay): Python running
the model's code, dropping references and the allocator freeing and handing out the op's tensors.
That time follows how large each op's tensors are. On the corpus machine, against the 4-layer
base, the gaps before ops of the same name last 1.2-1.4x as long at twice the tokens or hidden
size, 1.5x at 4x the tokens and 1.7x at 3x the hidden size, but only 1.04-1.18x with 2-3x the
layers. Keeping the base's gaps under-predicted large models by up to 6 ms a step (hidden x3:
11.3 ms of gaps against the base's 5.4 ms) and over-predicted small ones.

The warehouse teaches it per device (`lumos_sql/estimate/job_gaps.sql`): for each other job of
the base's device and world size, the base's gap time re-timed at the job's median gap per op
name, against the ratio of one layer's activations per micro-batch to the base's
(`memory.layer_activation_bytes`, the tensors each op of a layer reads and writes). Weighted least
squares of the log gap ratio on the log activation ratio, through the origin, gives the slope
`gamma`; a target's gaps are scaled by (activation ratio) ** gamma. The ratio is clamped at 4x
either way beyond the fleet's range, with a warning. A negative slope counts as none; fewer than
two jobs whose activations differ from the base's by 10% teach nothing. The gaps' smaller growth
with the layer count (the whole state) is left out: fitted as a second variable it made the
corpus's predictions worse from either base (docs/estimate.md). CPU devices only (a GPU job's host
gaps hide behind its kernels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lumos.estimate.working_set import MAX_LOG_RATIO, MIN_LOG_RATIO, state_bytes

# (job, log activation ratio to the base, log gap ratio, weight)
Point = tuple[str, float, float, float]


@dataclass
class IdleGaps:
    """Scale of the idle gaps between CPU ops against one layer's activations."""

    gamma: float = 0.0
    points: list[Point] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def scale(self, base_act: float, target_act: float) -> tuple[float, str | None]:
        """(factor on the target's gaps, a warning when its ratio is beyond the fleet's)."""
        if self.gamma <= 0 or base_act <= 0 or target_act <= 0:
            return 1.0, None
        x = math.log(target_act / base_act)
        xs = [p[1] for p in self.points] + [0.0]
        lo, hi = min(xs), max(xs)
        warn = None
        if x < lo - 1e-9 or x > hi + 1e-9:
            warn = (
                f"per-layer activations {math.exp(x):.2f}x the base's, beyond the "
                f"{math.exp(lo):.2f}-{math.exp(hi):.2f}x the fleet measured: the idle gaps "
                "between ops are extrapolated"
            )
            x = min(max(x, -MAX_LOG_RATIO), MAX_LOG_RATIO)
        return math.exp(self.gamma * x), warn

    @classmethod
    def fit(cls, points: Sequence[Point]) -> IdleGaps:
        """Weighted least squares through the origin of log gap ratio on log activations."""
        use = [p for p in points if abs(p[1]) >= MIN_LOG_RATIO and p[3] > 0]
        if len(use) < 2:
            note = (
                "idle gaps kept as traced: the warehouse has fewer than two jobs on this device "
                "whose per-layer activations differ from the base's by 10% or more"
            )
            return cls(0.0, list(points), [note])
        sxy = sum(w * x * y for _, x, y, w in use)
        sxx = sum(w * x * x for _, x, _, w in use)
        gamma = max(sxy / sxx, 0.0)
        note = (
            f"idle gaps between ops scale with one layer's activations as act^{gamma:.3f} "
            f"(from {len(use)} job(s): {', '.join(p[0] for p in use)})"
        )
        return cls(gamma, list(points), [note])

    @classmethod
    def from_rows(
        cls, rows: Sequence[tuple[Any, ...]], act: dict[str, float], base_act: float
    ) -> IdleGaps:
        """From `job_gaps.sql` rows (job, ratio, names, share) and each job's activations."""
        points = []
        for job, ratio, _n, share in rows:
            a = act.get(str(job))
            if not ratio or ratio <= 0 or not a or a <= 0 or base_act <= 0:
                continue
            points.append(
                (str(job), math.log(a / base_act), math.log(float(ratio)), float(share or 0))
            )
        return cls.fit(points)

    @classmethod
    def calibrate(
        cls,
        wh: Any,
        job: str,
        exclude: Sequence[str] = (),
        states: dict[str, tuple[float, float] | None] | None = None,
    ) -> IdleGaps:
        """Learned from the warehouse's jobs on `job`'s device and world size, leaving out
        `exclude`; `states` memoises each job's `working_set.state_of` (None: not inferable)."""
        from lumos.estimate.fleet_sql import fleet_rows

        (rows,), why = fleet_rows(wh, ["job_gaps"], job, exclude)
        if why:
            return cls(notes=[f"idle gaps kept as traced ({why})"])
        states = {} if states is None else states
        for j in [job] + [str(r[0]) for r in rows]:
            if j not in states:
                states[j] = state_bytes(wh, j)
        act = {j: b[1] for j, b in states.items() if b is not None}
        if job not in act:
            return cls(notes=["idle gaps kept as traced: the base's configuration is unknown"])
        return cls.from_rows(rows, act, act[job])

    def to_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "points": [list(p) for p in self.points], "notes": self.notes}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> IdleGaps:
        if not d:
            return cls(notes=["no idle-gap model cached"])
        return cls(
            float(d.get("gamma", 0.0)),
            [(str(p[0]), float(p[1]), float(p[2]), float(p[3])) for p in d.get("points", [])],
            list(d.get("notes", [])),
        )
