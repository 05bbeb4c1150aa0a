"""A device's set of duration models, fitted on first use from its benchmark rows.

Keyed by (operator, target, layout): one model per operator file and direction, and per layout
for collectives. A collective layout with no data falls back to a model pooled over the
operator's layouts (group size and node count as features), always flagged out of range.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lumos.opmodel import features as F
from lumos.opmodel.fit import DEFAULT_OPTIONS, FitOptions, OpModel, fit_model
from lumos.opmodel.predict import predict
from lumos.opmodel.roofline import resolve_device

__all__ = ["ModelSet", "DEFAULT_SMS"]

DEFAULT_SMS = 108  # wave quantisation for a device missing from the table: any fixed value works


class ModelSet:
    def __init__(self, rows: pd.DataFrame, device: str, opts: FitOptions = DEFAULT_OPTIONS) -> None:
        self.rows = rows
        self.device = device
        self.opts = opts
        dev = resolve_device(device)
        if dev is None and "gpu" in rows and len(rows):
            dev = resolve_device(str(rows["gpu"].iloc[0]))
        self.sms = dev.sms if dev else DEFAULT_SMS
        self._models: dict[tuple[str, str, str | None], OpModel] = {}

    def operators(self) -> list[str]:
        return sorted(self.rows["operator"].unique())

    def targets(self, operator: str) -> list[str]:
        sub = self.rows[self.rows["operator"] == operator]
        return [t for t in ("fwd_us", "bwd_us", "dur_us") if t in sub and sub[t].notna().any()]

    def layouts(self, operator: str) -> list[str]:
        sub = self.rows[self.rows["operator"] == operator]
        return sorted(x for x in sub["layout"].dropna().unique())

    def model(self, operator: str, target: str, layout: str | None = None) -> OpModel:
        key = (operator, target, layout)
        if key not in self._models:
            sub = self.rows[self.rows["operator"] == operator]
            if layout is not None:
                sub = sub[sub["layout"] == layout]
            if sub.empty or target not in sub or sub[target].notna().sum() == 0:
                where = f" layout {layout}" if layout else ""
                raise KeyError(f"no {target} data for {operator}{where} on device {self.device}")
            self._models[key] = fit_model(
                sub,
                device=self.device,
                operator=operator,
                target=target,
                sms=self.sms,
                layout=layout,
                opts=self.opts,
            )
        return self._models[key]

    def predict(self, operator: str, rows: pd.DataFrame, target: str) -> pd.DataFrame:
        """Columns us, low_us, high_us, out_of_range for `rows` (canonical shape columns)."""
        n = len(rows)
        out = pd.DataFrame(
            {
                "us": np.full(n, np.nan),
                "low_us": np.full(n, np.nan),
                "high_us": np.full(n, np.nan),
                "out_of_range": np.zeros(n, dtype=bool),
            },
            index=rows.index,
        )
        if n == 0:
            return out
        if F.op_class(operator) == "collective":
            layouts = (
                rows["nodes"].astype(int).astype(str)
                + "_"
                + rows["gpus_per_node"].astype(int).astype(str)
            )
            known = set(self.layouts(operator))
            groups = [(lay, layouts == lay) for lay in layouts.unique()]
        else:
            known, groups = set(), [(None, pd.Series(True, index=rows.index))]
        for lay, mask in groups:
            pooled = lay is not None and lay not in known
            model = self.model(operator, target, None if pooled else lay)
            pred = predict(model, rows[mask])
            out.loc[mask, "us"] = pred.us
            out.loc[mask, "low_us"] = pred.low_us
            out.loc[mask, "high_us"] = pred.high_us
            out.loc[mask, "out_of_range"] = pred.out_of_range | pooled
        return out
