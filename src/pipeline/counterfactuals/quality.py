"""Quality of global counterfactual explanations (Plumb et al., ICML 2020, Sec. 3).

For a translation ``t(x) = x + delta`` from group ``X_i`` to group ``X_j`` and encoder ``r``:

* correctness (Eq. 3): fraction of ``x in X_i`` with some ``x' in X_j`` such that
  ``||r(x + delta) - r(x')||_2^2 <= eps``;
* coverage (Eq. 4): fraction of ``x' in X_j`` with some ``x in X_i`` such that
  ``||r(x') - r(x + delta)||_2^2 <= eps``;
* self-similarity: correctness of the identity translation of a group onto itself, where a
  point may not be its own witness (otherwise it is trivially 1);
* ``eps`` is the smallest value at which every group's self-similarity is in [0.95, 1];
* similarity of a k1-sparse to a k2-sparse explanation (Eq. 10).

Distances are squared Euclidean distances in representation space, as in Eqs. 3-4.
Nearest neighbours come from :class:`sklearn.neighbors.NearestNeighbors`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from sklearn.neighbors import NearestNeighbors

from pipeline.counterfactuals._checks import check_delta, check_encoder, check_groups, check_k, encode
from pipeline.validation import InvalidInputError, check_matrix, check_vector

#: the self-similarity every group must reach when choosing eps (paper: "between 0.95 and 1")
SELF_SIMILARITY_TARGET = 0.95


def top_k(delta, k: int | None) -> np.ndarray:
    """Keep the ``k`` entries of largest absolute value, zero the rest (Sec. 3.3).

    Ties are broken towards the lower index so the result is deterministic.

    Parameters
    ----------
    delta : array-like of shape (d,)
    k : int or None
        Number of entries kept; None returns a copy of ``delta``.

    Returns
    -------
    ndarray of shape (d,)
    """
    delta = check_vector(delta, "delta")
    k = check_k(k, delta.shape[0])
    out = delta.copy()
    if k is not None and k < delta.shape[0]:
        order = np.argsort(-np.abs(delta), kind="stable")
        out[order[k:]] = 0.0
    return out


def _nearest_sq(queries: np.ndarray, reference: np.ndarray, exclude_self: bool) -> np.ndarray:
    """Squared distance from each query row to its nearest reference row.

    With ``exclude_self`` (queries are the reference rows themselves, in the same order),
    the row's own copy is skipped: the distance to the nearest *other* row.
    """
    nn = NearestNeighbors(n_neighbors=1).fit(reference)
    # kneighbors() without X queries the fitted rows and skips each row's own copy.
    dist, _ = nn.kneighbors() if exclude_self else nn.kneighbors(queries)
    return dist[:, 0] ** 2


def _same_group(X_i: np.ndarray, X_j: np.ndarray, delta: np.ndarray) -> bool:
    return X_i.shape == X_j.shape and not delta.any() and np.array_equal(X_i, X_j)


def _check_eps(eps) -> float:
    ok = isinstance(eps, (int, float, np.integer, np.floating)) and not isinstance(eps, bool)
    if not ok or not np.isfinite(eps) or eps < 0:
        raise InvalidInputError(
            f"eps must be a finite non-negative squared distance, got {eps!r}; see choose_epsilon()."
        )
    return float(eps)


def _metric_inputs(encoder, X_i, X_j, delta, eps):
    X_i = check_matrix(X_i, "X_i", min_rows=1)
    X_j = check_matrix(X_j, "X_j", min_rows=1)
    if X_i.shape[1] != X_j.shape[1]:
        raise InvalidInputError(f"X_i has {X_i.shape[1]} features and X_j {X_j.shape[1]}; they must match.")
    delta = check_delta(delta, X_i.shape[1])
    _check_eps(eps)
    check_encoder(encoder, X_i.shape[1])
    exclude_self = _same_group(X_i, X_j, delta)
    if exclude_self and X_i.shape[0] < 2:
        raise InvalidInputError("self-similarity of a group with one point is undefined; it needs >= 2 points.")
    return encode(encoder, X_i + delta), encode(encoder, X_j), exclude_self


def correctness(encoder, X_i, X_j, delta, eps: float) -> float:
    """Correctness of the translation ``x -> x + delta`` from ``X_i`` to ``X_j`` (Eq. 3).

    Parameters
    ----------
    encoder : callable torch module, (n, d) -> (n, m)
    X_i : array-like of shape (n_i, d)
        Points of the initial group.
    X_j : array-like of shape (n_j, d)
        Points of the target group.
    delta : array-like of shape (d,)
        The translation.
    eps : float
        Squared-distance threshold in representation space (see :func:`choose_epsilon`).

    Returns
    -------
    float in [0, 1]
        Fraction of translated initial points within ``eps`` of some target point. When
        ``X_i`` and ``X_j`` are the same array and ``delta`` is zero this is the group's
        self-similarity: a point cannot be its own witness.
    """
    R_t, R_j, exclude_self = _metric_inputs(encoder, X_i, X_j, delta, eps)
    return float(np.mean(_nearest_sq(R_t, R_j, exclude_self) <= eps))


def coverage(encoder, X_i, X_j, delta, eps: float) -> float:
    """Coverage of the translation ``x -> x + delta`` from ``X_i`` to ``X_j`` (Eq. 4).

    Same arguments as :func:`correctness`; returns the fraction of target points within
    ``eps`` of some translated initial point.
    """
    R_t, R_j, exclude_self = _metric_inputs(encoder, X_i, X_j, delta, eps)
    return float(np.mean(_nearest_sq(R_j, R_t, exclude_self) <= eps))


def _self_distances(R: np.ndarray) -> np.ndarray:
    return _nearest_sq(R, R, exclude_self=True)


def self_similarity(encoder, X_g, eps: float) -> float:
    """Self-similarity of one group: correctness of the identity translation onto itself."""
    X_g = check_matrix(X_g, "X_g", min_rows=2)
    return correctness(encoder, X_g, X_g, np.zeros(X_g.shape[1]), eps)


def choose_epsilon(encoder, X, groups, target: float = SELF_SIMILARITY_TARGET) -> float:
    """The smallest ``eps`` at which every group's self-similarity is at least ``target``.

    The paper increases eps until each group's self-similarity is in [0.95, 1]. Because
    self-similarity is a step function of eps that only increases, the answer is exact: per
    group, the ``ceil(target * n_g)``-th smallest squared distance from a point to its
    nearest other point of the group; eps is the largest of these over groups.

    Parameters
    ----------
    encoder : callable torch module, (n, d) -> (n, m)
    X : array-like of shape (n, d)
    groups : array-like of shape (n,)
        Integer group labels; -1 (noise) is ignored.
    target : float in (0, 1]

    Returns
    -------
    float
        Squared-distance threshold for :func:`correctness` / :func:`coverage`.
    """
    X, groups, labels = check_groups(X, groups)
    if not 0 < target <= 1:
        raise InvalidInputError(f"target self-similarity must be in (0, 1], got {target!r}.")
    check_encoder(encoder, X.shape[1])
    R = encode(encoder, X)
    eps = 0.0
    for g in labels:
        d = np.sort(_self_distances(R[groups == g]))
        need = int(np.ceil(target * d.size - 1e-9))
        eps = max(eps, float(d[need - 1]))
    return eps


def similarity(e1, e2) -> float:
    """How much of explanation ``e1`` uses features also used by ``e2`` (Eq. 10).

    ``sum_i |e1[i]| * 1[e2[i] != 0] / ||e1||_1``; 1 means e1's features are a subset of
    e2's, 0 that they are disjoint. An all-zero ``e1`` uses no features and scores 1.

    Parameters
    ----------
    e1, e2 : array-like of shape (d,)
    """
    e1 = check_vector(e1, "e1")
    e2 = check_vector(e2, "e2", length=e1.shape[0])
    total = np.abs(e1).sum()
    if total == 0:
        return 1.0
    return float(np.abs(e1)[e2 != 0].sum() / total)


class PairwiseEvaluator:
    """Correctness and coverage of many explanations on one grouping, encoding each group once.

    Parameters
    ----------
    encoder : callable torch module, (n, d) -> (n, m)
    X : array-like of shape (n, d)
    groups : array-like of shape (n,)
        Integer group labels; -1 (noise) is ignored.
    eps : float
        Squared-distance threshold (see :func:`choose_epsilon`).

    Attributes
    ----------
    labels : ndarray of shape (l,)
        Sorted group labels.
    self_similarity : ndarray of shape (l,)
        Each group's self-similarity at ``eps``.
    """

    def __init__(self, encoder, X, groups, eps: float):
        X, groups, self.labels = check_groups(X, groups)
        eps = _check_eps(eps)
        check_encoder(encoder, X.shape[1])
        self.encoder, self.eps, self.n_features = encoder, eps, X.shape[1]
        self._members = [X[groups == g] for g in self.labels]
        self._reps = [encode(encoder, Xg) for Xg in self._members]
        self.self_similarity = np.array([np.mean(_self_distances(R) <= eps) for R in self._reps])

    def pair(self, a: int, b: int, delta) -> tuple[float, float]:
        """(correctness, coverage) of ``delta`` from group position ``a`` to position ``b`` (a != b)."""
        delta = check_delta(delta, self.n_features)
        R_t = encode(self.encoder, self._members[a] + delta)
        cr = np.mean(_nearest_sq(R_t, self._reps[b], False) <= self.eps)
        cv = np.mean(_nearest_sq(self._reps[b], R_t, False) <= self.eps)
        return float(cr), float(cv)

    def evaluate(self, explanation: Callable[[int, int], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Matrices (l, l) of correctness and coverage of ``explanation(label_i, label_j)``.

        ``[a, b]`` is the metric from group ``labels[a]`` to ``labels[b]``; the diagonal
        holds the self-similarities.
        """
        n = self.labels.size
        cr, cv = np.diag(self.self_similarity), np.diag(self.self_similarity)
        for a in range(n):
            for b in range(n):
                if a != b:
                    cr[a, b], cv[a, b] = self.pair(a, b, explanation(self.labels[a], self.labels[b]))
        return cr, cv


def pairwise_metrics(
    encoder, X, groups, explanation: Callable[[int, int], np.ndarray], eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Correctness and coverage of ``explanation(i, j)`` for every ordered pair of groups.

    Parameters
    ----------
    encoder : callable torch module, (n, d) -> (n, m)
    X : array-like of shape (n, d)
    groups : array-like of shape (n,)
    explanation : callable ``(label_i, label_j) -> ndarray of shape (d,)``
    eps : float

    Returns
    -------
    labels : ndarray of shape (l,)
    correctness : ndarray of shape (l, l)
        ``[a, b]`` is the correctness from group ``labels[a]`` to ``labels[b]``; the
        diagonal holds the self-similarities.
    coverage : ndarray of shape (l, l)
    """
    ev = PairwiseEvaluator(encoder, X, groups, eps)
    cr, cv = ev.evaluate(explanation)
    return ev.labels, cr, cv


def mean_off_diagonal(M: np.ndarray) -> float:
    """Average of a square matrix over its off-diagonal entries (all ordered pairs i != j)."""
    n = M.shape[0]
    return float((M.sum() - np.trace(M)) / (n * (n - 1)))
