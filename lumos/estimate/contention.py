"""Co-location contention: how much slower an operator runs with more ranks on the host.

A single-rank trace cannot show that ranks sharing a host's cores, caches and memory bandwidth
slow each other, so `Contention` learns it from the warehouse's other jobs on the base's device
(`lumos_sql/estimate/contention.sql`): per multi-rank job, the time-weighted ratio of its ops'
slots to the single-rank jobs' for the same ops, less what its own training state explains. The
factor of a world size is the median over its jobs, times the ranks per core; lock-step
(tensor-parallel) jobs teach a separate factor. `exclude` leaves jobs out, so that an accuracy
check never learns from the run it predicts. Measurements: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from lumos.estimate.priors import HostPrior


# how a note about cores the user did not give says how to give them
ANOTHER_HOST = "--host-cores N for another host"


def ranks_per_core(world: int, cores: int) -> float:
    """How many ranks share each core when `world` ranks run on `cores` cores (1 when they fit
    or the cores are unknown: 0)."""
    return max(1.0, world / cores) if cores > 0 else 1.0


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
    # learned from jobs whose ranks run in lock-step (synchronous collectives: TP)
    lockstep: Contention | None = None
    # the notes of the factors taken from a host prior (an estimate that uses them warns)
    borrowed: list[str] = field(default_factory=list)
    # the host's CPU cores the ranks share (0: unknown): ranks beyond them time-share them;
    # and where that number came from (a warning names it)
    cores: int = 0
    cores_source: str = ""

    def with_cores(self, cores: int, source: str = "") -> Contention:
        """This model on a host of `cores` cores, as `source` says (its lock-step model too)."""
        ls = self.lockstep.with_cores(cores, source) if self.lockstep is not None else None
        return dataclasses.replace(self, lockstep=ls, cores=max(int(cores), 0), cores_source=source)

    def _time_share_note(self, world: int, shared: float) -> str:
        """What a time-shared world's factor owes to the cores, and where they came from."""
        if shared <= 1:
            return ""
        source = f" ({self.cores_source})" if self.cores_source else ""
        return f"x{shared:.2f}: its {world} ranks time-share the host's {self.cores} cores{source}"

    def time_share(self, world: int) -> float:
        """`ranks_per_core` on this host: each rank's CPU work, its collectives' included, runs
        that much longer."""
        return ranks_per_core(world, self.cores)

    def _for(self, lockstep: bool, world: int) -> Contention:
        """The model that speaks for a `world`-rank job of this kind (lock-step: its own when
        the warehouse has lock-step jobs of at most that world size)."""
        ls = self.lockstep
        if lockstep and world > 1 and ls is not None and any(w <= world for w in ls.by_world):
            return ls
        return self

    def spread(
        self,
        base_world: int,
        target_world: int,
        base_lockstep: bool = False,
        target_lockstep: bool = False,
    ) -> tuple[float, float]:
        """(low, high) of the scale over the jobs it was learned from, relative to the median
        (1, 1 when the world size and kind do not change or a single job taught it)."""
        if base_world == target_world and base_lockstep == target_lockstep:
            return 1.0, 1.0
        # the larger world speaks; at equal worlds, the lock-step side
        big, lockstep = max((base_world, base_lockstep), (target_world, target_lockstep))
        c = self._for(lockstep, big)
        w = max([k for k in c.ratios if k <= big], default=None)
        if w is None or w not in c.by_world:
            return 1.0, 1.0
        r = np.array(c.ratios[w]) / c.by_world[w]
        return float(min(r.min(), 1.0)), float(max(r.max(), 1.0))

    def factor(self, world: int, lockstep: bool = False) -> tuple[float, str | None]:
        """f(world) and a warning when it is not measured for that world size (and kind)."""
        if world <= 1:
            return 1.0, None
        c = self._for(lockstep, world)
        if c is not self:
            return c.with_cores(self.cores, self.cores_source).factor(world)
        if lockstep and self.by_world:
            f, warn = self.factor(world)
            return f, (
                f"no lock-step (tensor-parallel) job of world {world} or less on this device: "
                "contention taken from the other multi-rank jobs" + (f"; {warn}" if warn else "")
            )
        shared = self.time_share(world)
        timeshare = self._time_share_note(world, shared)
        if world in self.by_world:
            return self.by_world[world] * shared, timeshare or None
        below = [w for w in self.by_world if w < world]
        if not below:
            return shared, (
                f"no multi-rank job of world {world} or less on this device in the warehouse: "
                + (timeshare or "ranks sharing the device are assumed not to slow each other")
            )
        w = max(below)
        return self.by_world[w] * shared, (
            f"contention of world {world} taken from world {w} ({self.by_world[w]:.2f}x), the "
            "largest the warehouse holds on this device" + (f"; {timeshare}" if timeshare else "")
        )

    def scale(
        self,
        base_world: int,
        target_world: int,
        base_lockstep: bool = False,
        target_lockstep: bool = False,
    ) -> tuple[float, list[str]]:
        fb, wb = self.factor(base_world, base_lockstep)
        ft, wt = self.factor(target_world, target_lockstep)
        warn = [w for w in (wb, wt) if w]
        return ft / fb, warn

    def with_prior(self, p: HostPrior) -> Contention:
        """This model, with the host prior's factors where the warehouse taught none (multi-rank
        jobs, lock-step jobs: each on its own)."""
        out = Contention(
            dict(self.by_world),
            dict(self.jobs),
            [],
            dict(self.ratios),
            self.lockstep,
            cores=self.cores,
            cores_source=self.cores_source,
        )
        if not out.by_world:
            out.by_world, out.ratios = dict(p.contention), dict(p.contention_ratios)
            out.jobs = {w: [p.cite()] for w in p.contention}
            out.notes.append(_prior_note("", p.contention, p))
            out.borrowed.append(out.notes[-1])
            # its worlds were measured on the prior's host: so are the cores they shared
            out.cores, out.cores_source = p.cores, f"those of {p.cite()}; {ANOTHER_HOST}"
        else:
            own = self.lockstep.notes if self.lockstep is not None else []
            out.notes += [n for n in self.notes if n not in own]
        if self.lockstep is None or not self.lockstep.by_world:
            out.lockstep = Contention(
                dict(p.lockstep),
                {w: [p.cite()] for w in p.lockstep},
                [_prior_note("lock-step ", p.lockstep, p)],
                dict(p.lockstep_ratios),
            )
            out.notes += out.lockstep.notes
            out.borrowed += out.lockstep.notes
        else:
            out.notes += self.lockstep.notes
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "by_world": {str(k): v for k, v in self.by_world.items()},
            "jobs": {str(k): v for k, v in self.jobs.items()},
            "notes": self.notes,
            "ratios": {str(k): v for k, v in self.ratios.items()},
            "lockstep": self.lockstep.to_dict() if self.lockstep is not None else None,
            "borrowed": self.borrowed,
            "cores": self.cores,
            "cores_source": self.cores_source,
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
            cls.from_dict(d["lockstep"]) if d.get("lockstep") else None,
            list(d.get("borrowed", [])),
            int(d.get("cores", 0)),
            str(d.get("cores_source", "")),
        )

    @classmethod
    def from_rows(
        cls, rows: Sequence[tuple[Any, ...]], lockstep_jobs: Sequence[str] = ()
    ) -> Contention:
        """From `contention.sql` rows (world, job, ratio, n_keys, share); the jobs named in
        `lockstep_jobs` (synchronous collectives) teach the `lockstep` factor."""
        ls = set(lockstep_jobs)
        out = cls._learn([r for r in rows if r[1] not in ls], MIN_MATCHED_SHARE, "")
        if ls:
            out.lockstep = cls._learn([r for r in rows if r[1] in ls], 0.0, "lock-step ")
            out.notes += out.lockstep.notes
        return out

    @classmethod
    def _learn(cls, rows: Sequence[tuple[Any, ...]], min_share: float, kind: str) -> Contention:
        per: dict[int, list[tuple[str, float]]] = {}
        for world, job, ratio, _n, share, *_refs in rows:
            if ratio and ratio > 0 and share is not None and share >= min_share:
                per.setdefault(int(world), []).append((str(job), float(ratio)))
        out = cls()
        for w, items in sorted(per.items()):
            out.by_world[w] = float(np.median([r for _, r in items]))
            out.jobs[w] = [j for j, _ in items]
            out.ratios[w] = [r for _, r in items]
            out.notes.append(
                f"{kind}world {w}: ops {out.by_world[w]:.2f}x slower than single-rank "
                f"(median of {len(items)} job(s): {', '.join(out.jobs[w])})"
            )
        if not per:
            out.notes.append(f"no {kind}multi-rank job on this device to learn contention from")
        return out

    @classmethod
    def calibrate(
        cls,
        wh: Any,
        job: str,
        exclude: Sequence[str] = (),
        lockstep_jobs: Sequence[str] = (),
        state_scale: Callable[[str, Sequence[Mapping[str, Any]]], float] | None = None,
    ) -> Contention:
        """Learned from the warehouse's jobs on `job`'s device, leaving out `exclude`; the jobs
        in `lockstep_jobs` (`CommModel.lockstep_jobs`) teach the lock-step factor.
        `state_scale(job, refs)` is the working set's part of a job's ratio (its state against
        that of the single-rank jobs it was compared with, `refs`): it is divided out, since an
        estimate scales the target by its own state apart (`working_set.WorkingSet`)."""
        from lumos.estimate.calibration_sql import calibration_rows

        (rows,), why = calibration_rows(wh, ["contention"], job, exclude)
        if why:
            return cls(notes=[f"contention not learned ({why})"])
        if state_scale is not None:
            rows = [
                (w, j, r / state_scale(str(j), refs or []) if r else r, n, sh)
                for w, j, r, n, sh, refs in rows
            ]
        return cls.from_rows(rows, lockstep_jobs)


def _prior_note(kind: str, factors: dict[int, float], p: HostPrior) -> str:
    worlds = ", ".join(f"world {w} {f:.2f}x" for w, f in sorted(factors.items()))
    return (
        f"{kind}contention from {p.cite()}: {worlds} (no {kind}multi-rank job on this device in "
        "the warehouse; ingest such jobs of this host to learn its own)"
    )
