"""Accuracy of the duration models: random 80/20 splits and extrapolation to larger shapes.

The baseline in the same run is the fitted roofline alone (stage 1: constant achieved FLOP rate,
bandwidth, overhead and per-launch cost), so the model's gain over physics with constant rates
is measured, not assumed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lumos.opmodel import features as F
from lumos.opmodel.fit import DEFAULT_OPTIONS, FitOptions, fit_model
from lumos.opmodel.models import ModelSet
from lumos.opmodel.predict import predict

__all__ = ["evaluate", "extrapolate", "format_table", "groups"]

ROOFLINE = FitOptions(trees=False, loglinear=False, holdout=0)


def groups(rows: pd.DataFrame) -> list[tuple[str, str, str | None, pd.DataFrame]]:
    """(operator, target, layout, rows) for every model the rows support."""
    out = []
    for op, sub in rows.groupby("operator", sort=True):
        layouts = [None]
        if F.op_class(op) == "collective":
            layouts = sorted(sub["layout"].dropna().unique())
        for lay in layouts:
            part = sub if lay is None else sub[sub["layout"] == lay]
            for t in ("fwd_us", "bwd_us", "dur_us"):
                if t in part and part[t].notna().any():
                    out.append((op, t, lay, part[part[t].notna()]))
    return out


def _errors(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.abs(pred / true - 1.0)


def evaluate(
    rows: pd.DataFrame,
    device: str,
    *,
    seed: int = 0,
    train_share: float = 0.8,
    opts: FitOptions = DEFAULT_OPTIONS,
) -> pd.DataFrame:
    """Per (operator, target, layout): median and p90 relative error of model and baseline."""
    sms = ModelSet(rows.head(1), device).sms
    records = []
    for op, target, lay, part in groups(rows):
        rng = np.random.default_rng(seed)
        perm = rng.permutation(len(part))
        n_train = int(train_share * len(part))
        train, test = part.iloc[perm[:n_train]], part.iloc[perm[n_train:]]
        y = test[target].to_numpy(np.float64)
        rec = {
            "operator": op,
            "target": target,
            "layout": lay,
            "n_train": len(train),
            "n_test": len(test),
        }
        for name, o in (("model", opts), ("roofline", ROOFLINE)):
            m = fit_model(
                train, device=device, operator=op, target=target, sms=sms, layout=lay, opts=o
            )
            p = predict(m, test)
            e = _errors(p.us, y)
            rec[f"{name}_median"] = float(np.median(e))
            rec[f"{name}_p90"] = float(np.quantile(e, 0.9))
            if name == "model":
                rec["coverage"] = float(np.mean((y >= p.low_us) & (y <= p.high_us)))
        records.append(rec)
    return pd.DataFrame.from_records(records)


def extrapolate(
    rows: pd.DataFrame,
    device: str,
    operator: str,
    target: str,
    *,
    share: float = 0.2,
    opts: FitOptions = DEFAULT_OPTIONS,
) -> dict[str, float]:
    """Train on the smaller (1 − share) of shapes by FLOPs, test on the largest `share`."""
    sms = ModelSet(rows.head(1), device).sms
    part = rows[(rows["operator"] == operator) & rows[target].notna()]
    flops = F.compute(operator, part, sms).flops
    order = np.argsort(flops, kind="stable")
    cut = int(round((1 - share) * len(part)))
    train, test = part.iloc[order[:cut]], part.iloc[order[cut:]]
    y = test[target].to_numpy(np.float64)
    out: dict[str, float] = {"n_test": float(len(test))}
    for name, o in (("model", opts), ("roofline", ROOFLINE)):
        m = fit_model(train, device=device, operator=operator, target=target, sms=sms, opts=o)
        p = predict(m, test)
        e = _errors(p.us, y)
        out[f"{name}_median"] = float(np.median(e))
        out[f"{name}_p90"] = float(np.quantile(e, 0.9))
        if name == "model":
            out["out_of_range"] = float(np.mean(p.out_of_range))
            out["coverage"] = float(np.mean((y >= p.low_us) & (y <= p.high_us)))
    return out


def format_table(df: pd.DataFrame) -> str:
    """A fixed-width table of `evaluate`'s result, errors in percent."""
    lines = [
        f"{'operator':32s} {'target':7s} {'n_test':>6s} {'median%':>8s} {'p90%':>7s} "
        f"{'roof_med%':>9s} {'roof_p90%':>9s} {'cover%':>7s}"
    ]
    for r in df.itertuples(index=False):
        name = r.operator + (f" [{r.layout}]" if r.layout else "")
        lines.append(
            f"{name:32s} {r.target.removesuffix('_us'):7s} {r.n_test:6d} "
            f"{100 * r.model_median:8.1f} {100 * r.model_p90:7.1f} "
            f"{100 * r.roofline_median:9.1f} {100 * r.roofline_p90:9.1f} {100 * r.coverage:7.0f}"
        )
    return "\n".join(lines)
