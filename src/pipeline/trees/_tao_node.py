"""Reduced problems of Tree Alternating Optimization (TAO) for single nodes.

With every other node fixed, the parameters of one decision node only decide whether each
point that reaches it goes to the left or the right subtree. A point matters ("care
point") only if exactly one of the two subtrees would give it its target label; it then
wants that child. The node's reduced problem is the weighted 0/1 binary problem over the
care points (class 0 = left, 1 = right) plus ``penalty * phi(node)``:

* axis-aligned nodes, ``x[f] <= t`` goes left, ``phi = 1`` per split: solved exactly by
  enumerating every feature and every cut between consecutive distinct care values;
* oblique nodes, ``w . x <= t`` goes left, ``phi = ||w||_1``: approximated with
  l1-regularised logistic regression (scikit-learn ``liblinear``), whose threshold is then
  re-optimised exactly along ``w . x``.

Both solvers also consider the two constant nodes (everything left / right, ``w = 0``),
which is how degenerate reduced problems end up, and keep the current parameters unless
a candidate is strictly better — so every node update never increases the tree objective.

A node is stored as a dense weight vector ``w`` (shape (n_features,)) and threshold ``t``;
a constant node has ``w = 0`` and ``t = +1`` (all left) or ``t = -1`` (all right).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

ALL_LEFT, ALL_RIGHT = 1.0, -1.0
_REL_TOL = 1e-12


@dataclass
class NodeSolution:
    """Parameters of one decision node and their reduced objective value."""

    w: np.ndarray  # shape (n_features,)
    t: float
    objective: float


def care_problem(pred_left: np.ndarray, pred_right: np.ndarray, target: np.ndarray):
    """Care points of a decision node and the child each one wants.

    Parameters
    ----------
    pred_left, pred_right : ndarray of shape (n,)
        Label each point reaching the node would get through the left / right subtree.
    target : ndarray of shape (n,)
        The points' target labels.

    Returns
    -------
    care : ndarray of bool, shape (n,)
        True where exactly one child predicts the target.
    y : ndarray of int, shape (n_care,)
        0 if the care point wants the left child, 1 if the right.
    """
    left_ok = pred_left == target
    right_ok = pred_right == target
    care = left_ok != right_ok
    return care, right_ok[care].astype(np.int64)


def regularizer(w: np.ndarray, oblique: bool) -> float:
    """phi of one node: ||w||_1 for oblique nodes, 1 per non-constant axis-aligned node."""
    if oblique:
        return float(np.abs(w).sum())
    return float(np.any(w != 0))


def node_objective(X: np.ndarray, y: np.ndarray, weight: np.ndarray, w: np.ndarray, t: float,
                   penalty: float, oblique: bool) -> float:
    """Weighted 0/1 error of ``w . x <= t -> left`` on the care points plus ``penalty * phi``."""
    goes_right = (X @ w > t) if X.shape[0] else np.zeros(0, dtype=bool)
    return float(weight[goes_right != (y == 1)].sum()) + penalty * regularizer(w, oblique)


def best_cuts(V: np.ndarray, y: np.ndarray, weight: np.ndarray):
    """Exact best cut ``v <= t -> left`` of every column of ``V`` (non-constant cuts only).

    Parameters
    ----------
    V : ndarray of shape (n, d), n >= 2
        Values of the care points (one column per candidate feature / direction).
    y, weight : ndarray of shape (n,)
        Wanted child (0 left, 1 right) and weight of each care point.

    Returns
    -------
    err : ndarray of shape (d,)
        Smallest weighted error of a cut that sends points to both sides (inf when the
        column is constant).
    thr : ndarray of shape (d,)
        A threshold achieving it: midpoint between consecutive distinct sorted values.
    """
    n, d = V.shape
    order = np.argsort(V, axis=0, kind="stable")
    Vs = np.take_along_axis(V, order, axis=0)
    w_right = (weight * (y == 1))[order]
    w_left = (weight * (y == 0))[order]
    # Cut after k sorted values (k = 1..n-1): the first k go left.
    err = np.cumsum(w_right, axis=0)[:-1] + (w_left.sum(axis=0) - np.cumsum(w_left, axis=0)[:-1])
    err = np.where(Vs[:-1] < Vs[1:], err, np.inf)
    k = np.argmin(err, axis=0)
    cols = np.arange(d)
    lo, hi = Vs[k, cols], Vs[k + 1, cols]
    thr = lo + (hi - lo) / 2
    thr = np.where(thr < hi, thr, lo)  # guard against rounding onto the upper value
    return err[k, cols], thr


def _best_of(candidates: list[NodeSolution], current: NodeSolution) -> NodeSolution:
    best = min(candidates, key=lambda s: s.objective)
    if best.objective < current.objective - _REL_TOL * max(1.0, abs(current.objective)):
        return best
    return current


def _constant_candidates(y: np.ndarray, weight: np.ndarray, n_features: int) -> list[NodeSolution]:
    zero = np.zeros(n_features)
    return [NodeSolution(zero, ALL_LEFT, float(weight[y == 1].sum())),
            NodeSolution(zero.copy(), ALL_RIGHT, float(weight[y == 0].sum()))]


def solve_axis_node(X: np.ndarray, y: np.ndarray, weight: np.ndarray, penalty: float,
                    w_cur: np.ndarray, t_cur: float) -> NodeSolution:
    """Exact axis-aligned reduced problem: best ``x[f] <= t`` (or a constant node).

    Parameters
    ----------
    X : ndarray of shape (n_care, n_features)
        Care points. ``y`` (0 left / 1 right) and ``weight`` have shape (n_care,).
    penalty : float
        Cost of one split in units of misassigned points (lambda / mu).
    w_cur, t_cur : current node parameters (returned unless strictly improved on).
    """
    current = NodeSolution(w_cur, t_cur, node_objective(X, y, weight, w_cur, t_cur, penalty, False))
    candidates = _constant_candidates(y, weight, X.shape[1])
    if X.shape[0] >= 2 and 0 < y.sum() < y.size:
        err, thr = best_cuts(X, y, weight)
        f = int(np.argmin(err))
        if np.isfinite(err[f]):
            w = np.zeros(X.shape[1])
            w[f] = 1.0
            candidates.append(NodeSolution(w, float(thr[f]), float(err[f]) + penalty))
    return _best_of(candidates, current)


def solve_oblique_node(X: np.ndarray, y: np.ndarray, weight: np.ndarray, penalty: float,
                       w_cur: np.ndarray, t_cur: float, *, max_C: float = 1e3, max_iter: int = 200,
                       random_state: int | None = None) -> NodeSolution:
    """Sparse oblique reduced problem via l1-regularised logistic regression.

    The surrogate ``C * sum_n weight_n * logloss_n + ||w||_1`` is solved with
    ``C = 1 / penalty`` (capped at ``max_C``; ``max_C`` when ``penalty == 0``), on features
    centred over the care points (so liblinear's penalised intercept stays near zero). The
    threshold is then set to the exact best cut along ``w . x``. Arguments as in
    :func:`solve_axis_node`; ``penalty`` multiplies ``||w||_1``.
    """
    current = NodeSolution(w_cur, t_cur, node_objective(X, y, weight, w_cur, t_cur, penalty, True))
    candidates = _constant_candidates(y, weight, X.shape[1])
    if X.shape[0] >= 2 and 0 < y.sum() < y.size:
        C = min(1.0 / penalty, max_C) if penalty > 0 else max_C
        mean = X.mean(axis=0)
        clf = LogisticRegression(solver="liblinear", l1_ratio=1.0, C=C, max_iter=max_iter,
                                 random_state=random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(X - mean, y, sample_weight=weight)
        w = clf.coef_.ravel().astype(float)
        if np.any(w != 0):
            err, thr = best_cuts((X @ w)[:, None], y, weight)
            if np.isfinite(err[0]):
                candidates.append(NodeSolution(w, float(thr[0]), float(err[0]) + penalty * np.abs(w).sum()))
    return _best_of(candidates, current)
