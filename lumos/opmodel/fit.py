"""Fitting one duration model per (device, operator, target[, layout]).

Three stages, each on the previous one's residual, all in log time so errors are relative: a
roofline with fitted rates (it carries the scaling beyond the observed shapes), a robust log-space
linear correction, and gradient-boosted residual trees (exported to flat numpy arrays, so
predicting never imports scikit-learn). The interval is the 5%-95% range of held-out log
residuals. Details: docs/opmodel.md, "Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lumos.opmodel import features as F

__all__ = ["DEFAULT_OPTIONS", "FitOptions", "OpModel", "Trees", "feature_matrix", "fit_model"]


@dataclass(frozen=True)
class FitOptions:
    trees: bool = True  # stage 3; False gives the physics + log-linear model alone
    loglinear: bool = True  # stage 2; False (with trees=False) gives the fitted roofline alone
    max_iter: int = 200
    learning_rate: float = 0.1
    max_leaf_nodes: int = 15
    max_depth: int = 6  # bounds the traversal steps at prediction time
    min_samples_leaf: int = 4
    holdout: float = 0.2  # share of rows held out to measure the interval; 0 disables
    seed: int = 0


DEFAULT_OPTIONS = FitOptions()


@dataclass
class Trees:
    """A boosted-tree ensemble as flat arrays (node i of tree t is at `roots[t] + i`).

    `child[2 i]` / `child[2 i + 1]` are node i's left / right child (absolute indices); a leaf is
    its own child with an infinite threshold, so `depth` steps of the same update reach every leaf.
    """

    baseline: float
    roots: np.ndarray  # int64 [n_trees]
    feature: np.ndarray  # int64 [n_nodes]
    threshold: np.ndarray  # float64: go left when x <= threshold
    child: np.ndarray  # int64 [2 n_nodes]
    value: np.ndarray  # float64, leaf value (learning rate included)
    depth: int


@dataclass
class OpModel:
    device: str
    operator: str
    target: str  # fwd_us | bwd_us | dur_us
    layout: str | None
    sms: int
    feature_names: list[str]
    log_min: np.ndarray
    log_max: np.ndarray
    used: np.ndarray  # bool mask of features that vary in the data (used by stages 2–3)
    mu: np.ndarray
    sd: np.ndarray
    phys: np.ndarray  # [c0 µs, µs per effective FLOP, µs per byte, µs per extra launch]
    beta: np.ndarray  # stage 2 on [1, log t_phys, z...]
    trees: Trees | None
    q_lo: float  # log residual quantiles (5%, 95%) on held-out rows
    q_hi: float
    n_train: int
    meta: dict = field(default_factory=dict)


def feature_matrix(
    operator: str, cols: pd.DataFrame | dict, sms: int
) -> tuple[F.Features, np.ndarray, list[str]]:
    """(features, log feature matrix, names) for rows of one operator."""
    feats = F.compute(operator, cols, sms)
    names = ["flops_eff", "bytes", *feats.extra]
    mats = [feats.flops_eff, feats.bytes, *feats.extra.values()]
    for c in F.required_columns(operator):
        if c not in feats.extra:
            names.append(c)
            mats.append(np.asarray(cols[c], dtype=np.float64))
    X = np.log(np.column_stack(mats))
    return feats, X, names


def _nnls_relative(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """min Σ((A c)/y − 1)² subject to c ≥ 0, by trying every active set (A has ≤ 4 columns)."""
    Aw = A / y[:, None]
    ones = np.ones(len(y))
    k = A.shape[1]
    best, best_c = np.inf, np.zeros(k)
    for mask in range(1, 2**k):
        cols = [i for i in range(k) if mask >> i & 1]
        sub = Aw[:, cols]
        if not np.all(np.isfinite(sub)) or not np.any(sub[:, -1]):
            continue  # an all-zero column (no FLOPs for a collective) stays out
        c, *_ = np.linalg.lstsq(sub, ones, rcond=None)
        if np.any(c < 0):
            continue
        loss = float(((sub @ c - 1.0) ** 2).sum())
        if loss < best:
            best = loss
            best_c = np.zeros(k)
            best_c[cols] = c
    return best_c


def _physics_design(feats: F.Features, collective: bool) -> np.ndarray:
    """Columns [1, effective FLOPs, bytes, launches] whose non-negative mix is the time."""
    zero = np.zeros_like(feats.bytes)
    flops = zero if collective else feats.flops_eff
    launches = zero if feats.launches is None else feats.launches
    return np.column_stack([np.ones_like(feats.bytes), flops, feats.bytes, launches])


def _fit_physics(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    c = _nnls_relative(A, y)
    # one trimmed refit: measurement outliers (a contended node, a throttled clock) pull a
    # least-squares fit of relative error towards them
    r = np.log(np.maximum(A @ c, 1e-12) / y)
    mad = np.median(np.abs(r - np.median(r))) + 1e-9
    keep = np.abs(r - np.median(r)) < 4 * 1.4826 * mad
    if keep.sum() >= max(3, A.shape[1]) and not keep.all():
        c = _nnls_relative(A[keep], y[keep])
    return c


def _fit_l1(D: np.ndarray, t: np.ndarray, ridge: float = 1e-3, iters: int = 8) -> np.ndarray:
    """Least absolute deviations by iteratively reweighted least squares, lightly ridged."""
    reg = ridge * np.eye(D.shape[1])
    reg[0, 0] = 0.0
    w = np.ones(len(t))
    beta = np.zeros(D.shape[1])
    for _ in range(iters):
        Dw = D * w[:, None]
        beta = np.linalg.solve(D.T @ Dw + reg * len(t), Dw.T @ t)
        w = 1.0 / np.maximum(np.abs(t - D @ beta), 1e-3)
    return beta


def _export_trees(est) -> Trees:
    """Flatten a fitted HistGradientBoostingRegressor (its per-iteration `nodes` arrays)."""
    roots, feat, thr, child, value = [], [], [], [], []
    offset = 0
    depth = 0
    for (predictor,) in est._predictors:
        nodes = predictor.nodes
        leaf = nodes["is_leaf"].astype(bool)
        own = np.arange(len(nodes), dtype=np.int64) + offset
        left = np.where(leaf, own, nodes["left"].astype(np.int64) + offset)
        right = np.where(leaf, own, nodes["right"].astype(np.int64) + offset)
        roots.append(offset)
        feat.append(np.where(leaf, 0, nodes["feature_idx"]).astype(np.int64))
        thr.append(np.where(leaf, np.inf, nodes["num_threshold"]).astype(np.float64))
        child.append(np.column_stack([left, right]).ravel())
        value.append(nodes["value"].astype(np.float64))
        depth = max(depth, int(nodes["depth"].max()))
        offset += len(nodes)
    return Trees(
        baseline=float(np.ravel(est._baseline_prediction)[0]),
        roots=np.asarray(roots, dtype=np.int64),
        feature=np.concatenate(feat),
        threshold=np.concatenate(thr),
        child=np.concatenate(child),
        value=np.concatenate(value),
        depth=depth,
    )


def _fit_stages(
    X: np.ndarray,
    feats: F.Features,
    y: np.ndarray,
    collective: bool,
    used: np.ndarray,
    opts: FitOptions,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Trees | None]:
    phys = _fit_physics(_physics_design(feats, collective), y)
    Xu = X[:, used]
    mu = Xu.mean(axis=0)
    sd = Xu.std(axis=0)
    sd[sd == 0] = 1.0
    Z = (Xu - mu) / sd
    log_phys = np.log(np.maximum(_physics_design(feats, collective) @ phys, 1e-12))
    ly = np.log(y)
    if opts.loglinear:
        D = np.column_stack([np.ones(len(y)), log_phys, Z])
        beta = _fit_l1(D, ly)
    else:
        beta = np.zeros(2 + Z.shape[1])
        beta[1] = 1.0
    trees = None
    if opts.trees and len(y) >= 4 * opts.min_samples_leaf:
        from sklearn.ensemble import HistGradientBoostingRegressor

        D = np.column_stack([np.ones(len(y)), log_phys, Z])
        res = ly - D @ beta
        est = HistGradientBoostingRegressor(
            loss="absolute_error",
            max_iter=opts.max_iter,
            learning_rate=opts.learning_rate,
            max_leaf_nodes=opts.max_leaf_nodes,
            max_depth=opts.max_depth,
            min_samples_leaf=opts.min_samples_leaf,
            early_stopping=False,
            random_state=opts.seed,
        )
        est.fit(Z, res)
        trees = _export_trees(est)
    return phys, beta, mu, sd, trees


def fit_model(
    rows: pd.DataFrame,
    *,
    device: str,
    operator: str,
    target: str,
    sms: int,
    layout: str | None = None,
    opts: FitOptions = DEFAULT_OPTIONS,
) -> OpModel:
    """Fit one model on canonical rows (shape columns + the `target` duration column, µs)."""
    rows = rows[rows[target].notna()]
    if len(rows) < 8:
        raise ValueError(
            f"{device}/{operator}/{target}{'/' + layout if layout else ''}: "
            f"{len(rows)} rows, at least 8 are needed to fit a model"
        )
    y = rows[target].to_numpy(np.float64)
    feats, X, names = feature_matrix(operator, rows, sms)
    collective = F.op_class(operator) == "collective"
    used = X.std(axis=0) > 1e-12

    # the interval: fit on 80% of the rows, measure log residuals on the rest
    q_lo, q_hi = -0.1, 0.1
    if opts.holdout > 0 and len(y) >= 20:
        rng = np.random.default_rng(opts.seed + 1)
        perm = rng.permutation(len(y))
        n_hold = max(2, int(round(opts.holdout * len(y))))
        hold, keep = perm[:n_hold], perm[n_hold:]
        sub = _sub(feats, keep)
        part = _fit_stages(X[keep], sub, y[keep], collective, used, opts)
        probe = _assemble(
            device, operator, target, layout, sms, names, X[keep], used, part, 0, 0, len(keep)
        )
        r = np.log(y[hold]) - predict_log(probe, X[hold], _sub(feats, hold))
        q_lo, q_hi = (float(v) for v in np.quantile(r, [0.05, 0.95]))
    full = _fit_stages(X, feats, y, collective, used, opts)
    return _assemble(
        device, operator, target, layout, sms, names, X, used, full, q_lo, q_hi, len(y)
    )


def _sub(feats: F.Features, idx: np.ndarray) -> F.Features:
    return F.Features(
        feats.flops[idx],
        feats.bytes[idx],
        feats.flops_eff[idx],
        {k: v[idx] for k, v in feats.extra.items()},
    )


def _assemble(
    device, operator, target, layout, sms, names, X, used, stages, q_lo, q_hi, n
) -> OpModel:
    phys, beta, mu, sd, trees = stages
    return OpModel(
        device=device,
        operator=operator,
        target=target,
        layout=layout,
        sms=sms,
        feature_names=names,
        log_min=X.min(axis=0),
        log_max=X.max(axis=0),
        used=used,
        mu=mu,
        sd=sd,
        phys=phys,
        beta=beta,
        trees=trees,
        q_lo=min(q_lo, 0.0),
        q_hi=max(q_hi, 0.0),
        n_train=n,
    )


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
