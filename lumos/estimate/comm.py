"""Cost of the collectives the transforms insert.

Ring all-reduce over n ranks: ``2(n-1)·alpha + 2(n-1)/n · bytes / bw`` (0 when n = 1); a ring
reduce-scatter or all-gather of a `bytes` tensor half of it, ``(n-1)·alpha + (n-1)/n · bytes / bw``;
point-to-point: ``alpha + bytes / bw``; a send costs the sender ``alpha``. `CommModel.calibrate`
fits ``alpha`` and ``bw`` on the warehouse's collectives of the job's kind of device
(`lumos_sql/estimate/comm_samples.sql`), and learns two latencies the transfer alone misses:
`sync_alpha_ns` (a synchronous all-reduce's hand-off, peer wait and wake-up) and
`exposed_wait_ns` (the wait for the later peer on DDP's exposed last bucket), both from
`lumos_sql/estimate/collective_waits.sql`. Without samples each falls back and says so in its
notes. Why and what was measured: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from lumos.estimate.priors import HostPrior

# the source of a model fitted on the warehouse's all-reduces
FIT_SOURCE = "warehouse all-reduces"
# Defaults when the warehouse holds no collective to fit on (ns, bytes/ns).
DEFAULTS = {
    "cpu": (40_000.0, 1.0),  # gloo over loopback, one thread per rank
    "gpu": (5_000.0, 50.0),  # NCCL inside a node
}

# Intra-node link bandwidth of one GPU, per direction (GB/s = bytes/ns), by a pattern of the
# device's CUDA/ROCm name (first match, case-insensitive), from the vendors' datasheets:
# NVLink 4 on H100/H200 SXM 900 GB/s both ways, NVLink 3 on A100 SXM 600, NVLink 2 on V100 SXM2
# 300, NVLink 5 on B200 1.8 TB/s, Infinity Fabric on MI300X 7 x 64 GB/s; the PCIe cards their
# slot's (H100 PCIe: gen5 x16, A100 PCIe: gen4 x16, V100 PCIe: gen3 x16). H800 and A800 SXM:
# NVLink at 400 GB/s both ways. The Ada and Ampere PCIe cards (L40S, L40, L4, RTX 6000 Ada, RTX
# 4090, A10, A40, RTX A6000): gen4 x16 (the A40's and A6000's NVLink bridge joins only pairs). A
# device not listed keeps DEFAULTS["gpu"].
LINK_BW: tuple[tuple[str, float], ...] = (
    (r"H100.*PCIE|H800.*PCIE", 64.0),
    (r"H100|H200|GH200", 450.0),
    (r"H800|A800", 200.0),
    (r"A100.*PCIE", 32.0),
    (r"A100", 300.0),
    (r"L40|\bL4\b|RTX 6000 Ada|4090|\bA10\b|\bA40\b|A6000", 32.0),
    (r"(?<!G)B200", 900.0),
    (r"MI300X", 448.0),
    (r"V100.*PCIE", 16.0),
    (r"V100", 150.0),
)
# NCCL's ring all-reduce moves data at about this share of the link (nccl-tests' bus bandwidth
# on 8-GPU NVLink nodes); an assumption until the warehouse holds all-reduces of the device
NCCL_BUS_EFFICIENCY = 0.8
# GPUs of one node (HGX / DGX boards of SXM GPUs, MI300X platforms): a group whose ranks span
# more than a node's GPUs crosses the network
GPUS_PER_NODE = 8
# The network link of one GPU to other nodes, per direction (GB/s), by a pattern of the device's
# name (first match): one NIC per GPU on DGX/HGX nodes (H100/H200/B200: ConnectX-7 400 Gb/s;
# A100: HDR 200 Gb/s; MI300X: 400 Gb/s); V100 DGX-1: four EDR 100 Gb/s NICs for eight GPUs.
# Others: 100 Gb/s.
NODE_LINK_BW: tuple[tuple[str, float], ...] = (
    (r"H100|H200|GH200|B200|MI300X", 50.0),
    (r"A100", 25.0),
    (r"V100", 6.25),
)
DEFAULT_NODE_LINK_BW = 12.5


@dataclass
class CommModel:
    alpha_ns: float
    bw_bytes_per_ns: float
    source: str
    notes: list[str] = field(default_factory=list)
    sync_alpha_ns: float | None = None
    sync_notes: list[str] = field(default_factory=list)
    exposed_wait_ns: float = 0.0
    exposed_notes: list[str] = field(default_factory=list)
    # jobs whose collectives were synchronous: their ranks run in lock-step (contention.Contention)
    lockstep_jobs: list[str] = field(default_factory=list)
    exposed_learned: bool = False
    # the network link between nodes (bytes/ns, at NCCL_BUS_EFFICIENCY); None: one node
    node_bw_bytes_per_ns: float | None = None

    @property
    def learned_fit(self) -> bool:
        """alpha and bw were fitted on the warehouse's all-reduces (not defaults or a prior)."""
        return self.source == FIT_SOURCE

    def with_prior(self, p: HostPrior) -> CommModel:
        """A copy whose unlearned parts come from the host prior `p`, each saying so."""
        out = replace(self)
        why = "ingest multi-rank jobs of this host to learn its own"
        if not self.learned_fit:
            out.alpha_ns, out.bw_bytes_per_ns, out.source = p.alpha_ns, p.bw_bytes_per_ns, "prior"
            out.notes = [
                f"collective costs from {p.cite()}: {p.alpha_ns / 1e3:.0f} us per ring step, "
                f"{p.bw_bytes_per_ns:.2f} GB/s (no all-reduce on this device in the warehouse; "
                f"{why})"
            ]
        if self.sync_alpha_ns is None:
            out.sync_alpha_ns = p.sync_alpha_ns
            out.sync_notes = [
                f"synchronous all-reduces: {p.sync_alpha_ns / 1e3:.0f} us per ring step from "
                f"{p.cite()} (no blocking all-reduce on this device in the warehouse; {why})"
            ]
        if not self.exposed_learned:
            out.exposed_wait_ns = p.exposed_wait_ns
            out.exposed_notes = [
                f"exposed all-reduces (DDP's last bucket): {p.exposed_wait_ns / 1e3:.0f} us of "
                f"peer wait from {p.cite()} (none on this device in the warehouse; {why})"
            ]
        return out

    def with_node_link(self, device: str | None) -> CommModel:
        """A copy that knows the network between nodes of GPUs named `device` (`NODE_LINK_BW`)."""
        import re

        gbs = next(
            (g for pat, g in NODE_LINK_BW if device and re.search(pat, device, re.IGNORECASE)),
            DEFAULT_NODE_LINK_BW,
        )
        return replace(self, node_bw_bytes_per_ns=gbs * NCCL_BUS_EFFICIENCY)

    def spanning(self, n: int, stride: int = 1) -> CommModel:
        """The model for a group of `n` ranks `stride` GPUs apart (Megatron's placement: TP
        innermost, then DP, then PP): within a node while ``n * stride <= GPUS_PER_NODE``,
        else its ring crosses the network and moves at the slower of the two links."""
        if self.node_bw_bytes_per_ns is None or n * stride <= GPUS_PER_NODE:
            return self
        return replace(self, bw_bytes_per_ns=min(self.bw_bytes_per_ns, self.node_bw_bytes_per_ns))

    def take_asked(self) -> list[str]:
        """What the sizes asked since the last call needed beyond `notes` (a model fitted on
        benchmarks says which curve or extrapolation priced them: `comm_bench`); none here."""
        return []

    def node_note(self) -> str:
        """What `spanning` assumes, for an estimate's notes."""
        if self.node_bw_bytes_per_ns is None:
            return ""
        return (
            f"a group spanning more than {GPUS_PER_NODE} GPUs (a node; TP ranks adjacent, then "
            f"DP, then PP) runs at the network link, {self.node_bw_bytes_per_ns:.0f} GB/s"
        )

    def allreduce_ns(self, nbytes: float, n: int, sync: bool = False) -> float:
        """A ring all-reduce; `sync` for one the caller blocks on (with its learned latency)."""
        if n <= 1:
            return 0.0
        alpha = self.sync_alpha_ns if sync and self.sync_alpha_ns is not None else self.alpha_ns
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / self.bw_bytes_per_ns

    def reduce_scatter_ns(self, nbytes: float, n: int, sync: bool = False) -> float:
        """A ring reduce-scatter of a `nbytes` tensor (each rank keeps 1/n of the sum)."""
        return self.allreduce_ns(nbytes, n, sync) / 2

    def all_gather_ns(self, nbytes: float, n: int, sync: bool = False) -> float:
        """A ring all-gather into a `nbytes` tensor (each rank contributes 1/n of it)."""
        return self.allreduce_ns(nbytes, n, sync) / 2

    def exposed_allreduce_ns(self, nbytes: float, n: int) -> float:
        """An asynchronous all-reduce the step waits for: its transfer plus the peer wait."""
        return self.allreduce_ns(nbytes, n) + (self.exposed_wait_ns if n > 1 else 0.0)

    def p2p_ns(self, nbytes: float) -> float:
        return self.alpha_ns + nbytes / self.bw_bytes_per_ns

    def send_ns(self) -> float:
        return self.alpha_ns

    @classmethod
    def default(cls, kind: str = "cpu") -> CommModel:
        a, b = DEFAULTS[kind]
        return cls(
            a,
            b,
            f"default-{kind}",
            [f"collective costs from {kind} defaults (no collective in the warehouse to fit on)"],
        )

    @classmethod
    def for_device(cls, name: str | None) -> CommModel:
        """NCCL inside a node of GPUs named `name`: the link's bandwidth (`LINK_BW`) at
        `NCCL_BUS_EFFICIENCY`, the GPU default's per-step latency; the GPU default when the
        device is not in the table."""
        import re

        alpha, _ = DEFAULTS["gpu"]
        for pattern, gbs in LINK_BW:
            if name and re.search(pattern, name, re.IGNORECASE):
                bw = gbs * NCCL_BUS_EFFICIENCY
                return cls(
                    alpha,
                    bw,
                    "device-link",
                    [
                        f"collective costs from {name}'s link: {gbs:.0f} GB/s per direction at "
                        f"{NCCL_BUS_EFFICIENCY:.0%} (NCCL ring), {alpha / 1e3:.0f} us per ring "
                        "step (no all-reduce on this device in the warehouse to fit on)"
                    ],
                )
        return cls.default("gpu")

    @classmethod
    def fit(cls, nbytes: np.ndarray, per_step_ns: np.ndarray, source: str) -> CommModel | None:
        """Least squares of t = alpha + bytes/bw over single-step samples (two sizes at least)."""
        if nbytes.size < 2 or np.unique(nbytes).size < 2:
            return None
        a_mat = np.stack([np.ones(nbytes.size), nbytes.astype(float)], axis=1)
        coef, *_ = np.linalg.lstsq(a_mat, per_step_ns.astype(float), rcond=None)
        if coef[1] <= 0:
            return None
        if coef[0] < 0:  # the sizes put the line below the origin: bandwidth alone, through it
            slope = float(np.dot(nbytes, per_step_ns) / np.dot(nbytes, nbytes))
            return cls(1.0, 1.0 / slope, source) if slope > 0 else None
        return cls(max(float(coef[0]), 1.0), 1.0 / float(coef[1]), source)

    @classmethod
    def calibrate(
        cls,
        wh: Any,
        job: str,
        exclude: Sequence[str] = (),
        tp_groups: dict[str, int] | None = None,
    ) -> CommModel:
        """Fit on the warehouse's all-reduces on the same kind of device (leaving out the jobs
        in `exclude`), else the defaults. A job of more ranks than its host's cores (where its
        recorder wrote them, else the base's) ran its collectives time-shared: their times are
        divided by its ranks per core, and an estimate multiplies them back for its target.
        `tp_groups` memoises each job's tensor-parallel group across calls."""
        from lumos.estimate.calibration_sql import calibration_rows

        (rows, sync_rows, cores), why = calibration_rows(
            wh, ["comm_samples", "collective_waits", "host_cores"], job, exclude
        )
        if why == "no catalog":
            return cls.default()
        per_core = _per_core(dict(cores), job)
        kind = "cpu"
        samples = [
            (r[0], _elements(r[1]) * 4, r[2] / per_core(r[4], r[0]))
            for r in rows
            if r[1] and r[2] and r[2] > 0
        ]
        if rows:
            kind = rows[-1][3] or "cpu"
        model = cls._fit_samples(samples) if samples else None
        if model is None:
            model = cls.default("cpu" if kind == "cpu" else "gpu")
        waits = {"sync": [], "exposed": []}
        group = _tp_group(wh, tp_groups)
        for world, dims, t, _kind, sample, owner, *_ in sync_rows:
            if dims and t:
                # a synchronous all-reduce rings over its tensor-parallel group, not the world
                n = group(owner, world) if sample == "sync" else world
                waits[sample].append((n, _elements(dims) * 4, t / per_core(owner, world)))
        model._attach_sync(waits["sync"])
        model._attach_exposed(waits["exposed"])
        model.lockstep_jobs = sorted({r[5] for r in sync_rows if r[4] == "sync"})
        return model

    def _attach_exposed(self, samples: list[tuple[Any, int, float]]) -> None:
        """Peer wait of exposed asynchronous all-reduces: each size's mean duration less its
        transfer (never negative), averaged over sizes."""
        if not samples:
            self.exposed_wait_ns = 0.0
            self.exposed_notes = [
                "no exposed asynchronous all-reduce in the warehouse on this device: DDP's last "
                "bucket costs its transfer only (the wait for the later peer is not modelled)"
            ]
            return
        groups = _by_size(samples)
        excess = [
            max(float(np.mean(ts)) - self.allreduce_ns(nbytes, n), 0.0)
            for (n, nbytes), ts in groups.items()
        ]
        self.exposed_wait_ns = float(np.mean(excess))
        self.exposed_learned = True
        self.exposed_notes = [
            f"exposed all-reduces (DDP's last bucket): {self.exposed_wait_ns / 1e3:.0f} us of "
            f"peer wait beyond the transfer, learned from {len(samples)} collective(s) of "
            f"{len(groups)} size(s) in the warehouse"
        ]

    def _attach_sync(self, samples: list[tuple[Any, int, float]]) -> None:
        """Per-step latency of synchronous all-reduces: each size's mean blocking, less the
        transfer at the fitted bandwidth, per ring step; averaged over sizes."""
        if not samples:
            self.sync_notes = [
                "no synchronous all-reduce in the warehouse on this device: tensor-parallel "
                "all-reduces cost their transfer only (hand-off and peer waits not modelled)"
            ]
            return
        groups = _by_size(samples)
        per_size = []
        for (n, nbytes), ts in groups.items():
            step = float(np.mean(ts)) / (2 * (n - 1)) - nbytes / n / self.bw_bytes_per_ns
            per_size.append(max(step, self.alpha_ns))
        self.sync_alpha_ns = float(np.mean(per_size))
        self.sync_notes = [
            f"synchronous all-reduces: {self.sync_alpha_ns / 1e3:.0f} us per ring step learned "
            f"from {len(samples)} blocking call(s) of {len(groups)} size(s) in the warehouse"
        ]

    @classmethod
    def _fit_samples(cls, samples: list[tuple[Any, int, int]]) -> CommModel | None:
        """Fit on the lower quartile of each (group size, message size): a collective's own cost
        is its least inflated instance; waiting for a late peer or for a core only adds."""
        groups = _by_size(samples)
        keys = sorted(groups)
        # a ring all-reduce of n ranks: 2(n-1) steps of bytes/n each
        n = np.array([k[0] for k in keys], float)
        per_step_bytes = np.array([k[1] for k in keys], float) / n
        t = np.array([np.percentile(groups[k], 25) for k in keys]) / (2 * (n - 1))
        m = cls.fit(per_step_bytes, t, FIT_SOURCE)
        if m is None:
            return None
        m.notes = [
            f"collective costs fitted on {len(samples)} all-reduce(s) of {len(keys)} size(s) in "
            f"the warehouse (alpha {m.alpha_ns / 1e3:.1f} us, {m.bw_bytes_per_ns:.2f} GB/s)"
        ]
        return m


def _by_size(samples: Sequence[tuple[Any, int, float]]) -> dict[tuple[int, int], list[float]]:
    """Durations per (group size, message bytes); an unknown group size counts as 2."""
    groups: dict[tuple[int, int], list[float]] = {}
    for n, nbytes, t in samples:
        groups.setdefault((max(int(n or 2), 2), int(nbytes)), []).append(float(t))
    return groups


def _elements(dims_json: str) -> int:
    """Elements of the first tensor of an `Input Dims` JSON text (0 when unreadable)."""
    import json

    try:
        dims = json.loads(dims_json)
    except ValueError:
        return 0
    while isinstance(dims, list) and dims and isinstance(dims[0], list):
        dims = dims[0]
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return 0
    return int(np.prod(dims)) if dims else 0


def _per_core(cores: dict[str, int], base: str) -> Callable[[str, int], float]:
    """(job, world) -> ranks per core of that job (`contention.ranks_per_core`): its host's cores
    where recorded, else the base's."""
    from lumos.estimate.contention import ranks_per_core

    def share(job: str, world: int) -> float:
        return ranks_per_core(world, cores.get(job) or cores.get(base) or 0)

    return share


def _tp_group(wh: Any, seen: dict[str, int] | None = None) -> Callable[[str, int], int]:
    """(job, world) -> the ranks a synchronous all-reduce of that job rings over: its inferred
    tensor-parallel degree (gloo records no group size, and the DP × TP job's world is several
    TP groups), else the world; memoised per job in `seen`."""
    from lumos.estimate.infer import infer_base

    seen = {} if seen is None else seen

    def group(job: str, world: int) -> int:
        if job not in seen:
            try:
                tp = int(infer_base(wh, job).config.tp)
            except (LookupError, ValueError):
                tp = 0
            seen[job] = tp if 1 < tp <= world else world
        return seen[job]

    return group
