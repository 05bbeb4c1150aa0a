"""A power law learned from the calibration jobs: how one quantity of a job (its op speed, its idle gaps)
changes with one size of its configuration (per-rank state, one layer's activations), relative
to the base job. Shared by `working_set` and `idle_gaps`.

Each other job of the base's device and world size is a point (job, log size ratio, log quantity
ratio, weight); the slope is weighted least squares through the origin over the jobs whose size
differs from the base's by 10% or more (at least two of them), never negative; a target's ratio
beyond the calibration jobs' range is clamped at 4x either way, with a warning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

# (job, log size ratio to the base, log quantity ratio to the base, weight)
Point = tuple[str, float, float, float]
# size ratios closer to 1 than this say nothing about the slope
MIN_LOG_RATIO = math.log(1.1)
# caches and allocators saturate: beyond this size ratio (either way) nothing is extrapolated
MAX_LOG_RATIO = math.log(4.0)


def fit_slope(points: Sequence[Point], law: str, unlearned: str, size: str) -> tuple[float, str]:
    """(slope, note): the slope is 0 when fewer than two jobs moved; the note says the `law`
    with its exponent and the jobs it came from, or `unlearned` and why."""
    use = _moved(points)
    if len(use) < 2:
        return 0.0, (
            f"{unlearned}: the warehouse has fewer than two jobs on this device whose {size} "
            "differs from the base's by 10% or more"
        )
    sxy = sum(w * x * y for _, x, y, w in use)
    sxx = sum(w * x * x for _, x, _, w in use)
    slope = max(sxy / sxx, 0.0)
    return slope, f"{law}^{slope:.3f} (from {len(use)} job(s): {', '.join(p[0] for p in use)})"


class SlopeLaw:
    """What `working_set.WorkingSet` and `idle_gaps.IdleGaps` share: the calibration jobs' points and, for
    a law borrowed from a host prior, the span it was learned over."""

    points: list[Point]
    span: tuple[float, float] | None

    @property
    def borrowed(self) -> bool:
        """The law is a host prior's (only `with_prior` sets a span of its own)."""
        return self.span is not None

    @property
    def learned(self) -> bool:
        """The warehouse's own jobs taught the slope."""
        return slope_learned(self.points)


def slope_learned(points: Sequence[Point]) -> bool:
    """Whether the points teach a slope (`fit_slope` fits one): two jobs that moved, at least."""
    return len(_moved(points)) >= 2


def _moved(points: Sequence[Point]) -> list[Point]:
    """The points whose size differs enough from the base's to speak about the slope."""
    return [p for p in points if abs(p[1]) >= MIN_LOG_RATIO and p[3] > 0]


def span_of(points: Sequence[Point]) -> tuple[float, float]:
    """(lowest, highest) log size ratio the points cover, the base's own (0) included."""
    xs = [p[1] for p in points] + [0.0]
    return min(xs), max(xs)


def power_scale(
    slope: float,
    points: Sequence[Point],
    base: float,
    target: float,
    what: str,
    effect: str,
    span: tuple[float, float] | None = None,
) -> tuple[float, str | None]:
    """(target/base ** slope with the ratio clamped, a warning when beyond the log ratios the
    slope was learned over: `span`, else the points')."""
    if slope <= 0 or base <= 0 or target <= 0:
        return 1.0, None
    x = math.log(target / base)
    lo, hi = span if span is not None else span_of(points)
    warn = None
    if x < lo - 1e-9 or x > hi + 1e-9:
        warn = (
            f"{what} {math.exp(x):.2f}x the base's, beyond the {math.exp(lo):.2f}-"
            f"{math.exp(hi):.2f}x its law was learned over: {effect} extrapolated"
        )
        x = min(max(x, -MAX_LOG_RATIO), MAX_LOG_RATIO)
    return math.exp(slope * x), warn


def points_from_rows(
    rows: Sequence[tuple[Any, ...]], sizes: dict[str, float], base: float, min_weight: float = 0.0
) -> list[Point]:
    """Points from calibration-query rows (job, ratio, count, share) and each job's size; the weight is
    the share, at least `min_weight`. Jobs without a ratio, a size or a share are left out."""
    points = []
    for job, ratio, _n, share in rows:
        size = sizes.get(str(job))
        if not ratio or ratio <= 0 or not size or size <= 0 or share is None or base <= 0:
            continue
        w = max(float(share), min_weight)
        points.append((str(job), math.log(size / base), math.log(float(ratio)), w))
    return points


def calibration_sizes(
    wh: Any,
    query: str,
    job: str,
    exclude: Sequence[str],
    states: dict[str, tuple[float, float] | None] | None,
    axis: int,
    max_jobs: int | None = None,
) -> tuple[list[tuple[Any, ...]], dict[str, float], str | None]:
    """(rows of `estimate/<query>`, each job's size on `axis` of `state_of`, why nothing can be
    learned or None). Rows are capped at the `max_jobs` best matched; `states` memoises each
    job's inferred `state_of` (None: not inferable) across calls."""
    from lumos.estimate.calibration_sql import calibration_rows

    (rows,), why = calibration_rows(wh, [query], job, exclude)
    if why:
        return [], {}, why
    if max_jobs is not None:
        rows = sorted(rows, key=lambda r: -(r[3] or 0.0))[:max_jobs]
    states = {} if states is None else states
    for j in [job] + [str(r[0]) for r in rows]:
        if j not in states:
            states[j] = state_bytes(wh, j)
    sizes = {j: b[axis] for j, b in states.items() if b is not None}
    if job not in sizes:
        return rows, sizes, "the base's configuration cannot be inferred"
    return rows, sizes, None


def activations_kept(cfg: Any) -> Any:
    """cfg without activation checkpointing (itself when it has none): the configuration whose
    state `state_of` reads, as a checkpointed step's ops handle the same tensors."""
    return cfg if getattr(cfg, "recompute", "none") == "none" else cfg.replace(recompute="none")


def state_of(cfg: Any, memory_bytes: float | None = None) -> tuple[float, float]:
    """(per-rank training state bytes, one layer's activation bytes per micro-batch) of a
    configuration: the sizes the calibration jobs' op speeds and idle gaps are compared on. Both with the
    activations kept (`memory_bytes` must be so): a checkpointed step's ops handle the same
    tensors, it only replays them instead of keeping them."""
    from lumos.estimate.memory import estimate_memory, layer_activation_bytes

    kept = activations_kept(cfg)
    if kept is not cfg:
        cfg, memory_bytes = kept, None
    if memory_bytes is None:
        memory_bytes = estimate_memory(cfg).memory_bytes
    return float(memory_bytes), float(layer_activation_bytes(cfg))


def state_bytes(wh: Any, job: str) -> tuple[float, float] | None:
    """`state_of` `job`'s inferred configuration; None when it cannot be inferred, or its shapes
    were not recorded (such a job teaches nothing)."""
    from lumos.estimate.infer import infer_base

    try:
        inf = infer_base(wh, job)
    except (LookupError, ValueError):  # JobNotFound, ConfigError, unparsable shapes
        return None
    return None if inf.unread() else state_of(inf.config)


def state_lookup(
    wh: Any, states: dict[str, tuple[float, float] | None]
) -> Callable[[str], float | None]:
    """A job's per-rank training state bytes (None: not inferable), memoised in `states`."""

    def get(job: str) -> float | None:
        if job not in states:
            states[job] = state_bytes(wh, job)
        s = states[job]
        return s[0] if s is not None else None

    return get


def parse_points(d: dict[str, Any]) -> list[Point]:
    return [(str(p[0]), float(p[1]), float(p[2]), float(p[3])) for p in d.get("points", [])]
