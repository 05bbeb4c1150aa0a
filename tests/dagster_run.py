"""Materialise assets for one `trace_jobs` partition on a fresh ephemeral Dagster instance."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.partitions import TRACE_JOBS
from pipelines.resources import WarehouseResource


def materialize_job(
    assets: Sequence[Any],
    job: str,
    inbox: Path,
    warehouse: Path,
    reports: Path | None = None,
    **kwargs: Any,
) -> dg.ExecuteInProcessResult:
    """`dg.materialize` of `assets` for partition `job` (registered first), reading the inbox
    `inbox` and writing the warehouse `warehouse`; `kwargs` go to `dg.materialize`."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(TRACE_JOBS, [job])
    return dg.materialize(
        assets,
        partition_key=job,
        instance=instance,
        resources={
            "lumos": WarehouseResource(
                warehouse=str(warehouse), inbox=str(inbox), reports=str(reports or "")
            )
        },
        **kwargs,
    )
