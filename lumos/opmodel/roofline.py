"""The hardware-aware prior: a small device table and the roofline time of an operator.

Peak numbers are dense (no 2:4 sparsity) tensor-core rates for fp16/bf16 and the HBM bandwidth from
the vendors' data sheets; links are per-GPU unidirectional bandwidths. The models never trust the
peaks for accuracy (achieved rates are fitted from data); the table gives them the right shape
(SM count for wave quantisation) and a sane prior where no data exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Device", "DEVICES", "resolve_device", "roofline_us"]


@dataclass(frozen=True)
class Device:
    name: str
    peak_flops: float  # fp16/bf16 dense tensor FLOP/s
    mem_bw: float  # HBM bytes/s
    sms: int  # streaming multiprocessors (NVIDIA) or compute units (AMD): the wave size
    intra_bw: float  # intra-node link bytes/s per GPU, one direction
    inter_bw: float  # network bytes/s per GPU, one direction


DEVICES: dict[str, Device] = {
    # NVIDIA A100 data sheet (2021): 312 TFLOPS fp16 dense; 1,555 GB/s (40GB), 2,039 GB/s
    # (80GB SXM); 108 SMs (A100 whitepaper); NVLink3 600 GB/s bidirectional = 300 each way;
    # Perlmutter: 4 × HPE Slingshot 25 GB/s NICs per node, i.e. 25 GB/s per GPU.
    "a100-40gb": Device("a100-40gb", 312e12, 1555e9, 108, 300e9, 25e9),
    "a100-80gb": Device("a100-80gb", 312e12, 2039e9, 108, 300e9, 25e9),
    # NVIDIA H100 SXM5 data sheet: 989 TFLOPS fp16 dense (1,979 with sparsity), 3.35 TB/s,
    # 132 SMs; NVLink4 900 GB/s bidirectional; 400 Gb/s NDR InfiniBand per GPU.
    "h100": Device("h100", 989e12, 3350e9, 132, 450e9, 50e9),
    # NVIDIA V100 SXM2 data sheet: 125 TFLOPS tensor, 900 GB/s, 80 SMs; NVLink2 300 GB/s bidir.
    "v100": Device("v100", 125e12, 900e9, 80, 150e9, 12.5e9),
    # AMD Instinct MI250X data sheet: 383 TFLOPS fp16, 3.2 TB/s, 220 CUs (MI250: 362.1, 208 CUs);
    # Infinity Fabric 50 GB/s per link per direction, 8 links between the two dies' peers.
    "mi250": Device("mi250", 362.1e12, 3277e9, 208, 200e9, 25e9),
    "mi250x": Device("mi250x", 383e12, 3277e9, 220, 200e9, 25e9),
    # AMD Instinct MI300X data sheet: 1,307.4 TFLOPS fp16 dense, 5.3 TB/s, 304 CUs; 7 IF links
    # of 64 GB/s each way.
    "mi300x": Device("mi300x", 1307.4e12, 5300e9, 304, 448e9, 50e9),
    # A generic server CPU socket (order of magnitude only: 64 cores × AVX-512 fp32 FMA at
    # ~2 GHz ≈ 4 TFLOPS; 8 channels of DDR5-4800 ≈ 307 GB/s); the "SMs" are the cores.
    "cpu": Device("cpu", 4e12, 307e9, 64, 50e9, 12.5e9),
}

# Spellings seen in traces, benchmark file names and user input, checked in order.
_PATTERNS: list[tuple[str, str]] = [
    (r"a100.*80", "a100-80gb"),
    (r"a100", "a100-40gb"),
    (r"h100|gh200|h200", "h100"),
    (r"v100", "v100"),
    (r"mi250x", "mi250x"),
    (r"mi250", "mi250"),
    (r"mi300", "mi300x"),
    (r"cpu|xeon|epyc", "cpu"),
]


def resolve_device(name: str) -> Device | None:
    """The table entry for a device name such as `NVIDIAA100-SXM4-80GB` or `H100`, else None."""
    key = name.strip().lower()
    if key in DEVICES:
        return DEVICES[key]
    for pattern, entry in _PATTERNS:
        if re.search(pattern, key):
            return DEVICES[entry]
    return None


def roofline_us(flops: np.ndarray, nbytes: np.ndarray, device: Device) -> np.ndarray:
    """The roofline time in µs: the slower of compute at peak and memory traffic at peak."""
    flops = np.asarray(flops, dtype=np.float64)
    nbytes = np.asarray(nbytes, dtype=np.float64)
    return np.maximum(flops / device.peak_flops, nbytes / device.mem_bw) * 1e6
