"""Centroid-based clustering costs for TAO's joint optimisation.

TAO only needs a cost of the form ``E(Z, Psi) = sum_n d(x_n, psi_{z_n})`` through four
operations, so any centroid-based method plugs in by subclassing :class:`ClusteringCost`:
``point_costs`` (the matrix ``d(x_n, psi_k)``), ``update_centers`` (optimal ``psi`` for fixed
assignments), ``fit_free`` (the unconstrained clustering) and ``total``. The penalised
clustering step ``min_{Z, Psi} E(Z, Psi) + mu * #{n : z_n != zbar_n}`` is then the generic
Lloyd-type :func:`penalised_clustering_step`.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.preprocessing import normalize

from pipeline.validation import InvalidInputError


class ClusteringCost:
    """Interface of a centroid-based clustering cost ``sum_n d(x_n, psi_{z_n})``."""

    def point_costs(self, X: np.ndarray, centers: np.ndarray) -> np.ndarray:
        """``d(x_n, psi_k)``, shape (n_samples, n_clusters)."""
        raise NotImplementedError

    def update_centers(self, X: np.ndarray, labels: np.ndarray, centers: np.ndarray) -> np.ndarray:
        """Optimal centers, shape (n_clusters, n_features), for fixed ``labels``; clusters
        without points keep their row of ``centers``."""
        raise NotImplementedError

    def fit_free(self, X: np.ndarray, n_clusters: int, random_state) -> tuple[np.ndarray, np.ndarray]:
        """Unconstrained clustering: (labels of shape (n_samples,), centers)."""
        raise NotImplementedError

    def validate(self, X: np.ndarray) -> None:
        """Raise InvalidInputError if the cost is undefined on ``X`` (default: always defined)."""

    def total(self, X: np.ndarray, labels: np.ndarray, centers: np.ndarray) -> float:
        """``E(Z, Psi)``."""
        return float(self.point_costs(X, centers)[np.arange(X.shape[0]), labels].sum())


def _group_sums(X: np.ndarray, labels: np.ndarray, n_clusters: int):
    sums = np.zeros((n_clusters, X.shape[1]))
    np.add.at(sums, labels, X)
    return sums, np.bincount(labels, minlength=n_clusters)


class KMeansCost(ClusteringCost):
    """k-means: ``d(x, psi) = ||x - psi||^2``; free clustering by scikit-learn's KMeans.

    Parameters
    ----------
    n_init : int, default=10
        k-means++ restarts of the free clustering.
    """

    def __init__(self, n_init: int = 10):
        self.n_init = n_init

    def point_costs(self, X, centers):
        return euclidean_distances(X, centers, squared=True)

    def update_centers(self, X, labels, centers):
        sums, counts = _group_sums(X, labels, centers.shape[0])
        out = centers.copy()
        out[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
        return out

    def fit_free(self, X, n_clusters, random_state):
        km = KMeans(n_clusters, n_init=self.n_init, random_state=random_state).fit(X)
        labels = km.labels_.astype(np.int64)
        return labels, self.update_centers(X, labels, km.cluster_centers_)


class SphericalKMeansCost(ClusteringCost):
    """Spherical k-means: ``d(x, psi) = 1 - x . psi / ||x||`` with unit-norm centers.

    Rows of X must be non-zero. The free clustering runs Lloyd iterations from
    ``n_init`` k-means++ seedings on the normalised rows and keeps the best.
    """

    def __init__(self, n_init: int = 10, max_iter: int = 300):
        self.n_init = n_init
        self.max_iter = max_iter

    def validate(self, X):
        zero = np.flatnonzero(~np.any(X != 0, axis=1))
        if zero.size:
            raise InvalidInputError(f"spherical k-means needs non-zero rows; rows {zero[:5].tolist()} are all "
                                    "zero. Drop them or use cost='kmeans'.")

    def point_costs(self, X, centers):
        return 1.0 - normalize(X) @ centers.T

    def update_centers(self, X, labels, centers):
        sums, counts = _group_sums(normalize(X), labels, centers.shape[0])
        out = centers.copy()
        ok = (counts > 0) & np.any(sums != 0, axis=1)
        out[ok] = normalize(sums[ok])
        return out

    def fit_free(self, X, n_clusters, random_state):
        rng = np.random.default_rng(random_state)
        Xn = normalize(X)
        best = None
        for _ in range(self.n_init):
            centers, _ = kmeans_plusplus(Xn, n_clusters, random_state=int(rng.integers(2 ** 31 - 1)))
            labels, centers = penalised_clustering_step(self, X, None, normalize(centers), 0.0, self.max_iter)
            cost = self.total(X, labels, centers)
            if best is None or cost < best[0]:
                best = (cost, labels, centers)
        return best[1], best[2]


def penalised_clustering_step(cost: ClusteringCost, X: np.ndarray, labels: np.ndarray | None,
                              centers: np.ndarray, mu: float, max_iter: int = 100,
                              target: np.ndarray | None = None):
    """Lloyd-type minimisation of ``E(Z, Psi) + mu * #{n : z_n != target_n}``.

    Alternates assignments ``z_n = argmin_k d(x_n, psi_k) + mu * [k != target_n]`` and
    center updates until the assignments stop changing (never increases the objective).

    Parameters
    ----------
    labels : ndarray of shape (n_samples,) or None
        Current assignments (None: start from the assignment step).
    centers : ndarray of shape (n_clusters, n_features)
    mu : float
        Penalty per point assigned away from ``target`` (ignored when ``target`` is None).

    Returns
    -------
    labels, centers
    """
    rows = np.arange(X.shape[0])
    for _ in range(max_iter):
        D = cost.point_costs(X, centers)
        if target is not None and mu > 0:
            D += mu
            D[rows, target] -= mu
        new = np.argmin(D, axis=1).astype(np.int64)
        if labels is not None:
            keep = D[rows, labels] <= D[rows, new]  # ties keep the current assignment
            new[keep] = labels[keep]
            if np.array_equal(new, labels):
                break
        labels = new
        centers = cost.update_centers(X, labels, centers)
    return labels, centers
