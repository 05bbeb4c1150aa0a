"""A synthetic fleet for the fleet report's size and speed (tests/test_report.py,
bench/report.py): jobs with replay errors, estimates against measured runs, refused files."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lumos.report.gather import FleetData


def synthetic_fleet(jobs: int, estimates: int, seed: int = 0) -> FleetData:
    """`jobs` jobs × 2 metrics of replay error (log-normal around 0.1 %), `estimates` estimates
    spread over 90 days and over the jobs, and four refusal reasons."""
    rng = np.random.default_rng(seed)
    names = [f"team{j % 17}/llama_run_{j:05d}" for j in range(jobs)]
    errors = pd.DataFrame(
        {
            "job": np.repeat(names, 2),
            "metric": np.tile(["cpu_step", "gpu_span"], jobs),
            "median_error_pct": rng.lognormal(np.log(0.1), 1.2, 2 * jobs),
            "max_error_pct": rng.lognormal(np.log(0.4), 1.2, 2 * jobs),
            "n_ranks": rng.integers(1, 65, 2 * jobs),
            "n_steps": rng.integers(1, 20, 2 * jobs),
        }
    ).sort_values("median_error_pct", ascending=False)
    start = pd.Timestamp("2026-09-01", tz="UTC")
    measured = rng.uniform(50, 900, estimates)
    est = pd.DataFrame(
        {
            "created_at": start + pd.to_timedelta(rng.uniform(0, 90 * 86400, estimates), "s"),
            "measured_job": rng.choice(names, estimates),
            "base_job": rng.choice(names, estimates),
            "sweep_id": [f"{i:012x}" for i in rng.integers(0, 2**40, estimates)],
            "predicted_ms": measured * rng.normal(1.0, 0.06, estimates),
            "measured_ms": measured,
        }
    ).sort_values("created_at")
    est["error_pct"] = 100 * (est["predicted_ms"] - est["measured_ms"]) / est["measured_ms"]
    est["in_interval"] = est["error_pct"].abs() < 8
    reasons = ["not a Kineto trace: a memory timeline", "truncated gzip stream",
               "rank 3 already taken by another file", "invalid JSON at byte 1024"]  # fmt: skip
    ingest = pd.DataFrame(
        {
            "status": ["ok"] + ["refused"] * len(reasons),
            "reason": [None, *reasons],
            "n_files": [8 * jobs, 40, 12, 7, 3],
            "n_jobs": [jobs, 30, 12, 7, 3],
            "bytes": [10**9 * jobs, 10**8, 10**7, 10**7, 10**6],
        }
    )
    runs = pd.DataFrame({"status": ["failed", "ok"], "n_jobs": [3, jobs - 3],
                         "example_error": ["graph: no CPU operation", None]})  # fmt: skip
    return FleetData(errors=errors, estimates=est, ingest=ingest, runs=runs)
