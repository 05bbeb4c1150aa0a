"""Collective costs from the device's NCCL micro-benchmarks (`lumos opbench`), through `lumos.opmodel`.

The GPU estimate's second tier of collective costs, between the warehouse's own traced all-reduces
of the device and its datasheet link (`CommModel.for_device`). Each benchmark file (`allreduce`,
`allreduce_large`, `p2p`, one per layout N nodes x G GPUs) gets the opmodel's fitted physics
(stage 1 alone: `t = c0 + bytes / bw`, the ring formula with that layout's group fixed); a size
outside every file's range is extrapolated by the nearest file's formula and flagged in the
notes. An all-reduce over n ranks takes the 1 x n curve; how other n are priced: `group_curve`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lumos.estimate.comm import CommModel

if TYPE_CHECKING:
    import pandas as pd

    from lumos.opmodel.fit import OpModel

__all__ = ["ALLREDUCE_FILES", "P2P_FILES", "BenchCommModel", "Curve", "from_opbench"]

SOURCE = "opbench micro-benchmarks"
# benchmark files (opbench operators) whose rows price an all-reduce, a pipeline transfer
ALLREDUCE_FILES = ("allreduce", "allreduce_large")
P2P_FILES = ("p2p",)


@dataclass(frozen=True)
class Curve:
    """One benchmark file's fitted time for one layout, over the message sizes it measured."""

    operator: str
    nodes: int
    gpus_per_node: int
    model: OpModel
    lo_bytes: float
    hi_bytes: float

    @property
    def group(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def layout(self) -> str:
        return f"{self.nodes}_{self.gpus_per_node}"

    def us(self, nbytes: float) -> float:
        """The opmodel's prediction at `nbytes` (fp16 elements of the benchmark's `shape`)."""
        import numpy as np

        from lumos.opmodel.features import BYTES
        from lumos.opmodel.predict import predict

        cols = {
            "shape": np.array([nbytes / BYTES]),
            "nodes": np.array([float(self.nodes)]),
            "gpus_per_node": np.array([float(self.gpus_per_node)]),
        }
        return float(predict(self.model, cols).us[0])

    def ring(self) -> tuple[float, float]:
        """(alpha ns per ring step, bytes/ns) of the fitted `c0 + bytes·b` read as a ring
        all-reduce of this layout's group: 2(g-1)·alpha + 2(g-1)/g · bytes / bw."""
        c0_us, us_per_byte = float(self.model.phys[0]), float(self.model.phys[2])
        steps = 2 * (self.group - 1)
        return c0_us * 1e3 / steps, steps / self.group / (us_per_byte * 1e3)


def _pick(curves: list[Curve], nbytes: float) -> tuple[Curve, str]:
    """The curve whose measured sizes hold `nbytes`, else the nearest one (log distance) and
    which way the size lies outside ('below' / 'above' / '' inside)."""
    import math

    for c in curves:
        if c.lo_bytes <= nbytes <= c.hi_bytes:
            return c, ""

    def gap(c: Curve) -> float:
        return max(math.log(c.lo_bytes / nbytes), math.log(nbytes / c.hi_bytes))

    best = min(curves, key=gap)
    return best, "below" if nbytes < best.lo_bytes else "above"


@dataclass
class BenchCommModel(CommModel):
    """A `CommModel` whose all-reduces and transfers are the device's benchmarked curves;
    `alpha_ns` / `bw_bytes_per_ns` are the widest intra-node all-reduce curve's ring reading
    (for what this class does not price itself). `notes` say where the curves come from; what
    a size asked needed (a curve read as a ring, a size outside the benchmarks) is said by
    `take_asked`, for the sizes asked since its last call only."""

    device: str = ""
    allreduce: dict[str, list[Curve]] = field(default_factory=dict)  # layout -> curves by size
    p2p: dict[str, list[Curve]] = field(default_factory=dict)
    gpus_per_node: int = 0  # the largest G of a 1 x G all-reduce curve
    _memo: dict[tuple[str, int, int], float] = field(default_factory=dict, repr=False)
    # per size asked (a `_memo` key): what pricing it needed; those asked since `take_asked`
    _said: dict[tuple[str, int, int], tuple[str, ...]] = field(default_factory=dict, repr=False)
    _asked: list[str] = field(default_factory=list, repr=False)

    def group_curve(self, n: int) -> tuple[list[Curve], str]:
        """The curves an all-reduce over n ranks takes, and how (a note; '' for a curve of n
        GPUs in one node): the 1 x n curve; for n up to the node's G without its own curve, the
        ring formula of the smallest benchmarked node group above n; beyond G GPUs, n/G nodes
        x G when benchmarked (the curve spans nodes), else the ring formula of the benchmarked
        layout of G per node with the most nodes (of the most ranks when none has G)."""
        lay = f"1_{n}"
        if lay in self.allreduce:
            return self.allreduce[lay], ""
        intra = sorted(c[0].group for k, c in self.allreduce.items() if k.startswith("1_"))
        if n <= self.gpus_per_node:
            m = next(g for g in intra if g > n)
            return self.allreduce[f"1_{m}"], f"ring formula of the 1_{m} curve"
        g = self.gpus_per_node
        if g and n % g == 0 and f"{n // g}_{g}" in self.allreduce:
            return self.allreduce[f"{n // g}_{g}"], f"the {n // g}_{g} curve, across nodes"
        same = [c for c in self.allreduce.values() if c[0].gpus_per_node == g]
        pool = same or list(self.allreduce.values())
        widest = max(pool, key=lambda c: (c[0].group, c[0].nodes))
        return widest, f"ring formula of the {widest[0].layout} curve, across nodes"

    def allreduce_ns(self, nbytes: float, n: int, sync: bool = False) -> float:
        """The benchmarked all-reduce of `nbytes` over n ranks (blocking: `sync` changes
        nothing, the benchmarks time the call the caller waits on)."""
        if n <= 1:
            return 0.0
        key = ("allreduce", n, int(nbytes))
        if key not in self._memo:
            curves, how = self.group_curve(n)
            curve, out = _pick(curves, nbytes)
            if curve.group == n:
                ns = curve.us(nbytes) * 1e3
            else:
                alpha, bw = curve.ring()
                ns = 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bw
            said = [f"all-reduce over {n} ranks: no 1_{n} benchmark, {how}"] if how else []
            if out:
                said.append(_outside("all-reduce", curve, nbytes, out))
            self._memo[key], self._said[key] = ns, tuple(said)
        return self._ask(key)

    def p2p_ns(self, nbytes: float) -> float:
        """A pipeline transfer: the 1_2 (same node) p2p curve, else another layout's, else
        the ring reading's alpha + bytes / bw."""
        curves = self.p2p.get("1_2") or next(iter(self.p2p.values()), None)
        if not curves:
            return super().p2p_ns(nbytes)
        key = ("p2p", 2, int(nbytes))
        if key not in self._memo:
            curve, out = _pick(curves, nbytes)
            self._said[key] = (_outside("transfer", curve, nbytes, out),) if out else ()
            self._memo[key] = curve.us(nbytes) * 1e3
        return self._ask(key)

    def _ask(self, key: tuple[str, int, int]) -> float:
        """The time of size `key`, its notes added to those asked."""
        self._asked.extend(t for t in self._said[key] if t not in self._asked)
        return self._memo[key]

    def take_asked(self) -> list[str]:
        self._asked, out = [], self._asked
        return out


def _outside(what: str, c: Curve, nbytes: float, way: str) -> str:
    return (
        f"{what} of {nbytes / 1e6:.3g} MB is {way} the {c.operator} {c.layout} benchmarks "
        f"({c.lo_bytes / 1e6:.3g}-{c.hi_bytes / 1e6:.3g} MB): extrapolated by their fitted "
        "c0 + bytes / bw (out of range)"
    )


def _curves(rows: pd.DataFrame, device: str, files: tuple[str, ...]) -> dict[str, list[Curve]]:
    """Fitted curves per layout (`N_G`), each layout's sorted by size, of the benchmark files
    `files` among `rows` (a layout's file of fewer than 8 rows is left out)."""
    from lumos.opmodel.features import BYTES
    from lumos.opmodel.fit import FitOptions, fit_model
    from lumos.opmodel.models import ModelSet

    physics = FitOptions(trees=False, loglinear=False)
    sms = ModelSet(rows.head(0), device).sms
    out: dict[str, list[Curve]] = {}
    sub = rows[rows["operator"].isin(files) & rows["dur_us"].notna()]
    for (op, lay), part in sub.groupby(["operator", "layout"], sort=True):
        if len(part) < 8:
            continue
        model = fit_model(
            part, device=device, operator=op, target="dur_us", sms=sms, layout=lay, opts=physics
        )
        nodes, gpus = (int(x) for x in str(lay).split("_"))
        size = part["shape"] * BYTES
        curve = Curve(str(op), nodes, gpus, model, float(size.min()), float(size.max()))
        out.setdefault(str(lay), []).append(curve)
    for curves in out.values():
        curves.sort(key=lambda c: c.lo_bytes)
    return out


def from_rows(rows: pd.DataFrame, device: str) -> BenchCommModel | None:
    """The model of `device` from its benchmark rows (`lumos.opmodel.store.load_rows`); None
    without an all-reduce curve of two or more GPUs in one node."""
    allreduce = _curves(rows, device, ALLREDUCE_FILES)
    intra = sorted(k for k in allreduce if k.startswith("1_") and allreduce[k][0].group > 1)
    if not intra:
        return None
    p2p = _curves(rows, device, P2P_FILES)
    widest = allreduce[intra[-1]]
    alpha, bw = widest[0].ring()
    g = widest[0].gpus_per_node
    fits = "; ".join(
        f"{c.operator} {c.layout}: {c.model.phys[0]:.0f} us + bytes / "
        f"{1e-3 / c.model.phys[2]:.0f} GB/s ({c.lo_bytes / 1e6:.3g}-{c.hi_bytes / 1e6:.3g} MB)"
        for lay in intra
        for c in allreduce[lay]
    )
    across = sorted(set(allreduce) - set(intra))
    notes = [
        f"collective costs from {device}'s NCCL micro-benchmarks in the warehouse's opbench "
        f"(no all-reduce on this device among the traced jobs): an all-reduce over n ranks "
        f"times the 1_n curve, a pipeline transfer the p2p 1_2 curve, each fitted by "
        f"lumos.opmodel as c0 + bytes / bw ({fits}); beyond {g} GPUs the benchmarked layouts "
        f"across nodes ({', '.join(across) or 'none'})"
    ]
    return BenchCommModel(
        alpha,
        bw,
        SOURCE,
        notes,
        device=device,
        allreduce=allreduce,
        p2p=p2p,
        gpus_per_node=g,
    )


def from_opbench(
    warehouse: str | Path, device_name: str | None
) -> tuple[BenchCommModel | None, str]:
    """(the model, '') from the warehouse's benchmark rows of the GPU named `device_name`
    (matched as `lumos.opmodel.devices.find_device` does), else (None, why not)."""
    from lumos.opmodel.devices import find_device, stored_devices

    stored = find_device(Path(warehouse), device_name)
    if stored is None:
        held = stored_devices(Path(warehouse))
        return None, (
            f"no micro-benchmarks of {device_name or 'the device'} in the warehouse's opbench"
            + (f" (it holds {', '.join(held)}: another device)" if held else "")
        )
    from lumos.opmodel.devices import opbench_dir

    files = sorted(opbench_dir(Path(warehouse), stored).glob("*.parquet"))
    stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    fitted = _fitted(str(warehouse), stored, stamp)
    # each estimator its own model: what its pricing asked is said to it alone (`take_asked`)
    model = (
        None
        if fitted is None
        else dataclasses.replace(fitted, notes=list(fitted.notes), _memo={}, _said={}, _asked=[])
    )
    if model is None:
        return None, f"{stored}'s micro-benchmarks hold no all-reduce within a node"
    return model, ""


@functools.lru_cache(maxsize=8)
def _fitted(warehouse: str, device: str, stamp: tuple) -> BenchCommModel | None:
    """`from_rows` of the device's benchmark files, fitted once per process while they stay as
    `stamp` (name, size, mtime of each) says: every estimator of a fleet's jobs on that device
    shares its fitted curves (each fit is 0.2-0.3 s and imports pandas)."""
    import pandas as pd

    from lumos.opmodel.store import load_rows

    rows = pd.concat(
        [load_rows(Path(warehouse), device, op) for op in (*ALLREDUCE_FILES, *P2P_FILES)],
        ignore_index=True,
    )
    return from_rows(rows, device)
