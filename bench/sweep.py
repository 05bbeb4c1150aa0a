"""Sweep throughput: configurations per second per core through `Estimator.predict`.

    .venv/bin/python bench/sweep.py [--tasks 50000] [--configs 2000] [--full-configs 300]
                                    [--runs 3] [--structures 12] [--per-structure 50]

Builds a synthetic base template (a GPT-like layer of 40 forward and 90 backward ops) and a
structure whose graph has about --tasks tasks (pp=2, tp=2), then predicts:

1. **one structure**: --configs configurations of it (hidden, seq, micro-batch, dp varied:
   durations only), graphs already built — the issue's bar, 500 configs/s/core for a 50k-task
   base graph;
2. **many structures**: --structures structures of about --tasks tasks (layers, pp, tp,
   schedule varied) × --per-structure configurations each, on a fresh estimator, so building
   (and merging) every graph is paid.

Each on one numba thread, with the merged-run graphs (the default) and with the full graphs
(`compressed=False`; fewer configurations, the rate is per configuration). Times are CPU
seconds of this process (the machine is shared), medians of --runs runs; the makespans of both
paths are checked equal.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def synthetic_template(layers: int, mbs: int):  # noqa: ANN201
    from lumos.estimate.template import BLOCK, ROLE, Template

    rng = np.random.default_rng(0)
    f_roles = ["tok_h", "gemm_qkv"] + ["const"] * 8 + ["attn", "gemm_out", "tok_h", "tok_h",
               "gemm_up", "tok_f", "gemm_down", "tok_h"] + ["const"] * 22  # fmt: skip
    b_roles = ["tok_h", "param_l", "gemm_down", "tok_f", "gemm_up"] + ["const"] * 40 + [
        "attn", "gemm_out", "gemm_qkv", "param_l"] + ["const"] * 41  # fmt: skip
    rows = [("head", -1, -1, "const", 0)]
    for m in range(mbs):
        rows += [("f_pre", -1, m, "emb", 0)]
        rows += [("f_layer", ly, m, r, 0) for ly in range(layers) for r in f_roles]
        rows += [("f_post", -1, m, "gemm_head", 0), ("f_post", -1, m, "tok_v", 0)]
        rows += [("b_post", -1, m, "tok_v", 1)]
        rows += [("b_layer", ly, m, r, 1) for ly in reversed(range(layers)) for r in b_roles]
        rows += [("b_pre", -1, m, "emb", 1)]
    rows += [("opt", -1, -1, "opt", 0)] * 20
    n = len(rows)
    # an op name per role (the estimator reads names: per-name fixed costs, attention ops)
    op = {"attn": "scaled_dot_product_attention", "tok_h": "add", "tok_f": "gelu",
          "tok_v": "cross_entropy_loss", "emb": "embedding", "param_l": "add_",
          "opt": "addcdiv_", "const": "view"}  # fmt: skip
    names = [
        (f"autograd::engine::evaluate_function: {op.get(r[3], 'linear')}Backward0" if r[4]
         else f"aten::{op.get(r[3], 'linear')}")
        for r in rows
    ]  # fmt: skip
    return Template(
        job="synthetic",
        block=np.array([BLOCK[r[0]] for r in rows], np.int8),
        layer=np.array([r[1] for r in rows], np.int64),
        mb=np.array([r[2] for r in rows], np.int64),
        role=np.array([ROLE[r[3]] for r in rows], np.int8),
        bwd=np.array([r[4] for r in rows], np.int8),
        dur_ns=rng.integers(2_000, 400_000, n),
        gap_ns=rng.integers(0, 20_000, n),
        end_gap_ns=10_000,
        step_ns=np.array([10**9, 11 * 10**8, 12 * 10**8], np.int64),
        names=names,
    )


def _cpu(fn, runs: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=50_000)
    ap.add_argument("--configs", type=int, default=2000)
    ap.add_argument("--full-configs", type=int, default=300, help="for the full-graph rate")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--structures", type=int, default=12)
    ap.add_argument("--per-structure", type=int, default=50)
    args = ap.parse_args()
    from numba import set_num_threads

    from lumos.estimate.comm import CommModel
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.estimator import Estimator

    set_num_threads(1)
    base = ModelConfig(layers=4, hidden=1024, heads=16, seq=1024, micro_batch=1,
                       num_micro_batches=2, vocab=32000, dtype_bytes=2)  # fmt: skip
    tpl = synthetic_template(4, 2)

    def estimator() -> Estimator:
        return Estimator(tpl, base, CommModel.default("gpu"), [])

    per_mb_layer = 130
    layers = 8
    mbs = max(1, round(args.tasks / (per_mb_layer * layers)))
    target = base.replace(layers=layers, num_micro_batches=mbs, pp=2, tp=2)
    rng = np.random.default_rng(1)

    def vary(cfg: ModelConfig, n: int) -> list[ModelConfig]:
        return [
            cfg.replace(
                hidden=int(rng.choice([1024, 2048, 4096])),
                seq=int(rng.choice([512, 1024, 2048])),
                micro_batch=int(rng.choice([1, 2, 4])),
                dp=int(rng.choice([2, 4, 8])),
            )
            for _ in range(n)
        ]

    # 1. one structure, graphs built beforehand
    est = estimator()
    s = est.structure(target)
    n_tasks, n_runs = est.graph(s).n_tasks, est.compressed(s).n_tasks
    configs = vary(target, args.configs)
    full_cfgs = configs[: args.full_configs]
    est.predict(configs[:8], parallel=False)  # compile / load the kernel
    merged = [p.predicted_ns for p in est.predict(full_cfgs, parallel=False, compressed=True)]
    full = [p.predicted_ns for p in est.predict(full_cfgs, parallel=False, compressed=False)]
    if merged != full:
        raise SystemExit("merged-run and full graphs predicted different makespans")
    t_m = _cpu(lambda: est.predict(configs, parallel=False, compressed=True), args.runs)
    t_f = _cpu(lambda: est.predict(full_cfgs, parallel=False, compressed=False), args.runs)
    rate_m, rate_f = len(configs) / t_m, len(full_cfgs) / t_f
    print(f"one structure: a {n_tasks:,}-task graph ({n_runs} merged runs), one thread, "
          f"CPU time, median of {args.runs}")  # fmt: skip
    print(
        f"  full graphs  : {rate_f:9,.0f} configs/s/core ({rate_f * n_tasks / 1e6:.1f} M tasks/s)"
    )
    print(
        f"  merged runs  : {rate_m:9,.0f} configs/s/core ({rate_m / rate_f:.0f}x the full graphs)"
    )
    print(f"  target 500 configs/s/core: {'met' if rate_m >= 500 else 'NOT met'}")

    # 2. many structures, every graph built (and merged) inside the measurement
    shapes = [
        (ly, pp, tp, sched)
        for ly in (8, 12)
        for pp in (1, 2, 4)
        for tp, sched in ((1, "1f1b"), (2, "1f1b"), (2, "gpipe"))
    ][: args.structures]
    many: list[ModelConfig] = []
    sizes = []
    for ly, pp, tp, sched in shapes:
        cfg = base.replace(layers=ly, pp=pp, tp=tp, pp_schedule=sched,
                           num_micro_batches=max(1, round(args.tasks / (per_mb_layer * ly))))  # fmt: skip
        many += vary(cfg, args.per_structure)
        sizes.append(estimator().graph(estimator().structure(many[-1])).n_tasks)
    t_m = _cpu(lambda: estimator().predict(many, parallel=False, compressed=True), args.runs)
    t_f = _cpu(lambda: estimator().predict(many, parallel=False, compressed=False), args.runs)
    rate_m, rate_f = len(many) / t_m, len(many) / t_f
    print(f"many structures: {len(shapes)} structures of {min(sizes):,}–{max(sizes):,} tasks, "
          f"{args.per_structure} configs each, fresh estimator (graphs built in the run)")  # fmt: skip
    print(f"  full graphs  : {rate_f:9,.0f} configs/s/core")
    print(
        f"  merged runs  : {rate_m:9,.0f} configs/s/core ({rate_m / rate_f:.0f}x the full graphs)"
    )
    print(f"  target 500 configs/s/core: {'met' if rate_m >= 500 else 'NOT met'}")


if __name__ == "__main__":
    main()
