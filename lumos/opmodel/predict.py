"""Evaluating fitted duration models: pure numpy, thousands of rows in milliseconds.

Each prediction carries an interval (the model's held-out 5%–95% log-residual range, widened
when the row is outside the observed shapes) and an `out_of_range` flag: some log feature
(FLOPs, bytes, M/K/N, any shape column) lies outside the [min, max] seen in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.opmodel.fit import OpModel, feature_matrix, predict_log, tree_predict

__all__ = ["Prediction", "predict", "predict_log", "tree_predict"]

# How much wider the interval grows per unit of natural-log distance outside the observed range:
# a shape e× beyond the largest seen gets its interval widened by e^0.25 ≈ 1.28× on each side.
WIDEN_PER_LOG = 0.25
RANGE_TOL = 1e-9


@dataclass(frozen=True)
class Prediction:
    us: np.ndarray
    low_us: np.ndarray
    high_us: np.ndarray
    out_of_range: np.ndarray  # bool
    excess_log: np.ndarray  # total log-distance outside the observed range (0 inside)


def predict(model: OpModel, cols) -> Prediction:
    """Predict rows given as canonical shape columns (a DataFrame or a dict of arrays)."""
    feats, X, names = feature_matrix(model.operator, cols, model.sms)
    if names != model.feature_names:
        raise ValueError(f"feature mismatch for {model.operator}: {names} vs {model.feature_names}")
    log_us = predict_log(model, X, feats)
    below = np.maximum(model.log_min - X, 0.0)
    above = np.maximum(X - model.log_max, 0.0)
    excess = (below + above).sum(axis=1)
    oor = excess > RANGE_TOL
    widen = WIDEN_PER_LOG * excess
    return Prediction(
        us=np.exp(log_us),
        low_us=np.exp(log_us + model.q_lo - widen),
        high_us=np.exp(log_us + model.q_hi + widen),
        out_of_range=oor,
        excess_log=excess,
    )
