"""GPU estimates against the H100 corpus (../shared/traces/gpu_h100) and the naive FLOPs rule.

    .venv/bin/python bench/estimate_gpu.py [--base llama_base] [--shared ../shared]

Ingests the corpus into a temporary warehouse, opens the estimator of the base and predicts
every configuration of the base's family. For each: the measured step without the profiler (the
median of the three runs' medians, as the corpus README scores), lumos's estimate, and the naive
rule (the base's measured step without the profiler scaled by the model FLOPs ratio: the rule
docs/estimate-gpu.md compares against, given the measurement a trace does not have), with their errors; then the mean
and max |error| over the configurations other than the base, and the CPU time of one estimate
and of a sweep over all of them on the warm estimator. `--work`: per run of the base's structure,
how many layer operators' work ratios match that run's trace (no timing: a mismatch is a size
read wrongly).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from lumos.estimate.accuracy import gpu_run_config, gpu_run_truth


def model_flops(cfg) -> float:  # noqa: ANN001
    """Training FLOPs of one step: 6 per weight per token (matmuls: the layers and the LM head)
    plus attention's 12 · layers · hidden · seq per token (Megatron's accounting)."""
    from lumos.estimate.memory import head_params, params_per_layer

    tokens = cfg.micro_batch * cfg.num_micro_batches * cfg.seq
    weights = cfg.layers * params_per_layer(cfg) + head_params(cfg)
    return 6.0 * weights * tokens + 12.0 * cfg.layers * cfg.hidden * cfg.seq * tokens


def _every_base(root: Path, corpus: Path) -> None:
    """Each run as the base, against the other runs of its family."""
    from lumos.estimate.estimator import Estimator

    runs = sorted(p for p in corpus.iterdir() if (p / "measured.json").is_file())
    means = []
    print(f"{'base':<18} {'mean':>7} {'max':>7}")
    for b in runs:
        est = Estimator.open(root, f"gpu_h100/{b.name}")
        family = b.name.split("_")[0]
        errs = [
            abs(est.explain(gpu_run_config(est.base, m)).predicted_ns / 1e6 / t - 1)
            for t, m in (
                gpu_run_truth(r) for r in runs if r != b and r.name.startswith(family + "_")
            )
        ]
        means.append(np.mean(errs))
        print(f"{b.name:<18} {np.mean(errs):7.1%} {np.max(errs):7.1%}")
    print(f"every base: mean of the means {np.mean(means):.1%}")


def _work(root: Path, corpus: Path, base: str) -> None:
    """Each run of one structure with the base (its layers, micro-batches, recomputation): how
    many of the layer operators' work ratios the re-timing gives are the ones that run's trace
    shows (`lumos.estimate.work_check`), and the largest groups that are not."""
    from collections import Counter

    from lumos.estimate.estimator import Estimator
    from lumos.estimate.gpu_estimate import GpuModel
    from lumos.estimate.template import BLOCKS, LAYER_BLOCKS, ROLES
    from lumos.estimate.work_check import work_rows

    est = Estimator.open(root, f"gpu_h100/{base}")
    model, st = GpuModel(est.gpu, est.base), est.gpu
    family = base.split("_")[0]
    print(f"work ratios from {base} (layer operators agreeing with the target's trace)")
    for run in sorted(p for p in corpus.iterdir() if p.name.startswith(family + "_")):
        _, m = gpu_run_truth(run)
        cfg = gpu_run_config(est.base, m)
        if run.name == base or model.structure(cfg) != model.structure(est.base):
            continue
        other = Estimator.open(root, f"gpu_h100/{run.name}").gpu
        rows = [
            r
            for r in work_rows(model, cfg, other)
            if st.layer[r.task] >= 0 and st.block[r.task] in LAYER_BLOCKS
        ]
        bad = Counter(
            (
                BLOCKS[st.block[r.task]],
                ROLES[st.role[r.task]],
                round(r.predicted, 3),
                round(r.traced, 3),
            )
            for r in rows
            if not r.agrees
        )
        worst = "; ".join(f"{n} x {k}" for k, n in bad.most_common(3))
        print(f"  {run.name:<18} {len(rows) - sum(bad.values()):5d} / {len(rows):5d}  {worst}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="llama_base")
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    ap.add_argument(
        "--every-base",
        action="store_true",
        help="also each run of the corpus as the base: mean / max |error| over its family's others",
    )
    ap.add_argument(
        "--work",
        action="store_true",
        help="also the layer operators' work ratios against each same-structure run's own trace",
    )
    args = ap.parse_args()
    from lumos.api import Warehouse
    from lumos.estimate.estimator import Estimator

    corpus = Path(args.shared) / "traces" / "gpu_h100"
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse.open(Path(tmp) / "wh", create=True)
        wh.ingest([corpus])
        job = f"gpu_h100/{args.base}"
        est = Estimator.open(wh.root, job)
        base = est.base
        traced_base = float(np.median(est.gpu.step_ns)) / 1e6 if est.gpu else float("nan")
        family = args.base.split("_")[0]
        rows, targets = [], []
        base_truth, _ = gpu_run_truth(corpus / args.base)
        for run in sorted(p for p in corpus.iterdir() if p.name.startswith(family + "_")):
            truth, m = gpu_run_truth(run)
            cfg = gpu_run_config(base, m)
            targets.append(cfg)
            t0 = time.process_time()
            pred = est.explain(cfg).predicted_ns / 1e6
            cpu = time.process_time() - t0
            naive = base_truth * model_flops(cfg) / model_flops(base)
            rows.append((run.name, truth, pred, naive, cpu))
        t0 = time.process_time()
        est.predict(targets * 10)
        sweep_cpu = time.process_time() - t0
        if args.every_base:
            _every_base(wh.root, corpus)
        if args.work:
            _work(wh.root, corpus, args.base)
    print(f"base {args.base}: traced step {traced_base:.1f} ms (median of the traced steps)")
    print(f"{'run':<18} {'measured':>9} {'lumos':>9} {'err':>7} {'naive':>9} {'err':>7}")
    errs, naive_errs = [], []
    for name, truth, pred, naive, _ in rows:
        e, n = pred / truth - 1, naive / truth - 1
        if name != args.base:
            errs.append(abs(e))
            naive_errs.append(abs(n))
        print(f"{name:<18} {truth:9.1f} {pred:9.1f} {e:+7.1%} {naive:9.1f} {n:+7.1%}")
    print(
        f"others: lumos mean |err| {np.mean(errs):.1%} max {np.max(errs):.1%}; "
        f"naive mean {np.mean(naive_errs):.1%} max {np.max(naive_errs):.1%}"
    )
    print(
        f"one estimate (warm): median {statistics.median(r[4] for r in rows) * 1e3:.0f} ms CPU; "
        f"sweep of {len(targets) * 10} configurations: "
        f"{len(targets) * 10 / sweep_cpu:.0f} configurations per CPU-second"
    )


if __name__ == "__main__":
    main()
