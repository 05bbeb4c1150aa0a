"""Sweep throughput: configurations per second per core through the numba replay.

    .venv/bin/python bench/sweep.py [--tasks 50000] [--configs 2000]

Builds a synthetic base template (a GPT-like layer of 40 forward and 90 backward ops) and a
structure whose graph has about --tasks tasks, then replays --configs configurations of it
(hidden, seq, micro-batch, dp varied: durations only) with `Estimator.predict` on one thread
(the issue's bar: 500 configs/s/core for a 50k-task base graph).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def synthetic_template(layers: int, mbs: int):  # noqa: ANN201
    from lumos.estimate.layers import BLOCK, ROLE, Template

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
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=50_000)
    ap.add_argument("--configs", type=int, default=2000)
    args = ap.parse_args()
    from numba import set_num_threads

    from lumos.estimate.comm import CommModel
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.estimator import Estimator

    set_num_threads(1)
    base = ModelConfig(layers=4, hidden=1024, heads=16, seq=1024, micro_batch=1,
                       num_micro_batches=2, vocab=32000, dtype_bytes=2)  # fmt: skip
    est = Estimator(synthetic_template(4, 2), base, CommModel.default("gpu"), [])
    per_mb_layer = 130
    layers = 8
    mbs = max(1, round(args.tasks / (per_mb_layer * layers)))
    target = base.replace(layers=layers, num_micro_batches=mbs, pp=2, tp=2)
    n_tasks = est.graph(est.structure(target)).n_tasks
    rng = np.random.default_rng(1)
    configs = [
        target.replace(
            hidden=int(rng.choice([1024, 2048, 4096])),
            seq=int(rng.choice([512, 1024, 2048])),
            micro_batch=int(rng.choice([1, 2, 4])),
            dp=int(rng.choice([2, 4, 8])),
        )
        for _ in range(args.configs)
    ]
    est.predict(configs[:8], parallel=False)  # compile / load the kernel
    t = time.perf_counter()
    preds = est.predict(configs, parallel=False)
    dt = time.perf_counter() - t
    print(
        f"{len(preds)} configs of a {n_tasks:,}-task graph in {dt:.2f} s on one thread: "
        f"{len(preds) / dt:,.0f} configs/s/core ({len(preds) * n_tasks / dt / 1e6:.1f} M tasks/s)"
    )


if __name__ == "__main__":
    main()
