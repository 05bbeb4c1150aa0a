"""What the warehouse's other jobs teach about the device: co-location contention.

Ranks of a CPU job share the host's cores, caches and memory bandwidth, so the same operator runs
slower in a 2-rank job than in a single-rank one (on the 2-core ground-truth machine: 1.1-1.45×
per op, measured in the corpus). A single-rank trace cannot show this, so the estimator learns it
from the warehouse (`lumos_sql/estimate/contention.sql`): per multi-rank job on the base's
device, the time-weighted ratio of its top-level ops' slots (duration + the dispatch gap after
them) to the single-rank jobs' slots for the same (name, input shapes). The factor for a world
size is the median over its jobs; a target's CPU work is scaled by f(target world) / f(base
world). World sizes the warehouse has not seen take the nearest smaller one's factor, with a
warning; a warehouse without multi-rank jobs on the device gives 1 and says so.

`exclude` leaves jobs out, so that an accuracy check never learns from the run it predicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# A multi-rank job teaches contention only when most of its op time matched single-rank ops
# (a TP job's sliced GEMMs match nothing; a job of other shapes matches little).
MIN_MATCHED_SHARE = 0.5


@dataclass
class Contention:
    """Slowdown of CPU work by world size (ranks sharing the device), learned per device."""

    by_world: dict[int, float] = field(default_factory=dict)
    jobs: dict[int, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ratios: dict[int, list[float]] = field(default_factory=dict)  # per job, for the interval

    def spread(self, base_world: int, target_world: int) -> tuple[float, float]:
        """(low, high) of the scale over the jobs it was learned from, relative to the median
        (1, 1 when the world size does not change or a single job taught it)."""
        if base_world == target_world:
            return 1.0, 1.0
        w = max([k for k in self.ratios if k <= max(base_world, target_world)], default=None)
        if w is None or w not in self.by_world:
            return 1.0, 1.0
        r = np.array(self.ratios[w]) / self.by_world[w]
        return float(min(r.min(), 1.0)), float(max(r.max(), 1.0))

    def factor(self, world: int) -> tuple[float, str | None]:
        """f(world) and a warning when it is not measured for that world size."""
        if world <= 1:
            return 1.0, None
        if world in self.by_world:
            return self.by_world[world], None
        below = [w for w in self.by_world if w < world]
        if not below:
            return 1.0, (
                f"no multi-rank job of world {world} or less on this device in the warehouse: "
                "ranks sharing the device are assumed not to slow each other"
            )
        w = max(below)
        return self.by_world[w], (
            f"contention of world {world} taken from world {w} ({self.by_world[w]:.2f}x), the "
            "largest the warehouse holds on this device"
        )

    def scale(self, base_world: int, target_world: int) -> tuple[float, list[str]]:
        fb, wb = self.factor(base_world)
        ft, wt = self.factor(target_world)
        warn = [w for w in (wb, wt) if w]
        return ft / fb, warn

    def to_dict(self) -> dict[str, Any]:
        return {
            "by_world": {str(k): v for k, v in self.by_world.items()},
            "jobs": {str(k): v for k, v in self.jobs.items()},
            "notes": self.notes,
            "ratios": {str(k): v for k, v in self.ratios.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Contention:
        if not d:
            return cls(notes=["no contention model cached"])
        return cls(
            {int(k): float(v) for k, v in d.get("by_world", {}).items()},
            {int(k): list(v) for k, v in d.get("jobs", {}).items()},
            list(d.get("notes", [])),
            {int(k): [float(x) for x in v] for k, v in d.get("ratios", {}).items()},
        )

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, ...]]) -> Contention:
        """From `contention.sql` rows (world, job, ratio, n_keys, share)."""
        per: dict[int, list[tuple[str, float]]] = {}
        for world, job, ratio, _n, share in rows:
            if ratio and ratio > 0 and share is not None and share >= MIN_MATCHED_SHARE:
                per.setdefault(int(world), []).append((str(job), float(ratio)))
        out = cls()
        for w, items in sorted(per.items()):
            out.by_world[w] = float(np.median([r for _, r in items]))
            out.jobs[w] = [j for j, _ in items]
            out.ratios[w] = [r for _, r in items]
            out.notes.append(
                f"world {w}: ops {out.by_world[w]:.2f}x slower than single-rank "
                f"(median of {len(items)} job(s): {', '.join(out.jobs[w])})"
            )
        if not per:
            out.notes.append("no multi-rank job on this device to learn contention from")
        return out

    @classmethod
    def calibrate(cls, wh: Any, job: str, exclude: Sequence[str] = ()) -> Contention:
        import duckdb

        import lumos_sql

        try:
            con = duckdb.connect(str(wh.catalog), read_only=True)
        except duckdb.Error:
            return cls(notes=["no catalog to learn contention from"])
        try:
            rows = con.execute(
                lumos_sql.load("estimate/contention"), {"job": job, "exclude": list(exclude)}
            ).fetchall()
        except duckdb.Error as e:
            return cls(notes=[f"contention not learned ({e})"])
        finally:
            con.close()
        return cls.from_rows(rows)
