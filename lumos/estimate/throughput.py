"""Throughput of an estimate: tokens per second and model FLOPs utilisation (MFU).

    tokens_per_s = micro_batch x num_micro_batches x dp x seq / step seconds
    mfu          = tokens x (6 N + 12 L h s) / (step seconds x world size x device peak)

N counts the parameters that multiply activations (PaLM's and Megatron's convention;
recomputation not counted). The peak is the dense bf16/fp16 tensor peak of the trace's device
(`PEAK_FLOPS`); MFU is null for runs not in 2-byte floats, traces without a device and devices
the table does not know. Details: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lumos.estimate.config import ModelConfig
from warehouse.location import local_warehouse

# Dense bf16/fp16 tensor-core peak FLOP/s of one device, by a pattern of its CUDA/ROCm name
# (first match wins, case-insensitive). Sources, the vendors' datasheets (the sparse figures
# halved where only those are printed):
#   H100 SXM 989.4 TF, PCIe 756 TF, NVL 835 TF: NVIDIA H100 Tensor Core GPU datasheet (2023)
#   H200 (and GH200) 989 TF: NVIDIA H200 datasheet; GH200 Grace Hopper superchip datasheet
#   A100 (SXM and PCIe) 312 TF: NVIDIA A100 datasheet (2021)
#   B200 2.25 PF: NVIDIA HGX B200 spec (4.5 PF with sparsity per GPU)
#   MI300X 1307.4 TF: AMD Instinct MI300X datasheet
#   V100 125 TF (SXM2 tensor; PCIe 112 TF): NVIDIA V100 datasheet
#   H800 (SXM) 989 TF, A800 312 TF: the H100's and A100's chips with slower NVLink
#   L40S 362 TF, L40 181 TF, L4 121 TF, RTX 6000 Ada 364 TF: the Ada datasheets (BF16 tensor,
#   dense); RTX 4090 165 TF: Ada whitepaper (BF16 with FP32 accumulate, dense)
#   A10 125 TF, A40 150 TF, RTX A6000 155 TF: the Ampere datasheets (BF16 tensor, dense)
# GB200's B200 is another part (not listed: its peak is left unknown rather than guessed).
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    (r"H100.*PCIE", 756e12),
    (r"H100.*NVL", 835e12),
    (r"H100", 989e12),
    (r"H200", 989e12),
    (r"H800.*PCIE", 756e12),
    (r"H800", 989e12),
    (r"A100", 312e12),
    (r"A800", 312e12),
    (r"L40S", 362e12),
    (r"L40\b", 181e12),
    (r"\bL4\b", 121e12),
    (r"RTX 6000 Ada", 364e12),
    (r"4090", 165e12),
    (r"\bA10\b", 125e12),
    (r"\bA40\b", 150e12),
    (r"A6000", 155e12),
    (r"(?<!G)B200", 2250e12),
    (r"MI300X", 1307e12),
    (r"V100.*PCIE", 112e12),
    (r"V100", 125e12),
)

# Special-function throughput (exponentials per second) of one device, by a pattern of its name:
# 16 results per clock per SM on compute capability 7.x-9.0 (CUDA C++ Programming Guide,
# "Arithmetic Instructions": exp2f, rsqrt, ...) x SMs x boost clock (the datasheets):
#   H100 SXM 132 SMs, 1.83 GHz: 3.9 T/s (FlashAttention-3, Shah et al. 2024: "989 TFLOPS of FP16
#   matmul but only 3.9 TFLOPS of special functions"); H200 the same chip; H100 NVL 132 SMs,
#   1.785 GHz: 3.8 T/s; H100 PCIe 114 SMs, 1.755 GHz: 3.2 T/s
#   A100 108 SMs, 1.41 GHz: 2.44 T/s; V100 SXM2 80 SMs, 1.53 GHz: 1.96 T/s, PCIe 1.38 GHz: 1.77
#   (H800 and A800 as H100 SXM / PCIe and A100); L40S 142 SMs, 2.52 GHz: 5.7 T/s; L40 142 SMs,
#   2.49 GHz: 5.7; L4 58 SMs, 2.04 GHz: 1.9; RTX 6000 Ada 142 SMs, 2.505 GHz: 5.7; RTX 4090 128
#   SMs, 2.52 GHz: 5.2; A10 72 SMs, 1.695 GHz: 1.95; A40 84 SMs, 1.74 GHz: 2.3; RTX A6000 84
#   SMs, 1.8 GHz: 2.4
# Devices not listed (B200, MI300X: other special-function units) have none: their attention
# follows its FLOPs alone.
EXP_RATE: tuple[tuple[str, float], ...] = (
    (r"H100.*PCIE", 3.2e12),
    (r"H100.*NVL", 3.8e12),
    (r"H100", 3.9e12),
    (r"H200", 3.9e12),
    (r"H800.*PCIE", 3.2e12),
    (r"H800", 3.9e12),
    (r"A100", 2.44e12),
    (r"A800", 2.44e12),
    (r"L40S", 5.7e12),
    (r"L40\b", 5.7e12),
    (r"\bL4\b", 1.9e12),
    (r"RTX 6000 Ada", 5.7e12),
    (r"4090", 5.2e12),
    (r"\bA10\b", 1.95e12),
    (r"\bA40\b", 2.3e12),
    (r"A6000", 2.4e12),
    (r"V100.*PCIE", 1.77e12),
    (r"V100", 1.96e12),
)

# bumped when what device.json holds changes
_DEVICE_FORMAT = 2


def _first_match(table: tuple[tuple[str, float], ...], name: str | None) -> float | None:
    if not name:
        return None
    return next((v for pattern, v in table if re.search(pattern, name, re.IGNORECASE)), None)


def peak_flops_of(name: str | None) -> float | None:
    """The dense bf16/fp16 peak FLOP/s of a device of this name (None: not in the table)."""
    return _first_match(PEAK_FLOPS, name)


def exp_rate_of(name: str | None) -> float | None:
    """The exponentials per second of a device of this name (None: not in the table)."""
    return _first_match(EXP_RATE, name)


@dataclass(frozen=True)
class Device:
    """The device a job's ranks ran on: its name and dense bf16/fp16 peak (None: unknown or
    no device, e.g. a CPU run)."""

    name: str | None = None
    peak_flops: float | None = None

    @classmethod
    def of_names(cls, names: list[str | None]) -> Device:
        """The device of ranks with these names: unknown if any rank has none or an unknown one;
        of mixed devices, the slowest (the step waits for it)."""
        if not names or any(not n for n in names):
            return cls(None, None)
        peaks = {n: peak_flops_of(n) for n in names}
        if any(p is None for p in peaks.values()):
            return cls(" / ".join(sorted({str(n) for n in names})), None)
        name = min(peaks, key=lambda n: (peaks[n], n))
        return cls(name, peaks[name])

    def peak_for(self, cfg: ModelConfig) -> float | None:
        """The peak `cfg` is measured against: only 2-byte (bf16/fp16) training has one."""
        return self.peak_flops if cfg.dtype_bytes == 2 else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "peak_flops": self.peak_flops}


def tokens_per_step(cfg: ModelConfig) -> int:
    """The global batch of one step in tokens."""
    return cfg.micro_batch * cfg.num_micro_batches * cfg.dp * cfg.seq


def matmul_params(cfg: ModelConfig) -> int:
    """N of 6 N: the parameters of the model's matrix multiplies (layers' and the LM head's)."""
    h = cfg.hidden
    kv = cfg.kv_heads_n * cfg.head_size
    q = cfg.q_width()
    attn = h * (q + 2 * kv) + q * h
    mlp = (3 if cfg.gated_mlp else 2) * h * cfg.ffn_size
    return cfg.layers * (attn + mlp) + cfg.vocab * h


def model_flops_per_step(cfg: ModelConfig) -> int:
    """Model FLOPs of one training step: T (6 N + 12 L h s), recomputation not counted."""
    # attention's scores and their product with V: 12 · L · (heads · head size) · s per token
    per_token = 6 * matmul_params(cfg) + 12 * cfg.layers * cfg.q_width() * cfg.seq
    return tokens_per_step(cfg) * per_token


def throughput(
    cfg: ModelConfig, predicted_ns: int, device: Device | None
) -> tuple[float | None, float | None]:
    """(tokens_per_s, mfu) of `cfg` at a step of `predicted_ns`; None where not defined."""
    if predicted_ns <= 0:
        return None, None
    seconds = predicted_ns / 1e9
    tokens_per_s = tokens_per_step(cfg) / seconds
    peak = device.peak_for(cfg) if device is not None else None
    if peak is None:
        return tokens_per_s, None
    return tokens_per_s, model_flops_per_step(cfg) / (seconds * cfg.world_size * peak)


def job_device(root: str | Path | None, job: str) -> Device:
    """The device of `job`'s ranks, read from the warehouse's `trace_meta` once per ingest (cached
    beside the estimator's template as device.json, stamped with the manifest's parts)."""

    from lumos.estimate.template import manifest_stamp, template_dir

    wh_root = local_warehouse(root)
    path = template_dir(wh_root, job) / "device.json"
    stamp = manifest_stamp(wh_root)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = {}
    if doc.get("manifest") == stamp and doc.get("format") == _DEVICE_FORMAT:
        return Device(doc.get("name"), doc.get("peak_flops"))
    from warehouse.handle import WarehouseHandle

    tbl = WarehouseHandle.open(wh_root).arrow(
        "SELECT t.rank, any_value(m.value_json -> 0 ->> 'name') AS name "
        "FROM (SELECT DISTINCT rank FROM traces WHERE job = $job AND status = 'ok') t "
        "LEFT JOIN trace_meta m ON m.job = $job AND m.rank = t.rank "
        "AND m.key = 'deviceProperties' GROUP BY t.rank",
        {"job": job},
    )
    dev = Device.of_names(tbl.column("name").to_pylist())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**dev.to_dict(), "manifest": stamp, "format": _DEVICE_FORMAT}))
    tmp.replace(path)
    return dev


def mfu_note(device: Device, any_mfu: bool) -> str:
    """What the MFU is of (`any_mfu`: some configuration has one), or why there is none."""
    if device.name is None:
        return "unknown (no device in the trace: a CPU run)"
    if device.peak_flops is None:
        return f"unknown (no bf16 peak known for {device.name})"
    peak = f"{device.name}'s {device.peak_flops / 1e12:,.0f} TFLOP/s dense bf16"
    return f"of {peak}" if any_mfu else f"unknown (only bf16/fp16 training has a peak; {peak})"
