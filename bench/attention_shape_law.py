"""Attention kernels' time ratio target/base on the H100 corpus: today's law vs an opmodel one.

    .venv/bin/python bench/attention_shape_law.py [--shared ../shared]

For each run of ../shared/traces/gpu_h100 whose attention shape differs from its family's base
(seq, hidden/heads, micro-batch), prints the measured ratio of the step's attention-class kernel
time (per layer and micro-batch) to the base's, the ratio the GPU estimate's kernel law gives
(`GpuModel.durations`), the FLOPs ratio, and the ratio of the A100 `flash_atten` model's
(fwd + bwd) predictions (fitted on ../shared/opbench: another device), with its range flag.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

TARGETS = {
    "llama": ["llama_S512", "llama_H768", "llama_H2048", "llama_B4"],
    "neox": ["neox_H1536", "neox_B16"],
}


def main() -> None:
    from lumos.api import Warehouse
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.gpu_step import load_gpu_step
    from lumos.estimate.kernel_work import KClass
    from lumos.opmodel.models import ModelSet
    from lumos.opmodel.store import import_dir, load_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=Path(__file__).parents[1].parent / "shared")
    args = ap.parse_args()
    runs = args.shared / "traces" / "gpu_h100"
    tmp = Path(tempfile.mkdtemp())
    import_dir(args.shared / "opbench" / "perlmutter_a100" / "operator", "a100", tmp / "bench")
    models = ModelSet(load_rows(tmp / "bench", "a100", "flash_atten"), "a100")

    def opmodel(m: dict) -> tuple[float, bool]:
        shape = {"mp": 1.0, "b": m["batch"], "h": m["heads"], "l": m["seq"], "dim": m["hidden"]}
        df = pd.DataFrame({k: [float(v)] for k, v in shape.items()})
        f, b = (models.predict("flash_atten", df, t) for t in ("fwd_us", "bwd_us"))
        oor = bool(f["out_of_range"].iloc[0] or b["out_of_range"].iloc[0])
        return float(f["us"].iloc[0] + b["us"].iloc[0]), oor

    wh = Warehouse.open(tmp / "wh", create=True)
    wh.ingest([runs / r for fam, ts in TARGETS.items() for r in [f"{fam}_base", *ts]])
    print(f"{'run':12s} {'measured':>8s} {'law':>12s} {'FLOPs':>12s} {'opmodel':>12s} range")
    errs: dict[str, list[float]] = {"law": [], "flops": [], "opmodel": []}
    for fam, targets in TARGETS.items():
        est = Estimator.open(wh.root, f"{fam}_base")
        gm, st = est._gpu_model(), est.gpu
        m0 = json.loads((runs / f"{fam}_base" / "measured.json").read_text())
        o0, _ = opmodel(m0)
        attn0 = st.dur_ns[st.k_class == int(KClass.ATTENTION)].sum()
        for r in targets:
            m = json.loads((runs / r / "measured.json").read_text())
            other = load_gpu_step(wh, r)
            k1 = other.k_class == int(KClass.ATTENTION)
            measured = other.dur_ns[k1].sum() / attn0
            keys = {"hidden": "hidden", "heads": "heads", "seq": "seq", "batch": "micro_batch"}
            cfg = est.target({v: m[k] for k, v in keys.items()} | {"ffn": m["ffn"]})
            ed, _ = gm.graph(gm.structure(cfg))
            dur = gm.durations(ed, cfg, 0.0)
            law = dur[st.k_class[ed.base] == int(KClass.ATTENTION)].sum() / attn0
            flops = m["batch"] * m["seq"] ** 2 * m["hidden"]
            flops /= m0["batch"] * m0["seq"] ** 2 * m0["hidden"]
            o, oor = opmodel(m)
            cells = {"law": law, "flops": flops, "opmodel": o / o0}
            for k, v in cells.items():
                errs[k].append(abs(v / measured - 1))
            print(
                f"{r:12s} {measured:8.3f} "
                + " ".join(f"{v:6.3f} {100 * (v / measured - 1):+4.0f}%" for v in cells.values())
                + f" {'out' if oor else 'in'}"
            )
    print("mean |error|: " + ", ".join(f"{k} {100 * np.mean(v):.1f}%" for k, v in errs.items()))


if __name__ == "__main__":
    main()
