"""Filling in the durations of a benchmark-format CSV (`lumos opmodel predict`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from lumos.opmodel.models import ModelSet
from lumos.opmodel.opbench import DURATION_COLUMNS, OpbenchError, read_file
from lumos.opmodel.store import load_rows

__all__ = ["predict_file"]

# the header written for a target the input file does not have
_HEADER = {"fwd_us": "F_dur(us)", "bwd_us": "B_dur(us)", "dur_us": "dur(us)"}


def predict_file(
    inp: Path,
    out: Path,
    *,
    device: str,
    warehouse: Path,
    operator: str | None = None,
    overwrite: bool = False,
) -> int:
    """Write `out`: `inp` with blank durations filled, intervals and `out_of_range` added."""
    f = read_file(inp, require_durations=False, operator=operator)
    rows = load_rows(warehouse, device, operator=f.operator)
    if rows.empty:
        raise OpbenchError(
            inp, f"no benchmark rows for operator {f.operator} on device {device} in {warehouse}"
        )
    models = ModelSet(rows, device)
    table = pd.read_csv(inp, dtype=str, keep_default_na=False)
    table.columns = [c.strip() for c in table.columns]

    given = {DURATION_COLUMNS[c]: c for c in table.columns if c in DURATION_COLUMNS}
    targets = [t for t in ("fwd_us", "bwd_us", "dur_us") if t in given] or models.targets(
        f.operator
    )
    oor = np.zeros(len(table), dtype=bool)
    for target in targets:
        pred = models.predict(f.operator, f.rows, target)
        col = given.get(target, _HEADER[target])
        if col not in table:
            table[col] = ""
        if overwrite or target not in f.rows:
            fill = np.ones(len(table), dtype=bool)
        else:
            fill = f.rows[target].isna().to_numpy()
        table.loc[fill, col] = [f"{v:.1f}" for v in pred["us"].to_numpy()[fill]]
        short = target.removesuffix("_us")
        table[f"{short}_low_us"] = [f"{v:.1f}" for v in pred["low_us"]]
        table[f"{short}_high_us"] = [f"{v:.1f}" for v in pred["high_us"]]
        oor |= pred["out_of_range"].to_numpy()
    table["out_of_range"] = np.where(oor, "true", "false")

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    table.to_csv(tmp, index=False)
    os.replace(tmp, out)
    return len(table)
