"""Priors for the calibration laws, for a host the warehouse has not measured yet.

The calibration models (`comm`, `contention.Contention`, `working_set`, `idle_gaps`) learn a device's
laws from the warehouse's other jobs; a warehouse holding only the base job teaches none of them.
A `HostPrior` is those laws as one corpus measured them on one kind of host, kept as a JSON file
per device kind (`priors/cpu.json`, learned by `learn` from `tests/data/corpus`). Each model takes
the prior only for what its own warehouse could not teach, and says so in its notes. GPU devices
have no prior. Why, and how accurate: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PRIOR_DIR = Path(__file__).with_name("priors")


@dataclass(frozen=True)
class HostPrior:
    """The calibration laws of one kind of host, and where they were learned (`source`)."""

    kind: str
    source: str
    # collectives (comm.CommModel): ring step latency and bandwidth, synchronous step latency,
    # an exposed asynchronous all-reduce's peer wait
    alpha_ns: float
    bw_bytes_per_ns: float
    sync_alpha_ns: float
    exposed_wait_ns: float
    # co-location (contention.Contention): world size -> slowdown, and each job's ratio (intervals)
    contention: dict[int, float] = field(default_factory=dict)
    contention_ratios: dict[int, list[float]] = field(default_factory=dict)
    lockstep: dict[int, float] = field(default_factory=dict)
    lockstep_ratios: dict[int, list[float]] = field(default_factory=dict)
    # working set (working_set.WorkingSet): exponent, the log state ratios it was learned over,
    # and how far whole jobs strayed from it
    beta: float = 0.0
    beta_span: tuple[float, float] = (0.0, 0.0)
    beta_spread: tuple[float, float] = (1.0, 1.0)
    # idle gaps (idle_gaps.IdleGaps): exponent and the log activation ratios it was learned over
    gamma: float = 0.0
    gamma_span: tuple[float, float] = (0.0, 0.0)
    # attention ops (op_times.OpTimes): per op name, the coefficients of `attention_terms`
    attention: dict[str, list[float]] = field(default_factory=dict)
    # the CPU cores of the host the calibration jobs ran on (contention.Contention: more ranks
    # time-share them)
    cores: int = 0

    def cite(self) -> str:
        """How a note names the prior: the file, which says where it was learned."""
        return f"the {self.kind} host prior (lumos/estimate/priors/{self.kind}.json)"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("contention", "contention_ratios", "lockstep", "lockstep_ratios"):
            d[k] = {str(w): v for w, v in d[k].items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostPrior:
        def worlds(k: str) -> dict[int, Any]:
            return {int(w): v for w, v in d.get(k, {}).items()}

        return cls(
            str(d["kind"]),
            str(d["source"]),
            float(d["alpha_ns"]),
            float(d["bw_bytes_per_ns"]),
            float(d["sync_alpha_ns"]),
            float(d["exposed_wait_ns"]),
            worlds("contention"),
            worlds("contention_ratios"),
            worlds("lockstep"),
            worlds("lockstep_ratios"),
            float(d.get("beta", 0.0)),
            _pair(d.get("beta_span"), 0.0),
            _pair(d.get("beta_spread"), 1.0),
            float(d.get("gamma", 0.0)),
            _pair(d.get("gamma_span"), 0.0),
            {str(k): [float(x) for x in v] for k, v in d.get("attention", {}).items()},
            int(d.get("cores", 0)),
        )


def _pair(v: Any, default: float) -> tuple[float, float]:
    return (float(v[0]), float(v[1])) if v else (default, default)


def load(kind: str) -> HostPrior | None:
    """The packaged prior of a device kind ('cpu', 'gpu'), or None when there is none."""
    path = PRIOR_DIR / f"{kind}.json"
    if not path.is_file():
        return None
    try:
        return HostPrior.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a host prior ({e})") from None


def describe(p: HostPrior) -> list[str]:
    """One line per law, for a person reading a prior (the figures docs/estimate.md quotes)."""
    return [
        f"collectives: {p.alpha_ns / 1e3:.0f} us per ring step, {p.bw_bytes_per_ns:.2f} GB/s; "
        f"synchronous {p.sync_alpha_ns / 1e3:.0f} us per step; exposed bucket waits "
        f"{p.exposed_wait_ns / 1e3:.0f} us",
        f"contention ({p.cores or 'unknown'} cores): "
        + ", ".join(f"world {w} {v:.2f}x" for w, v in sorted(p.contention.items()))
        + "; lock-step "
        + ", ".join(f"world {w} {v:.2f}x" for w, v in sorted(p.lockstep.items())),
        f"working set: ops slow as state^{p.beta:.3f} (state {math.exp(p.beta_span[0]):.2f}-"
        f"{math.exp(p.beta_span[1]):.2f}x the base)",
        f"idle gaps: act^{p.gamma:.3f} (activations {math.exp(p.gamma_span[0]):.2f}-"
        f"{math.exp(p.gamma_span[1]):.2f}x the base)",
        f"attention times by shape: {', '.join(sorted(p.attention)) or 'none'}",
    ]
