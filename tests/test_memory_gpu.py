"""Memory per rank against real H100 training runs (../shared/traces/gpu_h100): each run's
configuration is inferred from its own trace and `estimate_memory` must land within 10 % of the
`torch.cuda.max_memory_allocated()` it measured (`measured.json`'s `peak_memory_bytes`).

The runs are Hugging Face LLaMA and GPT-NeoX models trained under bf16 autocast over fp32 weights
with foreach AdamW; the model of that loop is in lumos/estimate/memory.py's docstring.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TOLERANCE = 0.10
RUNS = (
    "llama_B4",
    "llama_B4_M2",
    "llama_H2048",
    "llama_H768",
    "llama_L16",
    "llama_L4",
    "llama_S512",
    "llama_base",
    "llama_kv4",
    "llama_recompute",
    "neox_B16",
    "neox_B4_M2",
    "neox_H1536",
    "neox_L16",
    "neox_base",
    "neox_recompute",
)


def _measured(gpu_runs: Path, run: str) -> dict:
    return json.loads((gpu_runs / run / "measured.json").read_text())


@pytest.mark.parametrize("run", RUNS)
def test_inferred_config_matches_the_run(gpu_wh, gpu_runs, run):
    from lumos.estimate.infer import infer_base

    m = _measured(gpu_runs, run)
    cfg = infer_base(gpu_wh, f"gpu_h100/{run}").config
    got = {
        "layers": cfg.layers,
        "hidden": cfg.hidden,
        "ffn": cfg.ffn,
        "heads": cfg.heads,
        "kv": cfg.kv_heads_n,
        "seq": cfg.seq,
        "batch": cfg.micro_batch,
        "mbs": cfg.num_micro_batches,
        "vocab": cfg.vocab,
        "recompute": cfg.recompute == "full",
    }
    assert got == {k: m[k] for k in got}
    assert cfg.autocast and cfg.dtype_bytes == 2 and cfg.flash_attention
    assert cfg.fused_qkv == (m["family"] == "neox")
    assert cfg.unfused_norm == (m["family"] == "llama")


@pytest.mark.parametrize("run", RUNS)
def test_memory_within_ten_percent_of_measured_peak(gpu_wh, gpu_runs, run):
    from lumos.estimate.infer import infer_base
    from lumos.estimate.memory import estimate_memory

    peak = _measured(gpu_runs, run)["peak_memory_bytes"]
    est = estimate_memory(infer_base(gpu_wh, f"gpu_h100/{run}").config)
    err = est.memory_bytes / peak - 1
    assert abs(err) <= TOLERANCE, (
        f"{run}: estimated {est.memory_bytes / 2**30:.2f} GiB, measured {peak / 2**30:.2f} GiB "
        f"({100 * err:+.1f} %): {est.to_dict()}"
    )
