"""Write estimates and the jobs' inferred configurations into the warehouse.

`<wh>/estimates/job=<enc>/sweep=<id>.parquet` (schema `ESTIMATES`) and
`<wh>/job_configs/job=<enc>/config.parquet` (schema `JOB_CONFIGS`, one per job, inferred once),
both through a temporary file and a rename; the catalog is rebuilt so that `estimates`,
`job_configs` and `estimate_vs_measured` are queryable at once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from lumos.estimate.config import ModelConfig
from lumos.estimate.estimator import Prediction
from lumos.estimate.sweep import to_json_speedups
from lumos.estimate.throughput import Device, throughput
from warehouse.layout import encode_job, write_parquet_atomic
from warehouse.schema import ESTIMATE_CONFIG_FIELDS, ESTIMATES, JOB_CONFIGS

_CONFIG_KEYS = [f.name for f in ESTIMATE_CONFIG_FIELDS]


def _config_columns(configs: Sequence[ModelConfig]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {k: [] for k in _CONFIG_KEYS}
    for c in configs:
        d = c.to_dict()
        d["ffn"] = c.ffn_size
        d["kv_heads"] = c.kv_heads_n
        for k in _CONFIG_KEYS:
            cols[k].append(d[k])
    return cols


def estimates_table(
    sweep_id: str, job: str, preds: Sequence[Prediction], *, device: Device | None
) -> pa.Table:
    """The rows of `preds`; `device` (`throughput.job_device`) gives MFU its peak (None: null)."""
    now = datetime.now(UTC)
    n = len(preds)
    data: dict[str, list[Any]] = {"sweep_id": [sweep_id] * n, "job": [job] * n}
    data.update(_config_columns([p.config for p in preds]))
    data["speedups"] = [to_json_speedups(p.speedups) for p in preds]
    data["host_cores"] = [p.host_cores for p in preds]
    data["predicted_ns"] = [p.predicted_ns for p in preds]
    data["traced_ns"] = [p.traced_ns for p in preds]
    data["interval_low_ns"] = [p.interval_ns[0] for p in preds]
    data["interval_high_ns"] = [p.interval_ns[1] for p in preds]
    data["memory_bytes"] = [p.memory_bytes for p in preds]
    data["fits"] = [p.fits for p in preds]
    rates = [throughput(p.config, p.predicted_ns, device) for p in preds]
    data["tokens_per_s"] = [r[0] for r in rates]
    data["mfu"] = [r[1] for r in rates]
    data["warnings"] = [json.dumps(p.warnings) for p in preds]
    data["created_at"] = [now] * n
    return pa.Table.from_pydict(data, schema=ESTIMATES)


def write_estimates(
    wh: Any, sweep_id: str, job: str, preds: Sequence[Prediction], *, device: Device | None
) -> pa.Table:
    """Write one sweep's rows, make sure every job has its inferred configuration, refresh views;
    the rows written."""
    table = estimates_table(sweep_id, job, preds, device=device)
    write_estimates_table(wh, sweep_id, job, table)
    return table


def write_estimates_table(wh: Any, sweep_id: str, job: str, table: pa.Table) -> None:
    """Write one sweep's rows as `estimates_table` built them (a caller that also shows them
    builds them once), make sure every job has its inferred configuration, refresh views."""
    from warehouse.catalog import build_catalog

    path = wh.root / "estimates" / f"job={encode_job(job)}" / f"sweep={sweep_id}.parquet"
    write_parquet_atomic(table, path)
    write_job_configs(wh)
    build_catalog(wh.root)


def write_job_configs(wh: Any) -> None:
    """Infer (once) the configuration of every job of the warehouse without one."""
    from lumos.estimate.infer import infer_base

    jobs = list(wh.sql("SELECT DISTINCT job FROM traces WHERE status = 'ok'")["job"])
    for job in jobs:
        path = wh.root / "job_configs" / f"job={encode_job(job)}" / "config.parquet"
        if path.exists():
            continue
        try:
            inf = infer_base(wh, job)
        except Exception:  # noqa: BLE001 - a job that cannot be inferred is simply not paired
            continue
        if inf.unread():  # its shapes were not recorded: its configuration is defaults
            continue
        cfg = inf.config
        data: dict[str, list[Any]] = {"job": [job]}
        data.update(_config_columns([cfg]))
        data["inferred_at"] = [datetime.now(UTC)]
        write_parquet_atomic(pa.Table.from_pydict(data, schema=JOB_CONFIGS), path)
