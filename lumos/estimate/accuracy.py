"""Estimation accuracy on a ground-truth corpus: predict every configuration of the
corpus from one base job's trace and compare with the median traced step of the real run.

A corpus is a folder of job folders written by `lumos groundtruth run` (each with a
`measured.json`); `corpus_accuracy(corpus, warehouse)` ingests what is not yet in the warehouse
and returns one row per configuration, with the run's own spread (cv, min, max of its traced
steps) beside the error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_KEYS = (
    "layers",
    "hidden",
    "ffn",
    "heads",
    "seq",
    "micro_batch",
    "num_micro_batches",
    "vocab",
    "dp",
    "pp",
    "tp",
    "pp_schedule",
)


def measured(job_dir: Path) -> dict[str, Any]:
    path = job_dir / "measured.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read measured.json ({e})") from None


def gpu_run_truth(run: Path) -> tuple[float, dict[str, Any]]:
    """A GPU corpus run's step without the profiler in ms (../shared/traces/gpu_h100: the median
    of its three runs' medians, as that corpus is scored) and its `measured.json`."""
    import statistics

    m = measured(run)
    runs = [m["wall_ms_unprofiled"], *m["wall_ms_unprofiled_other_runs"].values()]
    return float(statistics.median(statistics.median(r) for r in runs)), m


def gpu_run_config(base: Any, m: dict[str, Any]) -> Any:
    """The configuration a GPU corpus run's `measured.json` states, on `base`'s other fields."""
    return base.derive(
        layers=m["layers"],
        hidden=m["hidden"],
        ffn=m["ffn"],
        heads=m["heads"],
        kv_heads=m.get("kv", m["heads"]),
        seq=m["seq"],
        micro_batch=m["batch"],
        num_micro_batches=m["mbs"],
        recompute="full" if m["recompute"] else "none",
    )


def corpus_jobs(corpus: Path) -> list[Path]:
    return sorted(p for p in Path(corpus).iterdir() if (p / "measured.json").is_file())


def corpus_accuracy(
    corpus: Path, warehouse: Path, base: str = "base", calibration: bool = True
) -> list[dict[str, Any]]:
    """One row per configuration: predicted vs measured median traced step, error, spread.
    Without `calibration`, every estimate learns from the base's trace alone (and the host prior):
    what a user with a single trace gets."""
    from lumos.estimate.calibration import Calibration
    from lumos.estimate.estimator import Estimator
    from warehouse.handle import WarehouseHandle

    jobs = corpus_jobs(corpus)
    if not any(j.name == base for j in jobs):
        raise ValueError(f"{corpus}: no base job folder {base!r} with a measured.json")
    wh = WarehouseHandle.open(warehouse, create=True)
    have = set(wh.sql("SELECT DISTINCT job FROM traces")["job"]) if _has_traces(wh) else set()
    for j in jobs:
        if j.name in have:
            _same_files(wh, j, warehouse)
    todo = [j for j in jobs if j.name not in have]
    for j in todo:
        wh.ingest([str(j)], job=j.name)
    est = Estimator.open(warehouse, base)
    rows = []
    # each job's inferred state, once for every held-out run
    states: dict[str, tuple[float, float] | None] = {}
    # without the calibration jobs, every job of the warehouse but the base is left out
    others = sorted(set(wh.sql("SELECT DISTINCT job FROM traces")["job"]) - {base})
    groups: dict[str, int] = {}  # each job's tensor-parallel group, likewise
    alone = (
        None
        if calibration
        else Calibration.learn(wh, base, exclude=others, states=states, tp_groups=groups)
    )
    for j in jobs:
        # what the calibration jobs teach (collective costs, contention) is learned without the run
        # being predicted
        held_out = [j.name] if j.name != base else []
        f = alone or Calibration.learn(wh, base, exclude=held_out, states=states, tp_groups=groups)
        # the host's cores as the estimator resolved them (the trace's record, the prior's)
        c = est.contention
        model = Estimator(
            est.tpl,
            est.base,
            f.comm,
            est.base_notes,
            f.contention.with_cores(c.cores, c.cores_source) if c.cores else f.contention,
            f.gemms,
            f.ops,
            f.working_set,
            f.gaps,
        )
        m = measured(j)
        cfg = {k: m["config"][k] for k in CONFIG_KEYS if k in m["config"]}
        if cfg.get("ffn") == 0:
            cfg["ffn"] = 4 * cfg["hidden"]
        target = model.target(cfg, f"{j}/measured.json")
        pred = model.predict([target], parallel=False)[0]
        step = m["traced"]["step"]
        err = (pred.predicted_ns - step["median"]) / step["median"]
        rows.append(
            {
                "config": j.name,
                "predicted_ms": pred.predicted_ns / 1e6,
                "measured_ms": step["median"] / 1e6,
                "error_pct": 100 * err,
                "cv_pct": 100 * step["cv"],
                "min_ms": step["min"] / 1e6,
                "max_ms": step["max"] / 1e6,
                "in_interval": pred.interval_ns[0] <= step["median"] <= pred.interval_ns[1],
                "warnings": len(pred.warnings),
                # the calibration jobs' run speed the CPU work took (working_set.WorkingSet.offset)
                "run_speed": f.working_set.run_speed,
            }
        )
    return rows


def _same_files(wh: Any, job_dir: Path, warehouse: Path) -> None:
    """The warehouse's job of the folder's name holds the folder's trace files (by content);
    else a `ValueError`: another corpus's run of the same name would be predicted and measured
    in its place."""
    from warehouse.ingest import sha256_file
    from warehouse.layout import find_trace_files

    held = set(
        wh.sql(
            "SELECT sha256 FROM traces WHERE job = $job AND status = 'ok'", {"job": job_dir.name}
        )["sha256"]
    )
    files = {sha256_file(f) for f in find_trace_files(job_dir)}
    if held != files:
        raise ValueError(
            f"{warehouse}: job {job_dir.name!r} holds other trace files than {job_dir} (another "
            "corpus's run of that name?); give this corpus its own --warehouse"
        )


def _has_traces(wh: Any) -> bool:
    try:
        wh.sql("SELECT 1 FROM traces LIMIT 1")
    except Exception:  # noqa: BLE001 - an empty warehouse has no views yet
        return False
    return True
