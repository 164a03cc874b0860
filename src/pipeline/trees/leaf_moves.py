"""Per-sample explanations of where a tree puts a point: the margin to the nearest cut on its
path and the smallest change of its coordinates that moves it to a leaf of another cluster.

The concept-space counterfactual of one sample (:mod:`pipeline.counterfactuals.concept_space`
translates whole clusters): a leaf of an explanation tree is the set of points satisfying
its path's tests, a box for an axis-aligned tree and a polytope for an oblique one, so the
smallest change that moves ``x`` into leaf ``l`` is the projection of ``x`` onto that set.
Distances are measured after dividing every coordinate by ``scale`` (e.g. the training
standard deviation of each concept), so that no concept is cheap to move only because its
numbers are small. A test ``v <= t`` goes left and ``v > t`` right: a move to the right of a
cut lands on the next float above ``t``, so the moved point routes exactly to the stated
leaf (checked with :meth:`ExplanationTree.apply`; an oblique projection that does not reach
it is refined and, failing that, reported as no move: NaN distance, target -1).

Pure numpy: trees and arrays in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.trees.rules import oblique_terms
from pipeline.validation import InvalidInputError, check_matrix


@dataclass(frozen=True)
class LeafMoves:
    """The nearest other-cluster leaf of every row.

    Attributes
    ----------
    leaf : ndarray (n,), int64
        Target leaf id (-1 when no leaf of another cluster can be reached).
    label : ndarray (n,), int64
        The target leaf's cluster (-1 when none).
    delta : ndarray (n, d)
        The change of the coordinates (new point = ``X + delta``); NaN rows when none.
    distance : ndarray (n,)
        Euclidean length of ``delta / scale``; NaN when none.
    """

    leaf: np.ndarray
    label: np.ndarray
    delta: np.ndarray
    distance: np.ndarray


def _paths(tree) -> dict[int, list[tuple[int, bool]]]:
    """Leaf id -> the (node, goes_right) tests on its path, root first."""
    out: dict[int, list[tuple[int, bool]]] = {}
    stack: list[tuple[int, list]] = [(0, [])]
    left, right = tree.children_left, tree.children_right
    while stack:
        n, path = stack.pop()
        if tree.is_leaf(n):
            out[n] = path
            continue
        stack.append((int(right[n]), path + [(n, True)]))
        stack.append((int(left[n]), path + [(n, False)]))
    return out


def leaf_paths(tree) -> dict[int, list[tuple[int, bool]]]:
    """Leaf id -> the ``(node, goes_right)`` tests on its path, root first."""
    return _paths(tree)


def _scale(scale, d: int) -> np.ndarray:
    if scale is None:
        return np.ones(d)
    s = np.asarray(scale, dtype=np.float64).reshape(-1)
    if s.shape != (d,) or not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise InvalidInputError(f"scale must hold {d} positive finite numbers (one per feature), got shape {s.shape}.")
    return s


def path_margins(tree, X, scale=None) -> tuple[np.ndarray, np.ndarray]:
    """Distance of every row to the nearest cut on its own path, and that cut's node.

    For an axis test ``x_f <= t`` the margin is ``|x_f - t| / scale_f``; for an oblique test
    ``w·x <= t`` it is ``|w·x - t| / ||w ⊙ scale||`` (the distance to the hyperplane in scaled
    coordinates). Returns ``(margin (n,), node (n,))``; a tree that is a single leaf gives
    ``inf`` and -1.
    """
    X = check_matrix(X, "X", min_rows=0)
    s = _scale(scale, X.shape[1])
    n = X.shape[0]
    margin = np.full(n, np.inf)
    node_of = np.full(n, -1, dtype=np.int64)
    leaf_of = tree.apply(X)
    for leaf, path in _paths(tree).items():
        rows = np.flatnonzero(leaf_of == leaf)
        if rows.size == 0:
            continue
        for node, _ in path:
            m = _hyperplane_distance(tree, node, X[rows], s)
            better = m < margin[rows]
            margin[rows[better]] = m[better]
            node_of[rows[better]] = node
    return margin, node_of


def _hyperplane_distance(tree, node: int, X: np.ndarray, s: np.ndarray) -> np.ndarray:
    t = float(tree.threshold[node])
    if tree.is_oblique(node):
        cols, w = oblique_terms(tree.weights(node))
        return np.abs(X[:, cols] @ w - t) / float(np.linalg.norm(w * s[cols]))
    f = int(tree.feature[node])
    return np.abs(X[:, f] - t) / s[f]


def _box(tree, path, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(low, high, low_strict) of an axis-aligned leaf: ``low < x <= high`` per feature."""
    low, high = np.full(d, -np.inf), np.full(d, np.inf)
    for node, right in path:
        f, t = int(tree.feature[node]), float(tree.threshold[node])
        if right:
            low[f] = max(low[f], t)
        else:
            high[f] = min(high[f], t)
    if np.any(low >= high):
        return None  # a contradictory path: nothing lands there
    return low, high, np.isfinite(low)


def _move_into_box(X: np.ndarray, box) -> np.ndarray:
    """``delta`` with ``low < X + delta <= high`` as computed in floating point (``target - X``
    added back to ``X`` can round onto the cut, so the last ulps are fixed where it does)."""
    low, high, _ = box
    above = np.nextafter(low, np.inf)  # strictly above a right-going cut
    target = np.minimum(np.maximum(X, np.where(np.isfinite(low), above, -np.inf)), high)
    delta = target - X
    for _ in range(8):
        moved = X + delta
        under, over = moved <= low, moved > high
        if not (under.any() or over.any()):
            break
        delta = np.where(under, np.nextafter(delta, np.inf), np.where(over, np.nextafter(delta, -np.inf), delta))
    return delta


def _move_into_polytope(tree, path, X: np.ndarray, s: np.ndarray, n_iter: int = 200) -> np.ndarray:
    """Dykstra's projection of each row (scaled by ``s``) onto the leaf's half-spaces."""
    planes = []
    for node, right in path:
        if tree.is_oblique(node):
            cols, w = oblique_terms(tree.weights(node))
            a = np.zeros(X.shape[1])
            a[cols] = w
        else:
            a = np.zeros(X.shape[1])
            a[int(tree.feature[node])] = 1.0
        t = float(tree.threshold[node])
        # a·x <= t (left), or -a·x <= -t' with t' just above t (right); in scaled coordinates y = x / s
        t_side = -np.nextafter(t, np.inf) - 1e-12 * max(1.0, abs(t)) if right else t
        planes.append(((-a if right else a) * s, t_side))
    Y = X / s
    P = [np.zeros_like(Y) for _ in planes]
    for _ in range(n_iter):
        moved = 0.0
        for k, (a, b) in enumerate(planes):
            Z = Y + P[k]
            excess = np.maximum(Z @ a - b, 0.0) / float(a @ a)
            Y_new = Z - excess[:, None] * a
            P[k] = Z - Y_new
            moved = max(moved, float(np.abs(Y_new - Y).max(initial=0.0)))
            Y = Y_new
        if moved < 1e-12:
            break
    # a last push onto the feasible side of every plane (Dykstra converges from outside)
    for _ in range(5):
        for a, b in planes:
            excess = np.maximum(Y @ a - b, 0.0)
            Y = Y - (excess * (1 + 1e-9) + (excess > 0) * 1e-12)[:, None] * a / float(a @ a)
    return Y * s - X


def nearest_other_leaf(tree, X, scale=None) -> LeafMoves:
    """For every row, the smallest change (Euclidean in ``X / scale``) that makes ``tree`` put it
    in a leaf of another cluster, and that leaf. See the module docstring."""
    X = check_matrix(X, "X", min_rows=0)
    n, d = X.shape
    s = _scale(scale, d)
    own = tree.predict(X)
    best = np.full(n, np.inf)
    out_leaf = np.full(n, -1, dtype=np.int64)
    out_delta = np.full((n, d), np.nan)
    labels = tree.label
    oblique = any(tree.is_oblique(k) for k in range(tree.n_nodes))
    for leaf, path in _paths(tree).items():
        rows = np.flatnonzero(own != labels[leaf])
        if rows.size == 0:
            continue
        if oblique:
            delta = _move_into_polytope(tree, path, X[rows], s)
        else:
            box = _box(tree, path, d)
            if box is None:
                continue
            delta = _move_into_box(X[rows], box)
        moved = X[rows] + delta
        reached = tree.apply(moved) == leaf
        dist = np.where(reached, np.linalg.norm(delta / s, axis=1), np.inf)
        better = dist < best[rows]
        idx = rows[better]
        best[idx], out_leaf[idx], out_delta[idx] = dist[better], leaf, delta[better]
    none = ~np.isfinite(best)
    best[none] = np.nan
    label = np.where(out_leaf >= 0, labels[np.maximum(out_leaf, 0)], -1).astype(np.int64)
    return LeafMoves(leaf=out_leaf, label=label, delta=out_delta, distance=best)


__all__ = ["LeafMoves", "leaf_paths", "nearest_other_leaf", "path_margins"]
