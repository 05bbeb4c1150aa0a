"""Evaluating fitted duration models: pure numpy, thousands of rows in milliseconds.

Each prediction carries an interval (the model's held-out 5%–95% log-residual range, widened
when the row is outside the observed shapes) and an `out_of_range` flag: some log feature
(FLOPs, bytes, M/K/N, any shape column) lies outside the [min, max] seen in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos.opmodel import features as F
from lumos.opmodel.fit import OpModel, Trees, _physics_design, feature_matrix

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


def tree_predict(trees: Trees, Z: np.ndarray) -> np.ndarray:
    """Sum of the ensemble's leaf values for each row of Z (n_rows × n_features)."""
    n, k = Z.shape
    # rows × trees node indices, flattened; Z is read through flat offsets row·k + feature
    idx = np.tile(trees.roots, n)
    base = np.repeat(np.arange(n, dtype=np.int64) * k, len(trees.roots))
    flat = np.ascontiguousarray(Z, dtype=np.float64).ravel()
    for _ in range(trees.depth):
        go_right = flat[base + trees.feature[idx]] > trees.threshold[idx]
        idx = trees.child[2 * idx + go_right]
    return trees.baseline + trees.value[idx].reshape(n, -1).sum(axis=1)


def predict_log(model: OpModel, X: np.ndarray, feats: F.Features) -> np.ndarray:
    """Natural log of the predicted µs for a log feature matrix from `feature_matrix`."""
    collective = F.op_class(model.operator) == "collective"
    phys = _physics_design(feats, collective) @ model.phys
    log_phys = np.log(np.maximum(phys, 1e-12))
    Z = (X[:, model.used] - model.mu) / model.sd
    D = np.column_stack([np.ones(len(X)), log_phys, Z])
    out = D @ model.beta
    if model.trees is not None:
        out = out + tree_predict(model.trees, Z)
    return out


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
